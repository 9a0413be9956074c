"""Bulk ingest of journal files into a DuckDB store, at fleet rates: DuckDB's own JSON reader, no Python per journal.

`evidence.ingest_journals` derives each journal's rows in Python (about 3,000 journals/s); here DuckDB reads
newline-delimited journal files in parallel and derives the same `runs`, `activities`, `journals` and
`run_metrics` rows in SQL. The SQL mirrors `evidence.run_metrics_row` and `store_clickhouse.journal_rows` rule for
rule (tests/evidence/test_bulk_ingest.py checks both give the same rows on generated journals); when one of those
changes, this changes with it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
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

_SOURCE = """
CREATE OR REPLACE TEMP TABLE _fp_raw AS
-- every field the rows need, extracted in one parse of each journal: each `->` on the whole body, json_type(body)
-- included, would parse it again (the body is ~4 KiB, its fields a few bytes)
SELECT body,
       x[1] AS run_id,
       x[2] AS family,
       x[3] AS status,
       x[4] AS dry_run,
       x[5] AS start_,
       x[6] AS end_,
       x[7] AS duration,
       x[8] AS error,
       x[9] AS seed,
       x[10] AS controller_pid,
       x[11] AS content_hash,
       x[12] AS verdict,
       x[13] AS exp_title,
       x[14] AS exp_tags,
       x[15] AS exp_estimate,
       x[16] AS estimate,
       x[17] AS stage,
       x[18] AS before_met,
       x[19] AS after_met,
       x[20] AS before_probes,
       x[21] AS after_probes,
       x[22] AS run,
       x[23] AS rollbacks,
       x[24] AS recovery,
       x[25] AS samples,
       x[26] AS breach,
       x[27] AS load
FROM (
    SELECT json::VARCHAR AS body, json_extract(json, ['$.run_id', '$.family', '$.status', '$.dry_run', '$.start', '$.end', '$.duration', '$.error', '$.seed', '$.controller_pid', '$.content_hash', '$.verdict', '$.experiment.title', '$.experiment.tags', '$.experiment.estimate', '$.estimate', '$.policy.stage', '$.steady_states.before.steady_state_met', '$.steady_states.after.steady_state_met', '$.steady_states.before.probes', '$.steady_states.after.probes', '$.run', '$.rollbacks', '$.steady_states.recovery', '$.gates.samples', '$.gates.breach', '$.load']) AS x
    FROM read_ndjson_objects($files, maximum_object_size = $max_size))
"""

# a table keeps the order of its insert (preserve_insertion_order): the rowid is the line's place in the files
_SOURCE_VIEW = "CREATE OR REPLACE TEMP VIEW _fp_src AS SELECT rowid AS id, * FROM _fp_raw"

# a run written twice keeps its last journal, as writing them one after the other would; a window over the small
# columns only (over the whole rows it copied every body through the sort)
_DEDUPE = """
DELETE FROM _fp_raw WHERE rowid IN (
    SELECT id FROM (
        SELECT rowid AS id, row_number() OVER (PARTITION BY fp_str(run_id) ORDER BY rowid DESC) AS n
        FROM _fp_raw WHERE fp_str(run_id) IS NOT NULL)
    WHERE n > 1)
"""

_RUNS = """
INSERT INTO runs (run_id, experiment_title, experiment_family, content_hash, status, dry_run, steady_state_before,
                  steady_state_after, started_at, ended_at, duration_s, error, seed, controller_pid, journal_path,
                  tags, blast_stage, verdict)
SELECT fp_str(run_id), fp_str(exp_title), fp_str(family), fp_str(content_hash),
       fp_str(status), fp_truthy(dry_run),
       fp_nn(before_met)::BOOLEAN,
       fp_nn(after_met)::BOOLEAN,
       fp_str(start_)::TIMESTAMPTZ, fp_str(end_)::TIMESTAMPTZ, fp_num(duration),
       fp_str(error), fp_nn(seed)::BIGINT, fp_nn(controller_pid)::INTEGER, NULL,
       CASE WHEN json_type(exp_tags) = 'ARRAY'
            THEN from_json(exp_tags, '["VARCHAR"]') ELSE []::VARCHAR[] END,
       fp_nn(stage)::INTEGER, fp_str(verdict)
