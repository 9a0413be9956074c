"""What every evidence store does alike, whatever its engine: the `EvidenceStore` protocol callers program
against, and `JournalStore`, the base the DuckDB file store (`core.store`) and the ClickHouse store (server or
chDB, `core.clickhouse_store`) build on.

The base decides how a finished run reaches the store, once for both engines:
- `queue_journal` leaves a marker beside the journal file first (the file is the record); `flush` writes what is
  queued. A marker or journal that cannot be read or indexed is set aside as `<run>.rejected` with one warning
  line, so it never blocks later operations; a store that cannot be reached keeps its queue for the next one.
- `write_journal` writes the rows `core.journal_rows` derives: the run's own rows replace its earlier ones in
  one step, then its exposure rows, whose failure costs the stage the run would earn, never the run's record.

An engine supplies only its dialect: `replace_rows` (a transaction on DuckDB, a newer row version on
ClickHouse), `writing` (what is held while a run is written), `_recorded` (what else learns of a written run)
and `_unreachable` (which errors mean the store, not the journal, failed).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

__all__ = ["STORE_URL_SCHEMES", "EvidenceStore", "JournalStore", "is_clickhouse_url", "redact_url"]

_log = logging.getLogger("faultplane.store")

CLICKHOUSE_HTTP_SCHEMES = ("clickhouse", "clickhouses", "clickhouse+http", "clickhouse+https")
STORE_URL_SCHEMES = (*CLICKHOUSE_HTTP_SCHEMES, "chdb")


def is_clickhouse_url(value: object) -> bool:
    """True for a `clickhouse://`-family or `chdb://` URL (a store on ClickHouse), False for a file path."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return isinstance(value, str) and "://" in value and value.split("://", 1)[0].lower() in STORE_URL_SCHEMES


def redact_url(url: str) -> str:
    """The URL without its password, for messages."""
    return re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", url)


class EvidenceStore(Protocol):
    """What services may ask of any store: SQL in the store's dialect (`dialect` names it) and finished runs."""

    dialect: str
    pending_dir: Path
    path: Any  # a file path (DuckDB), a URL without credentials (ClickHouse)

    def query(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None, *, read_only: bool = False
    ) -> list[dict[str, Any]]: ...

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> None: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...

    def insert(self, table: str, rows: Iterable[Mapping[str, Any]]) -> int: ...

    def ensure_schema(self, owner: str, migrations: Sequence[tuple[str, Sequence[str]]]) -> None: ...

    def batch(self) -> AbstractContextManager[None]: ...

    def replace_rows(
        self, tables: Mapping[str, list[dict[str, Any]]], *, key: str = "run_id", keys: Iterable[Any] = ()
    ) -> None: ...

    def writing(self) -> AbstractContextManager[Any]: ...

    def write_journal(
        self, j: Any, body: str | None = None, journal_path: str | None = None, blast_stage: int | None = None
    ) -> None: ...

    def queue_journal(
        self, journal_path: str | os.PathLike[str], run_id: str, blast_stage: int | None
    ) -> None: ...

    def has_pending(self) -> bool: ...

    def flush(self) -> None: ...


