"""Bulk ingest of journal files into a DuckDB store, at fleet rates: DuckDB's own JSON reader, no Python per journal.

`evidence.ingest_journals` derives each journal's rows in Python (about 3,000 journals/s); here DuckDB reads
newline-delimited journal files in parallel and derives the same `runs`, `activities`, `journals` and
`run_metrics` rows in SQL. The SQL mirrors `evidence.run_metrics_row` and `store_clickhouse.journal_rows` rule for
rule (tests/evidence/test_bulk_ingest.py checks both give the same rows on generated journals); when one of those
changes, this changes with it.

Each journal is parsed once, by `read_json` with the typed structure below (the activity lists become lists of
structs, so no field is extracted from JSON text twice); its text comes from the same files read again as lines
(`read_csv`), each stored under the run id it names where every journal read is written, else paired line for line
(POSITIONAL JOIN; `read_ndjson_objects` where the lines do not pair up).
Fields whose JSON type decides the row (truthiness in Python, objects read only when they are objects) stay JSON.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from faultplane.core.migrations import EVIDENCE_MIGRATIONS
from faultplane.services.evidence import FAULT_TYPES, EvidenceError

__all__ = ["ingest_ndjson"]

# JSON helpers: a JSON null is a value in DuckDB's JSON type, not SQL NULL, and Python's truthiness differs from SQL's
_MACROS = [
    "CREATE OR REPLACE TEMP MACRO fp_nn(x) AS CASE WHEN json_type(x) = 'NULL' THEN NULL ELSE x END",
    "CREATE OR REPLACE TEMP MACRO fp_num(x) AS "
    "CASE WHEN json_type(x) IN ('DOUBLE', 'BIGINT', 'UBIGINT') THEN x::DOUBLE END",
    "CREATE OR REPLACE TEMP MACRO fp_str(x) AS CASE WHEN json_type(x) = 'VARCHAR' THEN x ->> '$' END",
    "CREATE OR REPLACE TEMP MACRO fp_obj(x) AS CASE WHEN json_type(x) = 'OBJECT' THEN x END",
    "CREATE OR REPLACE TEMP MACRO fp_truthy(x) AS coalesce(CASE json_type(x) "
    "WHEN 'BOOLEAN' THEN x::BOOLEAN WHEN 'OBJECT' THEN len(json_keys(x)) > 0 "
    "WHEN 'ARRAY' THEN json_array_length(x) > 0 WHEN 'VARCHAR' THEN (x ->> '$') <> '' "
    "WHEN 'DOUBLE' THEN x::DOUBLE <> 0 WHEN 'BIGINT' THEN x::DOUBLE <> 0 WHEN 'UBIGINT' THEN x::DOUBLE <> 0 "
    "ELSE false END, false)",
    "CREATE OR REPLACE TEMP MACRO fp_list(x) AS "
    "CASE WHEN json_type(x) = 'ARRAY' THEN from_json(x, '[\"json\"]') ELSE []::JSON[] END",
]

# What the rows read of an activity (journal_rows, fault_types). A typed field holding a value of another type reads
# as NULL (a string where a number belongs) or as its JSON text (a number where a string belongs), as the Python
# path's inserts would cast it; `arguments` and `output` are read only when they are objects, so they stay JSON.
_PROVIDER = (
    "provider STRUCT(driver VARCHAR, name VARCHAR, "
    "arguments STRUCT(fault_type VARCHAR, fault STRUCT(type VARCHAR)))"
)


def _activity(*provider: str) -> str:
    return (
        f"STRUCT(activity STRUCT({', '.join(('name VARCHAR', 'type VARCHAR', *provider))}), status VARCHAR, "
        'start VARCHAR, "end" VARCHAR, duration DOUBLE, output JSON, exception VARCHAR)'
    )


_ACTIVITY = _activity(_PROVIDER)
# probes and rollbacks without their provider: only the method's actions name fault types (~8% less CPU to parse)
_ACTIVITY_NO_PROVIDER = _activity()
_COLUMNS = {
    "run_id": "JSON",
    "family": "VARCHAR",
    "status": "VARCHAR",
    "dry_run": "JSON",
    "start": "VARCHAR",
    "end": "VARCHAR",
    "duration": "DOUBLE",
    "error": "VARCHAR",
    "seed": "BIGINT",
    "controller_pid": "INTEGER",
    "content_hash": "VARCHAR",
    "verdict": "VARCHAR",
    "experiment": "STRUCT(title VARCHAR, tags VARCHAR[], estimate JSON)",
    "estimate": "JSON",
    "policy": "STRUCT(stage INTEGER)",
    "steady_states": f"STRUCT(before STRUCT(steady_state_met BOOLEAN, probes {_ACTIVITY_NO_PROVIDER}[]), "
    f"after STRUCT(steady_state_met BOOLEAN, probes {_ACTIVITY_NO_PROVIDER}[]), recovery JSON)",
    "run": f"{_ACTIVITY}[]",
    "rollbacks": f"{_ACTIVITY_NO_PROVIDER}[]",
    "gates": "STRUCT(samples STRUCT(sli VARCHAR, value DOUBLE)[], breach JSON)",
    "load": "JSON",
}

_SOURCE = """
CREATE OR REPLACE TEMP TABLE _fp_raw AS
SELECT true AS keep, fp_str(run_id) AS rid, * EXCLUDE (run_id)
FROM read_json($files, format = 'newline_delimited', columns = $columns, maximum_object_size = $max_size)
"""

# a table keeps the order of its insert (preserve_insertion_order): the rowid is the line's place in the files
_SOURCE_VIEW = (
    "CREATE OR REPLACE TEMP VIEW _fp_src AS SELECT rowid AS id, * EXCLUDE (keep) FROM _fp_raw WHERE keep"
)

# a run written twice keeps its last journal, as writing them one after the other would; the others stay in
# _fp_raw, unkept, so its rows keep the places of the lines they came from
_DEDUPE = """
UPDATE _fp_raw SET keep = false WHERE rowid IN (
    SELECT id FROM (
        SELECT rowid AS id, row_number() OVER (PARTITION BY rid ORDER BY rowid DESC) AS n
        FROM _fp_raw WHERE rid IS NOT NULL)
    WHERE n > 1)