FROM _fp_src
"""

# the order of journal_rows: method runs, rollbacks, then the probes before and after; each activity's fields are
# extracted in one parse of it
_ACTIVITIES = """
WITH lists AS (
    SELECT id, fp_str(run_id) AS run_id, 0 AS part, 'method' AS phase, fp_list(run) AS l FROM _fp_src
    UNION ALL SELECT id, fp_str(run_id), 1, 'rollbacks', fp_list(rollbacks) FROM _fp_src
    UNION ALL SELECT id, fp_str(run_id), 2, 'hypothesis_before', fp_list(before_probes) FROM _fp_src
    UNION ALL SELECT id, fp_str(run_id), 3, 'hypothesis_after', fp_list(after_probes) FROM _fp_src
),
acts AS (
    SELECT id, run_id, part, phase, k,
           json_extract(a, ['$.activity.name', '$.activity.type', '$.status', '$.start', '$.end', '$.duration',
                            '$.output', '$.exception']) AS f
    FROM (SELECT id, run_id, part, phase, unnest(l) AS a, generate_subscripts(l, 1) AS k FROM lists)
)
INSERT INTO activities (run_id, seq, phase, name, type, status, started_at, ended_at, duration_s, output, error)
SELECT run_id, (row_number() OVER (PARTITION BY id ORDER BY part, k) - 1)::INTEGER, phase,
       fp_str(f[1]), fp_str(f[2]), fp_str(f[3]),
       fp_str(f[4])::TIMESTAMPTZ, fp_str(f[5])::TIMESTAMPTZ, fp_num(f[6]),
       coalesce(f[7]::VARCHAR, 'null'), fp_str(f[8])
