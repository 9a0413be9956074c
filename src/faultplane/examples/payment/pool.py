"""A resizable database connection pool: real PostgreSQL connections, or an embedded pool with the same semantics.

Both pools hand out at most `size` connections; a caller waits in FIFO order up to `acquire_timeout_s` and then
gets `PoolTimeout` (the "pool exhausted" error of HikariCP, SQLAlchemy and friends). Shrinking the pool never
interrupts a connection in use: surplus connections are closed as they come back, exactly as real pools retire
them. `work(conn, seconds)` is the query a payment runs while it holds the connection.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from typing import Any

__all__ = ["EmbeddedPool", "Pool", "PoolTimeout", "PostgresPool", "make_pool"]


class PoolTimeout(Exception):
    """No connection became free within the acquire timeout."""


class Pool:
    """The waiting and sizing logic shared by both pools; subclasses open, close and use connections."""

    kind = "abstract"

    def __init__(self, size: int, acquire_timeout_s: float) -> None:
        if size < 1:
            raise ValueError("pool size must be at least 1")
        self.size = size
        self.acquire_timeout_s = acquire_timeout_s
        self._cond = threading.Condition()
        self._idle: list[Any] = []
        self._open = 0  # connections in existence: idle + in use
        self._waiters: collections.deque[object] = collections.deque()
        self.in_use = 0
        self.timeouts = 0
        self.acquired = 0

    # connection lifecycle, overridden
    def _new(self) -> Any:
        raise NotImplementedError

    def _close(self, conn: Any) -> None:
        pass

    def work(self, conn: Any, seconds: float) -> None:
        raise NotImplementedError

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def acquire(self) -> tuple[Any, float]:
        """A connection and the seconds spent waiting for it; raises PoolTimeout."""
        start = time.monotonic()
        deadline = start + self.acquire_timeout_s
        me = object()
        with self._cond:
            self._waiters.append(me)
            try:
                while True:
                    # FIFO: only the head of the queue may take a connection, so no waiter starves
                    if self._waiters[0] is me and self.in_use < self.size:
                        if self._idle:
                            conn = self._idle.pop()
                            break
                        if self._open < self.size:
                            self._open += 1
                            conn = None  # opened below, outside the lock
                            break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self.timeouts += 1
                        raise PoolTimeout(f"no connection within {self.acquire_timeout_s * 1000:.0f} ms")
                    self._cond.wait(left)
            finally:
                self._waiters.remove(me)
                self._cond.notify_all()
            self.in_use += 1
            self.acquired += 1
        if conn is None:
            try:
                conn = self._new()
            except BaseException:
                with self._cond:
                    self._open -= 1
                    self.in_use -= 1
                    self._cond.notify_all()
                raise
        return conn, time.monotonic() - start

    def release(self, conn: Any, broken: bool = False) -> None:
        close = False
        with self._cond:
            self.in_use -= 1
            if broken or self._open > self.size:
                self._open -= 1
                close = True
            else:
                self._idle.append(conn)
            self._cond.notify_all()
        if close:
            self._close(conn)

    def resize(self, size: int) -> int:
        """Set the pool size; returns the previous one. Idle surplus connections close at once."""
        if size < 1:
            raise ValueError("pool size must be at least 1")
        surplus = []
        with self._cond:
            previous, self.size = self.size, size
            while self._open > self.size and self._idle:
                surplus.append(self._idle.pop())
                self._open -= 1
            self._cond.notify_all()
        for conn in surplus:
            self._close(conn)
        return previous

    def prefill(self) -> None:
        conns = []
        for _ in range(self.size):
            conns.append(self.acquire()[0])
        for conn in conns:
            self.release(conn)

    def close(self) -> None:
        with self._cond:
            idle, self._idle = self._idle, []
        for conn in idle:
            self._close(conn)


class EmbeddedPool(Pool):
    """Connections are tokens and the query is a sleep: the same queueing, no database needed."""

    kind = "embedded"

    def _new(self) -> Any:
        return object()

    def work(self, conn: Any, seconds: float) -> None:
        time.sleep(seconds)


class PostgresPool(Pool):
    """Real PostgreSQL connections; the query is `SELECT pg_sleep(...)` run on the held connection."""

    kind = "postgres"

    def __init__(self, size: int, acquire_timeout_s: float, dsn: str) -> None:
        super().__init__(size, acquire_timeout_s)
        self.dsn = dsn

    def _new(self) -> Any:
        import psycopg

        return psycopg.connect(
            self.dsn, autocommit=True, connect_timeout=5, application_name="faultplane-payment"
        )

    def _close(self, conn: Any) -> None:
        with contextlib.suppress(Exception):
            conn.close()

    def work(self, conn: Any, seconds: float) -> None:
        conn.execute("SELECT pg_sleep(%s)", [seconds])


def make_pool(size: int, acquire_timeout_s: float, dsn: str | None) -> Pool:
    if dsn:
        return PostgresPool(size, acquire_timeout_s, dsn)
    return EmbeddedPool(size, acquire_timeout_s)