"""

_RUNS = """
INSERT INTO runs (run_id, experiment_title, experiment_family, content_hash, status, dry_run, steady_state_before,
                  steady_state_after, started_at, ended_at, duration_s, error, seed, controller_pid, journal_path,
                  tags, blast_stage, verdict)
SELECT rid, experiment.title, family, content_hash, status, fp_truthy(dry_run),
       steady_states.before.steady_state_met, steady_states.after.steady_state_met,
       start::TIMESTAMPTZ, "end"::TIMESTAMPTZ, duration, error, seed, controller_pid, NULL,
       coalesce(experiment.tags, []::VARCHAR[]), policy.stage, verdict
FROM _fp_src
"""

# the order of journal_rows: method runs, rollbacks, then the probes before and after; each list unnested on its own
# (its seq after the lists before it) instead of one list of them all: concatenating the four lists of structs, each
# item wrapped with its phase, cost more than the rest of the statement (~0.20 -> ~0.12 CPU-s per 40k journals). The
# rows come in no particular order (see _write_batch): nothing reads them in table order (seq orders them).
_ACTIVITY_LISTS = (
    ("method", "run"),
    ("rollbacks", "rollbacks"),
    ("hypothesis_before", "steady_states.before.probes"),
    ("hypothesis_after", "steady_states.after.probes"),
)


def _unnest_activities(i: int) -> str:
    """The rows of the i-th activity list of each journal, numbered on from the lists before it."""
    phase, items = _ACTIVITY_LISTS[i]
    before = "".join(f" + len(coalesce({other}, []))" for _, other in _ACTIVITY_LISTS[:i])
    return (
        f"SELECT rid, '{phase}' AS phase, unnest({items}) AS a, "
        f"(generate_subscripts({items}, 1) - 1{before})::INTEGER AS seq FROM _fp_src"
    )


_ACTIVITIES = f"""
INSERT INTO activities (run_id, seq, phase, name, type, status, started_at, ended_at, duration_s, output, error)
SELECT rid, seq, phase, a.activity.name, a.activity.type, a.status, a.start::TIMESTAMPTZ, a."end"::TIMESTAMPTZ,
       a.duration, coalesce(a.output::VARCHAR, 'null'), a.exception
