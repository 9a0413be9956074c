"""Importing journal files into a store: what `faultplane journal import` reads, and which ingest path takes it.

Journals reach a central store from many machines as files: one journal per `.json` file (what
`faultplane run --journal` and `journal export --format faultplane` write) or one per line in `.ndjson`/`.jsonl`
files (a fleet's shipping format). On DuckDB, NDJSON goes straight to the bulk reader (`evidence_bulk`, no Python
per journal) and `.json` files are first written as NDJSON lines into a scratch file; on ClickHouse (server or
chDB) every journal goes through `evidence.ingest_journals`. Files are taken in the order given (a directory's
journal files sorted by path), so a run found twice keeps the journal read last, as on every ingest path.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faultplane.services.evidence_figures import EvidenceError

__all__ = ["ImportResult", "import_journal_files", "journal_files", "spool_stdin"]

# gzip'ed NDJSON as fleets ship it: DuckDB's readers and Python's gzip read it as it is
NDJSON_SUFFIXES = (".ndjson", ".jsonl", ".ndjson.gz", ".jsonl.gz")
JOURNAL_SUFFIXES = (".json", *NDJSON_SUFFIXES)
# one journal file (or line) larger than this is refused: the bulk reader's own object limit
_MAX_JOURNAL_BYTES = 64 * 1024 * 1024
_READABLE = "pass a journal file this user can read"
_NOT_A_JOURNAL = (
    "fix: pass Faultplane journals (a JSON object with a run_id: `faultplane run --journal`, "
    "`faultplane journal export RUN --format faultplane`), one per .json file or one per line of .ndjson/.jsonl"
)


@dataclass(frozen=True)
class ImportResult:
    journals: int
    files: int
    bytes: int
    seconds: float
    store: str
    path: str  # "bulk" (DuckDB's NDJSON reader) or "python" (evidence.ingest_journals)

    @property
    def per_second(self) -> float:
        return self.journals / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "journals": self.journals,
            "files": self.files,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "journals_per_second": round(self.per_second),
            "store": self.store,
            "ingest_path": self.path,
        }


def spool_stdin(stream: Any, folder: Path) -> Path:
    """NDJSON journals piped in (`journal import -`), plain or gzip'ed, copied to a file in `folder` that the
    readers take like any other: DuckDB's reader needs a file it can read twice."""
    head = stream.read(2)
    if not head:
        raise EvidenceError("-: nothing came on standard input; fix: pipe NDJSON journals in, one per line")
    path = folder / ("stdin.ndjson.gz" if head == b"\x1f\x8b" else "stdin.ndjson")
    with path.open("wb") as out:
        out.write(head)
        shutil.copyfileobj(stream, out, 1024 * 1024)
    return path