class JournalStore:
    """The engine-independent half of a store: the pending queue and the one journal-row writer."""

    dialect: str
    pending_dir: Path
    path: Any  # where the store is: a file path (DuckDB), a URL without credentials (ClickHouse)

    # ---- the engine's dialect ------------------------------------------------------------------------------
    def writing(self) -> AbstractContextManager[Any]:
        """Held while a run's rows are written: no other writer of this store interleaves."""
        return contextlib.nullcontext()

    def replace_rows(
        self, tables: Mapping[str, list[dict[str, Any]]], *, key: str = "run_id", keys: Iterable[Any] = ()
    ) -> None:
        """Write the tables' rows replacing earlier rows of the same `key` values (those of the rows, and
        `keys`: a run whose new rows in a table are none still loses its old ones there), as one step."""
        raise NotImplementedError

    def _recorded(self, doc: dict[str, Any], blast_stage: int | None) -> None:
        """A run's rows were written (inside `writing()`): its journal as a JSON dict, the stage its row has."""

    def _unreachable(self, exc: BaseException) -> bool:
        """True when `exc` means the store failed (keep the queue), not the journal (set it aside)."""
        return False

    def _queued(self, run_id: str, journal_path: str) -> None:
        """A marker was left for this run."""

    # ---- finished runs -------------------------------------------------------------------------------------
    def write_journal(
        self, j: Any, body: str | None = None, journal_path: str | None = None, blast_stage: int | None = None
    ) -> None:
        """Index a finished run's journal (a `Journal` or its JSON dict) now."""
        # here, not at the top: a run only queues its journal, and need not load the row writer
        from faultplane.core.journal_rows import exposure_table, run_tables

        doc = j.model_dump(mode="json") if hasattr(j, "model_dump") else dict(j)
        tables = run_tables(doc, body=body, journal_path=journal_path, blast_stage=blast_stage)
        run_id = doc["run_id"]
        with self.writing():
            self.replace_rows(tables, keys=[run_id])
            try:
                self.replace_rows({"exposures": exposure_table(doc, blast_stage)}, keys=[run_id])
            except Exception as exc:
                _log.warning("run %s: exposure rows not written (%s): its stage is not earned", run_id, exc)
            self._recorded(doc, tables["runs"][0]["blast_stage"])

    def persist_journal(
        self, j: Any, body: str | None = None, journal_path: str | None = None, blast_stage: int | None = None
    ) -> None:
        """`write_journal` under the name the ClickHouse store first had."""
        self.write_journal(j, body, journal_path, blast_stage)

    # ---- finished runs, queued -----------------------------------------------------------------------------
    def queue_journal(
        self, journal_path: str | os.PathLike[str], run_id: str, blast_stage: int | None
    ) -> None:
        """Index a finished run's journal file soon: a marker first, the rows when the engine decides."""
        self.pending_dir.mkdir(parents=True, exist_ok=True)
        marker = self.pending_dir / f"{run_id}.json"
        tmp = self.pending_dir / f"{run_id}.tmp"
        # absolute: the process that writes the rows may run from another directory
        journal = os.path.abspath(journal_path)
        spec = {"journal": journal, "blast_stage": blast_stage, "store": str(self.path)}
        tmp.write_text(json.dumps(spec), encoding="utf-8")
        tmp.replace(marker)
        self._queued(run_id, journal)

    def has_pending(self) -> bool:
        try:
            with os.scandir(self.pending_dir) as it:
                return any(e.name.endswith(".json") for e in it)
        except FileNotFoundError:
            return False

    def _write_pending(self, *, raise_errors: bool = False) -> None:
        """Write every queued journal; stop at the first the store cannot take (raising it if asked)."""
        from faultplane.core.hostile import HostileInput, json_file_or_none, read_text_limited
        from faultplane.core.model import Journal

        for marker in sorted(self.pending_dir.glob("*.json")):
            # a marker, and the journal it points at, are files anyone could have put there
            spec = json_file_or_none(marker)
            if not isinstance(spec, dict) or not isinstance(spec.get("journal"), str):
                if marker.exists():  # else another process wrote it meanwhile
                    self._set_aside(marker, "not a pending-journal marker")
                continue
            try:
                body = read_text_limited(spec["journal"], "journal")
            except FileNotFoundError:  # another process wrote it, or the journal file was deleted
                marker.unlink(missing_ok=True)
                continue
            except (OSError, HostileInput) as exc:
                self._set_aside(marker, f"could not index {spec['journal']} ({exc})")
                continue
            try:
                journal = Journal.model_validate_json(body)
                self.write_journal(journal, body, spec["journal"], spec.get("blast_stage"))
            except Exception as exc:
                if self._unreachable(exc):
                    if raise_errors:
                        raise
                    return
                self._set_aside(marker, f"could not index {spec['journal']} ({exc})")
                continue
            marker.unlink(missing_ok=True)

    def _set_aside(self, marker: Path, why: str) -> None:
        """A journal that cannot be indexed must not make every later store operation fail: keep its marker
        where a person sees it (the journal file itself is untouched) and carry on."""
        rejected = marker.with_suffix(".rejected")
        with contextlib.suppress(FileNotFoundError):
            marker.replace(rejected)
        _log.warning("store %s: %s; marker kept as %s", self.path, why, rejected.name)