FROM ({" UNION ALL ".join(_unnest_activities(i) for i in range(len(_ACTIVITY_LISTS)))})
"""

# The journal's text, read again from the files (copied once, into the table, instead of through _fp_raw too) and
# paired line for line with _fp_raw, each pair checked (as many lines as journals, each run_id in its text) so
# that no journal is stored under another's id or cut short. The lines are read as CSV of one column (no quotes, no delimiter): no second JSON parse,
# ~0.07 CPU-s less per 20k journals; where they do not pair up with the JSON reader's values (a carriage return
# inside an object...) or the CSV reader fails, the batch is written again from read_ndjson_objects, the same JSON
# scanner as read_json, which skips the same blank lines.
_BODY_READERS = {
    "lines": """(SELECT body FROM read_csv($files, columns = {'body': 'VARCHAR'}, delim = '\x01', quote = '',
                  escape = '', header = false, auto_detect = false, strict_mode = false,
                  max_line_size = $max_size)
      WHERE body IS NOT NULL AND (starts_with(body, '{') OR trim(body) <> ''))""",
    "objects": "(SELECT json::VARCHAR AS body FROM read_ndjson_objects($files, maximum_object_size = $max_size))",
}
_OUT_OF_STEP = "journal text and fields out of step"
_JOURNALS = f"""
INSERT INTO journals (run_id, written_at, body)
SELECT r.rid, now(),
       CASE WHEN r.rid IS NULL OR o.body IS NULL THEN error('{_OUT_OF_STEP}: not as many lines as journals')
            WHEN contains(o.body, r.rid) OR (o.body ->> 'run_id') = r.rid THEN o.body
            ELSE error('{_OUT_OF_STEP} at run ' || r.rid) END
-- the texts on the left: POSITIONAL JOIN gathers its right side in memory first, and gathering the texts there cost
-- ~0.25 CPU-s per 100k journals in this statement (~0.15 of the whole ingest); both sides are read in order
FROM {{reader}} o
POSITIONAL JOIN (SELECT rid, keep FROM _fp_raw) r
-- a row POSITIONAL JOIN pads (one side ran out of lines) has no keep: it is checked, and fails
WHERE r.keep IS DISTINCT FROM false
"""

# Where the batch keeps every journal it read (no run twice, none stored already word for word: the common case),
# each line is stored under the run_id its own text names, read from its start when the text begins with it (as
# journals are written), else parsed: no pairing by position, so the insert runs on all cores, compressing the
# texts as it goes (~0.9 -> ~0.5 s per 100k journals). It is kept only when it stored exactly one line per journal
# of the batch, under the batch's run ids: a journal the line reader split, or two on one line, add or remove a
# line and fail that; a fragment that is no JSON fails to parse. Otherwise the pairing readers above store it.
_LEADING_RUN_ID = r'^[{]\s*"run_id"\s*:\s*"([^"\\]*)"'
_JOURNALS_BY_OWN_ID = f"""
INSERT INTO journals (run_id, written_at, body)
SELECT coalesce(nullif(regexp_extract(body, '{_LEADING_RUN_ID}', 1), ''), body ->> 'run_id'), now(), body
FROM {_BODY_READERS["lines"]}
"""
_STORED_OF_BATCH = "SELECT count(*) FROM journals WHERE run_id IN (SELECT rid FROM _fp_src)"

_FAULT_TYPES_SQL = "[" + ", ".join(f"'{t}'" for t in FAULT_TYPES) + "]"

# fault_types: per action of the method, its candidates in Python's order (arguments, output, names in the
# provider), kept when they are fault types, each once at its first place; list lambdas over the typed `run`
# list, no unnest and regroup. Only membership in FAULT_TYPES matters, so typed VARCHAR arguments are exact: a
# value of another type reads as its JSON text, which no fault type equals.
_FAULTS = f"""
flatten(list_transform(
    list_transform(list_filter(coalesce(run, []), lambda a: a.activity.type = 'action'), lambda a: {{
        'args': a.activity.provider.arguments,
        'out': json_extract(a.output, ['$.fault_type', '$.fault']),
        'pname': lower(coalesce(a.activity.provider.driver, '') || '.' || coalesce(a.activity.provider.name, ''))
    }}),
    lambda x: list_concat(
        [x.args.fault_type, x.args.fault.type,
         CASE WHEN fp_truthy(x.out[1]) THEN fp_str(x.out[1]) ELSE fp_str(x.out[2]) END],
        list_filter({_FAULT_TYPES_SQL}, lambda t: contains(x.pname, t) OR contains(x.pname, replace(t, '_', '-'))))))
