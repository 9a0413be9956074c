"""Versioned store schema, written once in DuckDB DDL and translated for ClickHouse.

Each owner (core, evidence, plane, faults, ...) has an ordered list of named migrations; a store applies each one
once and records it in `schema_migrations (owner, name, applied_at)`. The names are the versions: never edit or
reorder a published migration, append a new one (`ALTER TABLE ... ADD COLUMN ...`).

The DuckDB statements are the single source of truth. `to_clickhouse` turns the subset Faultplane uses
(`CREATE TABLE IF NOT EXISTS` with plain column types, `ALTER TABLE ... ADD COLUMN`) into ClickHouse DDL, so both
engines have the same tables and columns. Two differences are deliberate and documented in docs/evidence.md:
timestamps are `Float64` seconds since the epoch on ClickHouse (DateTime64 does not exist before ClickHouse 20.1,
and DateTime has one-second resolution), and tables with a key are `ReplacingMergeTree` with an extra `_version`
column (ClickHouse has no cheap UPDATE/DELETE; a re-written run is a newer version of the same key).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from faultplane.core.splitting import split_outside_parens

__all__ = [
    "BOOLEAN_COLUMNS",
    "CLICKHOUSE_ORDER_KEYS",
    "CORE_MIGRATIONS",
    "EVIDENCE_MIGRATIONS",
    "TIMESTAMP_COLUMNS",
    "Migration",
    "MigrationError",
    "to_clickhouse",
]

Migration = tuple[str, Sequence[str]]


class MigrationError(ValueError):
    """A DuckDB statement outside the subset that can be translated to ClickHouse."""


CORE_MIGRATIONS: list[Migration] = [
    (
        "core-001",
        [
            """CREATE TABLE IF NOT EXISTS runs (
                run_id VARCHAR PRIMARY KEY,
                experiment_title VARCHAR,
                experiment_family VARCHAR,
                content_hash VARCHAR,
                status VARCHAR,
                dry_run BOOLEAN,
                steady_state_before BOOLEAN,
                steady_state_after BOOLEAN,
                started_at TIMESTAMPTZ,
                ended_at TIMESTAMPTZ,
                duration_s DOUBLE,
                error VARCHAR,
                seed BIGINT,
                controller_pid INTEGER,
                journal_path VARCHAR,
                tags VARCHAR[],
                blast_stage INTEGER,
                verdict VARCHAR
            )""",
            """CREATE TABLE IF NOT EXISTS activities (
                run_id VARCHAR,
                seq INTEGER,
                phase VARCHAR,
                name VARCHAR,
                type VARCHAR,
                status VARCHAR,
                started_at TIMESTAMPTZ,
                ended_at TIMESTAMPTZ,
                duration_s DOUBLE,
                output VARCHAR,
                error VARCHAR
            )""",
            """CREATE TABLE IF NOT EXISTS journals (
                run_id VARCHAR PRIMARY KEY,
                written_at TIMESTAMPTZ,
                body VARCHAR
            )""",
            """CREATE TABLE IF NOT EXISTS audit (
                ts TIMESTAMPTZ,
                actor VARCHAR,
                action VARCHAR,
                subject VARCHAR,
                details VARCHAR
            )""",
        ],
    ),
    (
        # what each run really injected, per target and fault kind: the staged blast radius reads it
        # (core.exposure). `green` is 0/1, not a boolean: old ClickHouse servers have no boolean literals
        "core-002",
        [
            """CREATE TABLE IF NOT EXISTS exposures (
                run_id VARCHAR,
                seq INTEGER,
                target VARCHAR,
                fault_kind VARCHAR,
                stage INTEGER,
                green INTEGER,
                started_at TIMESTAMPTZ
            )""",
        ],
    ),
]

# One row per finished run with the figures the evidence service scores and trends on, derived from the journal
# when it is indexed (faultplane.services.evidence.index_journals), so that trends over 100k runs never parse a
# journal body.
EVIDENCE_MIGRATIONS: list[Migration] = [
    (
        "evidence-001",
        [
            """CREATE TABLE IF NOT EXISTS run_metrics (
                run_id VARCHAR PRIMARY KEY,
                experiment_key VARCHAR,
                experiment_title VARCHAR,
                status VARCHAR,
                passed BOOLEAN,
                dry_run BOOLEAN,
                started_at TIMESTAMPTZ,
                duration_s DOUBLE,
                recovery_met BOOLEAN,
                time_to_recover_s DOUBLE,
                recovery_window_s DOUBLE,
                est_recovery_s DOUBLE,
                est_error_rate DOUBLE,
                est_latency_p99_ms DOUBLE,
                actual_error_rate DOUBLE,
                actual_latency_p99_ms DOUBLE,
                gate_breached BOOLEAN,
                fault_types VARCHAR[],
                blast_stage INTEGER,
                run_score DOUBLE
            )""",
        ],
    ),
]

# ClickHouse sorting keys for tables without a primary key whose rows are still re-written per run.
CLICKHOUSE_ORDER_KEYS: dict[str, tuple[str, ...]] = {
    "activities": ("run_id", "seq"),
    "exposures": ("run_id", "seq"),
}

_TYPES = {
    "VARCHAR": "String",
    "TEXT": "String",
    "DOUBLE": "Float64",
    "FLOAT": "Float64",
    "REAL": "Float32",
    "BIGINT": "Int64",
    "INTEGER": "Int32",
    "INT": "Int32",
    "SMALLINT": "Int16",
    "BOOLEAN": "UInt8",
    "BOOL": "UInt8",
    "TIMESTAMPTZ": "Float64",
    "TIMESTAMP": "Float64",
}

# Columns holding timestamps and booleans, by table: ClickHouseStore converts them to and from epoch seconds and
# UInt8, so callers see the same Python values from both engines.
TIMESTAMP_COLUMNS: dict[str, set[str]] = {}
BOOLEAN_COLUMNS: dict[str, set[str]] = {}

_CREATE = re.compile(
    r"^\s*CREATE\s+TABLE\s+(IF\s+NOT\s+EXISTS\s+)?(?P<name>\w+)\s*\((?P<body>.*)\)\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)
_ADD = re.compile(
    r"^\s*ALTER\s+TABLE\s+(?P<name>\w+)\s+ADD\s+COLUMN\s+(IF\s+NOT\s+EXISTS\s+)?(?P<col>.+?)\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)
_COLUMN = re.compile(
    r"^(?P<name>\w+)\s+(?P<type>[A-Za-z]+(?:\s*\[\s*\])?)(?P<rest>.*)$", re.IGNORECASE | re.DOTALL
)


def _column(table: str, spec: str, key: tuple[str, ...] = ()) -> tuple[str, str, bool]:
    """(name, ClickHouse column definition, is primary key) for one DuckDB column definition."""
    m = _COLUMN.match(spec.strip())
    if not m:
        raise MigrationError(
            f"table {table}: cannot translate column definition {spec.strip()!r} to ClickHouse"
        )
    name, duck_type, rest = m["name"], m["type"].upper().replace(" ", ""), m["rest"].strip()
    is_list = duck_type.endswith("[]")
    base = duck_type.removesuffix("[]")
    if base not in _TYPES:
        raise MigrationError(
            f"table {table}, column {name}: type {duck_type} has no ClickHouse mapping; "
            f"use one of {', '.join(sorted(_TYPES))} (or a list of one)"
        )
    if base.startswith("TIMESTAMP"):
        TIMESTAMP_COLUMNS.setdefault(table, set()).add(name)
    elif base.startswith("BOOL"):
        BOOLEAN_COLUMNS.setdefault(table, set()).add(name)
    rest_upper = rest.upper()
    pk = "PRIMARY KEY" in rest_upper
    default = ""
    dm = re.search(r"DEFAULT\s+(.+)$", rest, re.IGNORECASE)
    if dm:
        value = dm.group(1).strip()
        default = (
            " DEFAULT toFloat64(now())"
            if value.lower() in ("now()", "current_timestamp")
            else f" DEFAULT {value}"
        )
    leftover = re.sub(r"PRIMARY\s+KEY|NOT\s+NULL|DEFAULT\s+.+$", "", rest, flags=re.IGNORECASE).strip()
    if leftover:
        raise MigrationError(f"table {table}, column {name}: cannot translate {leftover!r} to ClickHouse")
    ch = _TYPES[base]
    if is_list:
        ch_type = f"Array({ch})"  # ClickHouse arrays cannot be Nullable: NULL lists are stored empty
    elif pk or name in key or "NOT NULL" in rest_upper:
        ch_type = ch
    else:
        ch_type = f"Nullable({ch})"
    return name, f"{name} {ch_type}{default}", pk


def to_clickhouse(statement: str) -> list[str]:
    """ClickHouse statements equivalent to one DuckDB migration statement (CREATE TABLE / ADD COLUMN)."""
    m = _CREATE.match(statement)
    if m:
        table = m["name"]
        cols, keys = [], []
        for spec in split_outside_parens(m["body"]):
            if re.match(r"^\s*PRIMARY\s+KEY\s*\(", spec, re.IGNORECASE):
                keys += [k.strip() for k in spec[spec.index("(") + 1 : spec.rindex(")")].split(",")]
                continue
            name, definition, pk = _column(table, spec, CLICKHOUSE_ORDER_KEYS.get(table, ()))
            cols.append(definition)
            if pk:
                keys.append(name)
        if keys:
            cols.append("_version UInt64 DEFAULT 0")
            engine = f"ReplacingMergeTree(_version) ORDER BY ({', '.join(keys)})"
        elif table in CLICKHOUSE_ORDER_KEYS:
            cols.append("_version UInt64 DEFAULT 0")
            engine = f"ReplacingMergeTree(_version) ORDER BY ({', '.join(CLICKHOUSE_ORDER_KEYS[table])})"
        else:
            engine = "MergeTree ORDER BY tuple()"
        body = ",\n    ".join(cols)
        return [f"CREATE TABLE IF NOT EXISTS {table} (\n    {body}\n) ENGINE = {engine}"]
    m = _ADD.match(statement)
    if m:
        _, definition, _ = _column(m["name"], m["col"])
        # no IF NOT EXISTS: ClickHouse before 19.x lacks it; ClickHouseStore skips columns already there
        return [f"ALTER TABLE {m['name']} ADD COLUMN {definition}"]
    raise MigrationError(
        f"cannot translate {statement.strip()[:80]!r} to ClickHouse: migrations may only CREATE TABLE IF NOT "
        "EXISTS or ALTER TABLE ... ADD COLUMN with the column types listed in faultplane.core.migrations"
    )


def register_timestamp_columns(migrations: Sequence[Migration]) -> None:
    """Learn which columns hold timestamps without touching a database (for the ClickHouse store's conversions)."""
    for _, statements in migrations:
        for stmt in statements:
            if isinstance(stmt, str) and (_CREATE.match(stmt) or _ADD.match(stmt)):
                to_clickhouse(stmt)


register_timestamp_columns(CORE_MIGRATIONS)
register_timestamp_columns(EVIDENCE_MIGRATIONS)