def journal_files(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The journal files `paths` name: files as given (any suffix), directories searched for .json, .ndjson and
    .jsonl files, the NDJSON ones gzip'ed too (sorted, hidden ones skipped). Refuses a missing path and a selection with no file at all."""
    if not paths:
        raise EvidenceError("paths: none given; fix: name journal files or folders holding them")
    found: list[Path] = []
    for raw in paths:
        p = Path(raw).expanduser()
        if p.is_dir():
            found += sorted(
                f
                for f in p.rglob("*")
                if f.name.lower().endswith(JOURNAL_SUFFIXES)
                and f.is_file()
                and not any(part.startswith(".") for part in f.relative_to(p).parts)
            )
        elif p.is_file():
            found.append(p)
        elif p.exists():
            raise EvidenceError(f"paths: {p} is not a regular file or a folder; fix: name journal files")
        else:
            raise EvidenceError(f"paths: {p} does not exist; fix: name journal files or folders holding them")
    if not found:
        raise EvidenceError(
            f"paths: no .json, .ndjson or .jsonl file (or .ndjson.gz, .jsonl.gz) in {', '.join(str(p) for p in paths)}; "
            "fix: name journal files or folders holding them"
        )
    return found


def _is_ndjson(path: Path) -> bool:
    return path.name.lower().endswith(NDJSON_SUFFIXES)


def _checked(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("run_id"), str) or not value["run_id"]:
        raise EvidenceError(f"{where}: not a Faultplane journal; {_NOT_A_JOURNAL}")
    return value


def _json_file_journals(path: Path) -> list[dict[str, Any]]:
    """The journals of a .json file: one journal, or a list of them."""
    size = path.stat().st_size
    if size > _MAX_JOURNAL_BYTES:
        raise EvidenceError(
            f"{path}: {size:,} bytes, more than a journal file may hold ({_MAX_JOURNAL_BYTES:,}); "
            "fix: ship large sets of journals as NDJSON (one journal per line)"
        )
    try:
        data = json.loads(path.read_bytes())
    except UnicodeDecodeError as exc:
        raise EvidenceError(
            f"{path}: not UTF-8 text (byte {exc.start}); fix: journals are UTF-8 JSON"
        ) from None
    except json.JSONDecodeError as exc:
        raise EvidenceError(
            f"{path}:{exc.lineno}:{exc.colno}: invalid JSON ({exc.msg}); {_NOT_A_JOURNAL}"
        ) from None
    except RecursionError:
        raise EvidenceError(f"{path}: nested too deeply to be a journal; {_NOT_A_JOURNAL}") from None
    except OSError as exc:
        raise EvidenceError(f"{path}: cannot be read ({exc.strerror or exc}); fix: {_READABLE}") from None
    items = data if isinstance(data, list) else [data]
    return [_checked(j, f"{path}" if len(items) == 1 else f"{path} item {i}") for i, j in enumerate(items)]


def _ndjson_file_journals(path: Path) -> Iterator[dict[str, Any]]:
    try:
        with gzip.open(path, "rb") if path.name.lower().endswith(".gz") else path.open("rb") as fh:
            yield from _ndjson_lines(path, fh)
    except (gzip.BadGzipFile, EOFError) as exc:
        raise EvidenceError(
            f"{path}: not a whole gzip file ({exc}); fix: gzip it again, or pass it unzipped"
        ) from None
    except OSError as exc:
        raise EvidenceError(f"{path}: cannot be read ({exc.strerror or exc}); fix: {_READABLE}") from None


def _ndjson_lines(path: Path, fh: Any) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(fh, 1):
        if not line.strip():
            continue
        if len(line) > _MAX_JOURNAL_BYTES:
            raise EvidenceError(
                f"{path}:{number}: a line over {_MAX_JOURNAL_BYTES:,} bytes; {_NOT_A_JOURNAL}"
            )
        try:
            value = json.loads(line)
        except UnicodeDecodeError as exc:
            raise EvidenceError(
                f"{path}:{number}: not UTF-8 text (byte {exc.start}); fix: journals are UTF-8 JSON"
            ) from None
        except json.JSONDecodeError as exc:
            raise EvidenceError(f"{path}:{number}: invalid JSON ({exc.msg}); {_NOT_A_JOURNAL}") from None
        yield _checked(value, f"{path}:{number}")


def _python_ingest(store: Any, files: list[Path], on_progress: Callable[[int, int], None] | None) -> int:
    """All files' journals as one stream, so batches (and a run given twice within one) span files as in the bulk
    path; progress is told as each file has been read."""
    from faultplane.services.evidence import ingest_journals

    def journals() -> Iterator[dict[str, Any]]:
        for path in files:
            read = 0
            for j in _ndjson_file_journals(path) if _is_ndjson(path) else _json_file_journals(path):
                read += 1
                yield j
            if on_progress is not None:
                on_progress(read, path.stat().st_size)

    return ingest_journals(store, journals())


def _bulk_ingest(store: Any, files: list[Path], on_progress: Callable[[int, int], None] | None) -> int:
    """NDJSON files as they are; each run of consecutive .json files as one scratch NDJSON file in their place,
    so the order of the files (which journal of a run is kept) is the order given. Progress is told in the bytes
    of the files given (a scratch file weighs what the .json files written into it do)."""
    from faultplane.services.evidence_bulk import ingest_ndjson

    with tempfile.TemporaryDirectory(prefix="faultplane-import-") as scratch:
        ordered: list[Path] = []
        weight: dict[
            str, int
        ] = {}  # each file ingest_ndjson reads -> the bytes of the given files it stands for
        current: Path | None = None  # the scratch file the .json files since the last NDJSON file go to
        for path in files:
            if _is_ndjson(path):
                current = None
                ordered.append(path)
                weight[str(path)] = weight.get(str(path), 0) + path.stat().st_size
                continue
            if current is None:
                current = Path(scratch) / f"{len(ordered):06d}.ndjson"
                ordered.append(current)
            with current.open("a", encoding="utf-8") as out:
                for j in _json_file_journals(path):
                    # compact, and without a raw line break (json.dumps escapes them inside strings)
                    out.write(json.dumps(j, ensure_ascii=False, separators=(",", ":")) + "\n")
            weight[str(current)] = weight.get(str(current), 0) + path.stat().st_size

        def batch_done(journals: int, batch: list[str]) -> None:
            if on_progress is not None:
                on_progress(journals, sum(weight.pop(p, 0) for p in batch))

        return ingest_ndjson(store, ordered, on_batch=batch_done)


def import_journal_files(
    store: Any,
    paths: Sequence[str | os.PathLike[str]],
    *,
    on_progress: Callable[[int, int], None] | None = None,
) -> ImportResult:
    """Write every journal in the files (or folders) `paths` name to `store`, replacing earlier rows of the same
    runs. `on_progress(journals, file_bytes)` is called as parts are committed. Bad input raises EvidenceError
    naming the file (and line) and the fix; on DuckDB, a failing batch leaves nothing of itself."""
    files = journal_files(paths)
    size = sum(f.stat().st_size for f in files)
    bulk = getattr(store, "dialect", "duckdb") == "duckdb"
    started = time.perf_counter()
    n = _bulk_ingest(store, files, on_progress) if bulk else _python_ingest(store, files, on_progress)
    return ImportResult(
        journals=n,
        files=len(files),
        bytes=size,
        seconds=time.perf_counter() - started,
        store=str(store.path),  # without credentials (a ClickHouse URL's password is left out)
        path="bulk" if bulk else "python",
    )