"""

_METRICS = f"""
-- recovery, estimates and load figures are small objects kept as JSON (their truthiness decides the row): each is
-- parsed once more by one json_extract of all its fields; gate peaks and fault types are list lambdas
WITH base AS MATERIALIZED (
    SELECT id, rid, family, experiment.title AS exp_title, dry_run, start, duration, policy.stage AS stage, status,
           fp_truthy(gates.breach) AS breached,
           fp_truthy(steady_states.recovery) AS rec_on,
           json_extract(fp_obj(steady_states.recovery), ['$.checks', '$.window_s', '$.steady_state_met',
                                                         '$.time_to_recover_s']) AS r,
           json_extract(CASE WHEN fp_truthy(estimate) THEN estimate
                             WHEN fp_truthy(experiment.estimate) THEN experiment.estimate END,
                        ['$.recovery_seconds', '$.error_rate', '$.latency_p99_ms']) AS e,
           json_extract(CASE WHEN json_exists(fp_obj(load), '$.summary') THEN fp_obj(load -> 'summary')
                             ELSE fp_obj(load) END,
                        ['$.error_rate', '$.latency_p99_ms', '$.latency_p99']) AS lf,
           list_max(list_transform(list_filter(gates.samples, lambda s: s.sli = 'error_rate'),
                                   lambda s: s.value)) AS err_peak,
           list_max(list_transform(list_filter(gates.samples, lambda s: s.sli = 'latency_p99'),
                                   lambda s: s.value)) AS p99_peak,
           {_FAULTS} AS fault_candidates
    FROM _fp_src
),
rec AS (
    SELECT id, rec_on, r, fp_truthy(r[1]) AS has_checks FROM base
),
checks AS MATERIALIZED (
    SELECT id, k, fp_num(c[1]) AS t, fp_truthy(c[2]) AS met FROM (
        SELECT id, json_extract(c, ['$.t', '$.met']) AS c, k FROM (
            SELECT id, unnest(l) AS c, generate_subscripts(l, 1) AS k
            FROM (SELECT id, fp_list(r[1]) AS l FROM rec WHERE rec_on AND has_checks)))
),
passing AS (
    SELECT id, k, t, first_value(t) OVER (PARTITION BY id, g ORDER BY k) AS run_start FROM (
        SELECT *, sum(CASE WHEN met THEN 0 ELSE 1 END) OVER (PARTITION BY id ORDER BY k) AS g FROM checks)
    WHERE met
),
sustained AS (
    SELECT p.id, arg_min(p.run_start, p.k) AS ttr
    FROM passing p JOIN rec b USING (id)
    WHERE p.t - p.run_start >= coalesce(fp_num(b.r[2]), 0.0)
    GROUP BY p.id
),
recovery AS (
    SELECT b.id,
           CASE WHEN NOT b.rec_on THEN NULL
                WHEN b.has_checks THEN s.ttr IS NOT NULL
                ELSE fp_nn(b.r[3])::BOOLEAN END AS met,
           CASE WHEN NOT b.rec_on THEN NULL
                WHEN b.has_checks THEN round(s.ttr, 6)
                WHEN fp_truthy(b.r[3]) THEN fp_num(b.r[4]) END AS ttr,
           CASE WHEN NOT b.rec_on THEN NULL
                WHEN b.has_checks THEN coalesce(fp_num(b.r[2]), 0.0)
                ELSE 0.0 END AS window_s
    FROM rec b LEFT JOIN sustained s USING (id)
),
m AS (
    SELECT b.*, r.met, r.ttr, r.window_s,
           coalesce(fp_num(b.lf[1]), b.err_peak) AS err,
           coalesce(fp_num(b.lf[2]), fp_num(b.lf[3]), b.p99_peak) AS p99,
           fp_num(b.e[1]) AS est_rec,
           list_filter(fault_candidates, lambda c, i: list_contains({_FAULT_TYPES_SQL}, c)
                                                      AND list_position(fault_candidates, c) = i) AS types
    FROM base b JOIN recovery r USING (id)
)
INSERT INTO run_metrics (run_id, experiment_key, experiment_title, status, passed, dry_run, started_at, duration_s,
                         recovery_met, time_to_recover_s, recovery_window_s, est_recovery_s, est_error_rate,
                         est_latency_p99_ms, actual_error_rate, actual_latency_p99_ms, gate_breached, fault_types,
                         blast_stage, run_score)
