"""Answers of read tools reused while the evidence store has not changed, so a status call costs microseconds.

The store keeps no connection open between operations (other processes must be able to write it), and
opening DuckDB costs 10-20 ms, which made every chaos_status call cost that much and, since the opens
serialise on the store's lock, capped the server near 60 calls/s whatever the concurrency. A read here is
keyed by what it asked and by the store's version: the size and modification time of the database file and
its write-ahead log, and whether runs are queued for indexing. Any write, by this process or another,
changes the version, so a cached answer is never staler than the store. A read that raced a write (the
version moved while it ran) is returned but not kept. Stores without a file (ClickHouse) are not cached.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

__all__ = ["MISS", "StoreReadCache"]

MISS: Any = object()

T = TypeVar("T")
_MAX_ENTRIES = 256


def _stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class StoreReadCache:
    def __init__(self) -> None:
        self._entries: OrderedDict[Hashable, tuple[Hashable, Any]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def version(store: Any) -> Hashable | None:
        from faultplane.core.store import Store

        if not isinstance(store, Store):
            return None  # ClickHouse: no file whose change would tell
        db = str(store.path)
        stat = _stat(db)
        if stat is None or store.has_pending():
            return None  # no database yet, or the next read indexes queued runs (a write)
        return (db, stat, _stat(db + ".wal"))

    def peek(self, store: Any, key: Hashable) -> Any:
        """The cached answer while it is current, else MISS; never touches the database (safe in the loop)."""
        version = self.version(store)
        if version is None:
            return MISS
        with self._lock:
            hit = self._entries.get(key)
        return hit[1] if hit is not None and hit[0] == version else MISS

    def get(self, store: Any, key: Hashable, compute: Callable[[], T]) -> T:
        before = self.version(store)
        if before is not None:
            with self._lock:
                hit = self._entries.get(key)
                if hit is not None and hit[0] == before:
                    self._entries.move_to_end(key)
                    return hit[1]
        value = compute()
        after = self.version(store)
        if after is not None and (before is None or after == before):
            # before None: this read indexed queued runs; `after` is the version that includes them.
            with self._lock:
                self._entries[key] = (after, value)
                self._entries.move_to_end(key)
                while len(self._entries) > _MAX_ENTRIES:
                    self._entries.popitem(last=False)
        return value
