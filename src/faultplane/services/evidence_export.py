"""Exports: a result set or an Arrow table written as Parquet, CSV, JSON or Arrow IPC, the format from the file's
suffix or named. pyarrow is imported only here, when something is exported.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from faultplane.services.evidence_figures import EvidenceError

# ---- exports -------------------------------------------------------------------------------------------------

EXPORT_FORMATS = ("parquet", "csv", "json", "arrow")
_SUFFIX_FORMAT = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".json": "json",
    ".arrow": "arrow",
    ".feather": "arrow",
    ".ipc": "arrow",
}


def export_format(path: str | Path, fmt: str | None = None) -> str:
    if fmt:
        if fmt not in EXPORT_FORMATS:
            raise EvidenceError(f"format: {fmt!r}; fix: one of {', '.join(EXPORT_FORMATS)}")
        return fmt
    found = _SUFFIX_FORMAT.get(Path(path).suffix.lower())
    if found is None:
        raise EvidenceError(
            f"export: cannot tell the format of {str(path)!r}; fix: end it in .parquet, .csv, .json or .arrow, "
            "or pass --format"
        )
    return found


def export_rows(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], path: str | Path, fmt: str | None = None
) -> Path:
    """Write a result set as Parquet, CSV, JSON (an array of objects) or Arrow IPC (file format)."""
    import pyarrow as pa

    arrays = {}
    for i, c in enumerate(columns):
        values = [_exportable(row[i]) for row in rows]
        try:
            arrays[c] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            # mixed-type columns (JSON values) are kept as their JSON text
            arrays[c] = pa.array([None if v is None else json.dumps(v, default=str) for v in values])
    return export_table(pa.table(arrays), path, fmt)


def export_table(table: Any, path: str | Path, fmt: str | None = None) -> Path:
    """Write a pyarrow Table in one of EXPORT_FORMATS (from `fmt` or the file suffix)."""
    import pyarrow as pa

    fmt = export_format(path, fmt)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "json":
        from faultplane.core.jsonable import to_jsonable

        path.write_text(
            json.dumps(to_jsonable(table.to_pylist()), ensure_ascii=False, indent=1), encoding="utf-8"
        )
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    elif fmt == "csv":
        import pyarrow.csv as pacsv

        # CSV has no lists or structs: nested values are written as their JSON text
        flat = pa.table(
            {
                c: (
                    pa.array(
                        [None if v is None else json.dumps(v, default=str) for v in table[c].to_pylist()],
                        type=pa.string(),
                    )
                    if pa.types.is_nested(table[c].type)
                    else table[c]
                )
                for c in table.column_names
            }
        )
        pacsv.write_csv(flat, path)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    return path


def _exportable(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    return value