SELECT rid, CASE WHEN family <> '' THEN family ELSE exp_title END, exp_title, status,
       coalesce(status = 'completed', false), fp_truthy(dry_run), start::TIMESTAMPTZ, duration, met, ttr, window_s,
       est_rec, fp_num(e[2]), fp_num(e[3]), err, p99,
       breached, coalesce(types, []::VARCHAR[]), stage,
       round(100.0 * (0.7 * (CASE WHEN status = 'completed' THEN 1.0 ELSE 0.0 END) + 0.3 * (
           CASE WHEN met IS NULL THEN (CASE WHEN status = 'completed' THEN 1.0 ELSE 0.0 END)
                WHEN NOT met THEN 0.0
                WHEN est_rec IS NOT NULL AND ttr IS NOT NULL AND ttr > est_rec THEN 0.5
                ELSE 1.0 END)), 6)
FROM m
"""


# A batch's whole row groups of a table (16,384 rows, core.store._ROW_GROUP_ROWS) go to the file as the insert runs,
# compressed on all cores; the rest goes to the WAL at COMMIT, and a checkpoint compresses it then, merging the
# batch's last partial row group with its neighbours (their journal texts decompressed and compressed again). So
# batches are large: 100k bench journals took ~2.8 s in one batch of 1 GiB, and ~5.8 s in batches of 128 MiB (~2.1 s
# of it in the checkpoint when the store closed); peak memory ~0.9 GB for the ~450 MB of NDJSON in one batch.
_BATCH_BYTES = 1024 * 1024 * 1024
_BLOCK_MEMORY = "512MiB"


def _try(con: Any, statement: str) -> bool:
    """Run a storage setting; False where this DuckDB lacks it (the ingest is the same without it)."""
    import duckdb

    try:
        con.execute(statement)
    except duckdb.Error:
        return False
    return True


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _text_bytes(path: str) -> int:
    """The file's size as text: a gzip file's own record of it (its last 4 bytes, modulo 4 GiB), so a batch of
    compressed files holds about as much text, and memory, as one of plain files."""
    size = Path(path).stat().st_size
    if not path.lower().endswith(".gz") or size < 18:
        return size
    with open(path, "rb") as fh:
        fh.seek(-4, os.SEEK_END)
        return max(size, int.from_bytes(fh.read(4), "little"))


def _batches(paths: list[str], batch_bytes: int) -> Iterator[list[str]]:
    """Consecutive groups of files of about `batch_bytes` of text together (a larger file is a group alone)."""
    group: list[str] = []
    size = 0
    for p in paths:
        n = _text_bytes(p)
        if group and size + n > batch_bytes:
            yield group
            group, size = [], 0
        group.append(p)
        size += n
    if group:
        yield group


def ingest_ndjson(
    store: Any,
    files: Sequence[str | os.PathLike[str]],
    *,
    max_object_bytes: int = 64 * 1024 * 1024,
    batch_bytes: int = _BATCH_BYTES,
    on_batch: Callable[[int, list[str]], None] | None = None,
) -> int:
    """Write every journal in `files` (one JSON journal per line) to a DuckDB store, replacing earlier rows of the
    same runs; returns the number of journals written.

    Files are taken in consecutive batches of about `batch_bytes` (the parsed journals of a batch are held in
    memory), each batch one transaction: a batch that fails leaves nothing of itself, and the batches before it
    written. Within a batch, and from one batch to the next, a run written twice keeps its last journal.
    `on_batch(journals, files)` is called after each batch is committed, with the batch's files (for progress).
    """
    if getattr(store, "dialect", "duckdb") != "duckdb":
        raise EvidenceError(
            "store: bulk NDJSON ingest needs a DuckDB store; fix: use evidence.ingest_journals for ClickHouse"
        )
    if batch_bytes < 1:
        raise EvidenceError(f"batch_bytes: {batch_bytes!r}; fix: a positive number of bytes")
    paths = [str(Path(f)) for f in files]
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        raise EvidenceError(f"files: {missing[0]} does not exist; fix: pass journal files (NDJSON)")
    if not paths:
        return 0
    store.ensure_schema("evidence", EVIDENCE_MIGRATIONS)
    with store.connect() as con:
        for macro in _MACROS:
            con.execute(macro)
        # Memory DuckDB keeps for its blocks instead of handing it back to the system: a batch's journal texts pass
        # through a few hundred MB of fresh blocks, and faulting new pages in was ~1/6 of the ingest's CPU: 100k
        # bench journals in one batch took 5.1-5.4 CPU-s instead of 5.7-6.0. The setting cannot be lowered again, so the
        # database instance keeps up to that much until the store's connection closes (after this call, outside a
        # `store.batch()`). Where it is higher already or this DuckDB lacks it, the ingest is the same without.
        _try(con, f"SET block_allocator_memory = '{_BLOCK_MEMORY}'")
        total = 0
        for group in _batches(paths, batch_bytes):
            n = _ingest_batch(con, group, max_object_bytes)
            total += n
            if on_batch is not None:
                on_batch(n, group)
        return total


def _ingest_batch(con: Any, paths: list[str], max_object_bytes: int) -> int:
    """One transaction: the journals of `paths`, parsed into _fp_raw, written to the four tables."""
    import duckdb

    try:
        con.execute(_SOURCE, {"files": paths, "max_size": max_object_bytes, "columns": _COLUMNS})
    except duckdb.Error as exc:
        raise EvidenceError(
            f"files: not journals ({_first_line(exc)}); fix: one JSON journal object per line"
        ) from None
    con.execute(_SOURCE_VIEW)
    try:
        # every journal read (all kept so far): the texts go by their own run ids if all are still kept below
        read = con.execute("SELECT count(*) FROM _fp_src").fetchone()[0]
        if not read:
            return 0
        bad = con.execute("SELECT count(*) FROM _fp_src WHERE rid IS NULL").fetchone()[0]
        if bad:
            raise EvidenceError(
                f"files: {bad} line(s) are not journals (a JSON object with a run_id); fix: one journal per line"
            )
        con.execute(_DEDUPE)
        n = con.execute("SELECT count(*) FROM _fp_src").fetchone()[0]  # written, or left as stored already
        _keep_unchanged(con, paths, max_object_bytes)
        kept = con.execute("SELECT count(*) FROM _fp_src").fetchone()[0]
        for reader in ("own ids", *_BODY_READERS) if kept == read else _BODY_READERS:
            try:
                _write_batch(con, paths, max_object_bytes, reader, kept)
                break
            except duckdb.Error as exc:
                if reader == "objects":
                    # a value the rows cannot hold (a start that is no timestamp...): nothing of the batch written
                    raise EvidenceError(
                        f"files: a journal in {paths[0]}{' …' if len(paths) > 1 else ''} has a value the store "
                        f"cannot hold ({_first_line(exc)}); fix: the journal's fields as the engine writes them"
                    ) from None
        return int(n)
    finally:
        con.execute("DROP VIEW IF EXISTS _fp_src")
        con.execute("DROP TABLE IF EXISTS _fp_raw")


# Journals shipped again as they were (a fleet re-sending its files) are left as the store has them: replacing a
# run's rows costs DuckDB a delete and a re-insert under the primary keys, and 100k journals imported a second time
# took ~12 s, ~3x a first import, where comparing their texts takes ~0.8 s. Compared only when some incoming run is
# stored already; a journal counts as unchanged when its text is the stored one byte for byte and its runs and
# run_metrics rows are there. Pairing texts with runs is the journals insert's own (lines in order, POSITIONAL
# JOIN): when the lines are out of step with the journals (padding on either side), nothing is taken as unchanged.
_OVERLAP = "SELECT count(*) FROM journals WHERE run_id IN (SELECT rid FROM _fp_src)"
_SAME = f"""
CREATE OR REPLACE TEMP TABLE _fp_same AS
SELECT r.id, r.id IS NULL OR o.body IS NULL AS padded,
       coalesce(r.keep AND j.body = o.body AND m.run_id IS NOT NULL AND u.run_id IS NOT NULL, false) AS same