FROM acts
"""

_JOURNALS = "INSERT INTO journals (run_id, written_at, body) SELECT fp_str(run_id), now(), body FROM _fp_src"

_METRICS = """
-- the journal's fields come from _fp_src's one parse; each nested object is parsed once more by one json_extract
-- of all its fields (`->` chains parse the object again for every field); no materialized CTE carries the bodies
-- or the activity lists (the lists are read from _fp_src where they are needed)
WITH src AS MATERIALIZED (
    SELECT id, run_id, family, exp_title, dry_run, start_, duration, breach, stage, status,
           fp_obj(recovery) AS rec,
           CASE WHEN fp_truthy(estimate) THEN estimate
                WHEN fp_truthy(exp_estimate) THEN exp_estimate END AS est,
           CASE WHEN json_exists(fp_obj(load), '$.summary') THEN fp_obj(load -> 'summary')
                ELSE fp_obj(load) END AS load_fig
    FROM _fp_src
),
base AS MATERIALIZED (
    SELECT *,
           json_extract(rec, ['$.checks', '$.window_s', '$.steady_state_met', '$.time_to_recover_s']) AS r,
           json_extract(est, ['$.recovery_seconds', '$.error_rate', '$.latency_p99_ms']) AS e,
           json_extract(load_fig, ['$.error_rate', '$.latency_p99_ms', '$.latency_p99']) AS lf
    FROM src
),
checks AS MATERIALIZED (
    SELECT id, k, fp_num(c[1]) AS t, fp_truthy(c[2]) AS met FROM (
        SELECT id, json_extract(c, ['$.t', '$.met']) AS c, k FROM (
            SELECT id, unnest(l) AS c, generate_subscripts(l, 1) AS k
            FROM (SELECT id, fp_list(r[1]) AS l FROM base WHERE fp_truthy(r[1]))))
),
passing AS (
    SELECT id, k, t, first_value(t) OVER (PARTITION BY id, g ORDER BY k) AS run_start FROM (
        SELECT *, sum(CASE WHEN met THEN 0 ELSE 1 END) OVER (PARTITION BY id ORDER BY k) AS g FROM checks)
    WHERE met
),
sustained AS (
    SELECT p.id, arg_min(p.run_start, p.k) AS ttr
    FROM passing p JOIN base b USING (id)
    WHERE p.t - p.run_start >= coalesce(fp_num(b.r[2]), 0.0)
    GROUP BY p.id
),
recovery AS (
    SELECT b.id,
           CASE WHEN NOT fp_truthy(b.rec) THEN NULL
                WHEN fp_truthy(b.r[1]) THEN s.ttr IS NOT NULL
                ELSE fp_nn(b.r[3])::BOOLEAN END AS met,
           CASE WHEN NOT fp_truthy(b.rec) THEN NULL
                WHEN fp_truthy(b.r[1]) THEN round(s.ttr, 6)
                WHEN fp_truthy(b.r[3]) THEN fp_num(b.r[4]) END AS ttr,
           CASE WHEN NOT fp_truthy(b.rec) THEN NULL
                WHEN fp_truthy(b.r[1]) THEN coalesce(fp_num(b.r[2]), 0.0)
                ELSE 0.0 END AS window_s
    FROM base b LEFT JOIN sustained s USING (id)
),
gates AS (
    SELECT id,
           max(CASE WHEN fp_str(f[1]) = 'error_rate' THEN fp_num(f[2]) END) AS err_peak,
           max(CASE WHEN fp_str(f[1]) = 'latency_p99' THEN fp_num(f[2]) END) AS p99_peak
    FROM (SELECT id, json_extract(s, ['$.sli', '$.value']) AS f
          FROM (SELECT id, unnest(fp_list(samples)) AS s FROM _fp_src WHERE fp_truthy(samples)))
    GROUP BY id
),
actions AS MATERIALIZED (
    SELECT id, k, fp_obj(f[2]) AS args, fp_obj(f[3]) AS output,
           lower(coalesce(fp_str(f[4]), '') || '.' || coalesce(fp_str(f[5]), '')) AS pname
    FROM (
        SELECT id, k, json_extract(a, ['$.activity.type', '$.activity.provider.arguments', '$.output',
                                       '$.activity.provider.driver', '$.activity.provider.name']) AS f
        FROM (SELECT id, unnest(l) AS a, generate_subscripts(l, 1) AS k
              FROM (SELECT id, fp_list(run) AS l FROM _fp_src)))
    WHERE fp_str(f[1]) = 'action'
),
candidates AS (
    SELECT id, k * 100 AS pos, fp_str(args -> 'fault_type') AS c FROM actions
    UNION ALL SELECT id, k * 100 + 1, fp_str(fp_obj(args -> 'fault') -> 'type') FROM actions
    UNION ALL SELECT id, k * 100 + 2,
        fp_str(CASE WHEN fp_truthy(output -> 'fault_type') THEN output -> 'fault_type' ELSE output -> 'fault' END)
        FROM actions
    UNION ALL SELECT id, k * 100 + 3 + ft.i, ft.t FROM actions,
        (SELECT unnest($fault_types) AS t, generate_subscripts($fault_types, 1) AS i) ft
        WHERE contains(pname, ft.t) OR contains(pname, replace(ft.t, '_', '-'))
),
faults AS (
    SELECT id, list(c ORDER BY pos) AS types FROM (
        SELECT id, c, min(pos) AS pos FROM candidates WHERE list_contains($fault_types, c) GROUP BY id, c)
    GROUP BY id
),
m AS (
    SELECT b.id, b.run_id, b.family, b.exp_title, b.dry_run, b.start_, b.duration, b.breach, b.stage, b.e,
           r.met, r.ttr, r.window_s, fp_str(b.status) AS status_s,
           coalesce(fp_num(b.lf[1]), g.err_peak) AS err,
           coalesce(fp_num(b.lf[2]), fp_num(b.lf[3]), g.p99_peak) AS p99,
           fp_num(b.e[1]) AS est_rec, f.types
    FROM base b JOIN recovery r USING (id) LEFT JOIN gates g USING (id) LEFT JOIN faults f USING (id)
)
INSERT INTO run_metrics (run_id, experiment_key, experiment_title, status, passed, dry_run, started_at, duration_s,
                         recovery_met, time_to_recover_s, recovery_window_s, est_recovery_s, est_error_rate,
                         est_latency_p99_ms, actual_error_rate, actual_latency_p99_ms, gate_breached, fault_types,
                         blast_stage, run_score)