FROM {_BODY_READERS["lines"]} o
POSITIONAL JOIN (SELECT rowid AS id, rid, keep FROM _fp_raw) r
LEFT JOIN journals j ON j.run_id = r.rid
LEFT JOIN runs u ON u.run_id = r.rid
LEFT JOIN run_metrics m ON m.run_id = r.rid
"""
_UNKEEP_SAME = """
UPDATE _fp_raw SET keep = false
WHERE rowid IN (SELECT id FROM _fp_same WHERE same) AND NOT EXISTS (SELECT 1 FROM _fp_same WHERE padded)
"""


def _keep_unchanged(con: Any, paths: list[str], max_object_bytes: int) -> None:
    """Unkeep the batch's journals that the store holds already, word for word (see _SAME)."""
    import duckdb

    if not con.execute(_OVERLAP).fetchone()[0]:
        return
    try:
        con.execute(_SAME, {"files": paths, "max_size": max_object_bytes})
        con.execute(_UNKEEP_SAME)
    except duckdb.Error:
        return  # the line reader cannot read these files: every journal is written, as without this step
    finally:
        con.execute("DROP TABLE IF EXISTS _fp_same")


def _write_batch(con: Any, paths: list[str], max_object_bytes: int, reader: str, n: int) -> None:
    """The transaction: earlier rows of the batch's runs deleted, the four tables' rows inserted (the `n` kept
    journals' texts read by `reader`: "own ids" or one of _BODY_READERS)."""
    # Journal bodies are most of the new rows, compressed as they are written: with ZSTD 100k bench journals took
    # 4.4 CPU-s and 60 MB, with DuckDB's own choice (DICT_FSST) 8.1 CPU-s and 216 MB. The setting is the
    # database's, so it is put back right after; numeric columns keep their own encodings.
    zstd = _try(con, "SET force_compression = 'zstd'")
    unordered = False
    try:
        con.execute("BEGIN")
        try:
            for table in ("runs", "activities", "journals", "run_metrics"):
                con.execute(f"DELETE FROM {table} WHERE run_id IN (SELECT rid FROM _fp_src)")
            files = {"files": paths, "max_size": max_object_bytes}
            if reader == "own ids":
                unordered = _try(con, "SET preserve_insertion_order = false")
                stored = con.execute(_JOURNALS_BY_OWN_ID, files).fetchone()[0]
                if stored != n or con.execute(_STORED_OF_BATCH).fetchone()[0] != n:
                    con.execute(f"SELECT error('{_OUT_OF_STEP}: {stored} lines for {n} journals')")
            else:
                # the journals first, in insertion order: their POSITIONAL JOIN pairs lines in order
                con.execute(_JOURNALS.format(reader=_BODY_READERS[reader]), files)
            # The other rows are keyed (run id, seq) and nothing reads them in table order: without insertion order
            # DuckDB runs the activities' four unnests and parts of run_metrics on both cores (100k journals: ~5%
            # less wall time, CPU the same, the store ~4% bigger as rows of different runs interleave). Put back
            # after the transaction ends (an aborted one refuses even a RESET): the parse relies on that order.
            unordered = unordered or _try(con, "SET preserve_insertion_order = false")
            con.execute(_RUNS)
            con.execute(_ACTIVITIES)
            con.execute(_METRICS)
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
    finally:
        if unordered:
            _try(con, "RESET preserve_insertion_order")
        if zstd:
            _try(con, "RESET force_compression")