SELECT fp_str(run_id),
       CASE WHEN fp_truthy(family) THEN fp_str(family) ELSE fp_str(exp_title) END,
       fp_str(exp_title), status_s, coalesce(status_s = 'completed', false),
       fp_truthy(dry_run), fp_str(start_)::TIMESTAMPTZ, fp_num(duration), met, ttr, window_s,
       est_rec, fp_num(e[2]), fp_num(e[3]), err, p99,
       fp_truthy(breach), coalesce(types, []::VARCHAR[]), fp_nn(stage)::INTEGER,
       round(100.0 * (0.7 * (CASE WHEN status_s = 'completed' THEN 1.0 ELSE 0.0 END) + 0.3 * (
           CASE WHEN met IS NULL THEN (CASE WHEN status_s = 'completed' THEN 1.0 ELSE 0.0 END)
                WHEN NOT met THEN 0.0
                WHEN est_rec IS NOT NULL AND ttr IS NOT NULL AND ttr > est_rec THEN 0.5
                ELSE 1.0 END)), 6)
FROM m
"""


def _try(con: Any, statement: str) -> bool:
    """Run a storage setting; False where this DuckDB lacks it (the ingest is the same without it)."""
    import duckdb

    try:
        con.execute(statement)
    except duckdb.Error:
        return False
    return True


def ingest_ndjson(
    store: Any, files: Sequence[str | os.PathLike[str]], *, max_object_bytes: int = 64 * 1024 * 1024
) -> int:
    """Write every journal in `files` (one JSON journal per line) to a DuckDB store, replacing earlier rows of the
    same runs, in one transaction; returns the number of journals."""
    if getattr(store, "dialect", "duckdb") != "duckdb":
        raise EvidenceError(
            "store: bulk NDJSON ingest needs a DuckDB store; fix: use evidence.ingest_journals for ClickHouse"
        )
    paths = [str(Path(f)) for f in files]
    if not paths:
        return 0
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        raise EvidenceError(f"files: {missing[0]} does not exist; fix: pass journal files (NDJSON)")
    store.ensure_schema("evidence", EVIDENCE_MIGRATIONS)
    params = {"fault_types": list(FAULT_TYPES)}
    with store.connect() as con:
        for macro in _MACROS:
            con.execute(macro)
        con.execute(_SOURCE, {"files": paths, "max_size": max_object_bytes})
        con.execute(_SOURCE_VIEW)
        try:
            n = con.execute("SELECT count(*) FROM _fp_src").fetchone()[0]
            if not n:
                return 0
            bad = con.execute("SELECT count(*) FROM _fp_src WHERE fp_str(run_id) IS NULL").fetchone()[0]
            if bad:
                raise EvidenceError(
                    f"files: {bad} line(s) are not journals (a JSON object with a run_id); fix: one journal per line"
                )
            con.execute(_DEDUPE)
            n = con.execute("SELECT count(*) FROM _fp_src").fetchone()[0]
            # The COMMIT checkpoints the new rows, and journal bodies are most of them: ZSTD there took ~0.8 of
            # ~2.9 CPU-s off 20k journals and stored them in ~12 MB instead of ~43 MB (DICT_FSST). The setting is
            # the database's, so it is put back right after; numeric columns keep their own encodings.
            zstd = _try(con, "SET force_compression = 'zstd'")
            try:
                con.execute("BEGIN")
                try:
                    for table in ("runs", "activities", "journals", "run_metrics"):
                        con.execute(
                            f"DELETE FROM {table} WHERE run_id IN (SELECT fp_str(run_id) FROM _fp_src)"
                        )
                    con.execute(_RUNS)
                    con.execute(_ACTIVITIES)
                    con.execute(_JOURNALS)
                    con.execute(_METRICS, params)
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
                con.execute("COMMIT")
            finally:
                if zstd:
                    _try(con, "RESET force_compression")
            return int(n)
        finally:
            con.execute("DROP VIEW IF EXISTS _fp_src")
            con.execute("DROP TABLE IF EXISTS _fp_raw")
