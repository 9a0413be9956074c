"""Evidence store: ingest 100k journals and run the trend query on DuckDB, against a naive scan of JSON files;
ClickHouse (chDB, in process) ingest and query figures; trend-query time from 10k to 1M runs.

The journals are real ones (three runs of a real experiment through the engine, on this machine) cloned into
100k runs of 200 experiments, with seeded outcomes and recovery times. Both sides compute the same scorecards
(grade, trend, anomalies over each experiment's trailing 10 runs) with the same Python code; what differs is the
data access: `run_metrics` rows picked by one SQL query, or every journal file read and parsed.

Ingest: the bulk path (`evidence_bulk.ingest_ndjson`, DuckDB's JSON reader over NDJSON journal files) against
writing one JSON file per journal, and the per-journal Python path (`evidence.ingest_journals`) on 10k of them.
Scaling: `run_metrics` tables of 10k, 100k and 1M rows generated in SQL (2,000 experiments), same query.

    python benchmarks/bench_store.py [N_JOURNALS]     (default 100000)

Targets: bulk ingest >= 50,000 journals/s; trend query on DuckDB >= 40x faster than the JSON-file scan.
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

N = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
EXPERIMENTS = 200
SEED = 7


def real_templates(work: Path) -> list[dict[str, Any]]:
    """Three journals from real runs: completed, failed (steady state not met before), completed again."""
    import anyio

    from faultplane.core.store import Store
    from faultplane.services.experiments import run_experiment
    from faultplane.services.runs import load_journal

    policy = work / "policy.yaml"
    policy.write_text("gates: {required: false}\n", encoding="utf-8")
    os.environ["FAULTPLANE_POLICY"] = str(policy)
    os.environ["XDG_DATA_HOME"] = str(work / "xdg")
    os.environ["XDG_STATE_HOME"] = str(work / "xdg-state")
    store = Store(work / "templates.duckdb")

    def exp(bound: int) -> dict[str, Any]:
        def probe(name: str, value: int) -> dict[str, Any]:
            return {
                "type": "probe",
                "name": name,
                "tolerance": {"type": "range", "range": [0, bound]},
                "provider": {
                    "type": "python",
                    "module": "json",
                    "func": "loads",
                    "arguments": {"s": str(value)},
                },
            }

        return {
            "title": "checkout latency",
            "estimate": {"impact": "p99 +100 ms", "recovery_seconds": 1.0, "latency_p99_ms": 300},
            "steady-state-hypothesis": {"title": "p99 under bound", "probes": [probe("p99-ms", 120)]},
            "method": [
                {
                    "type": "action",
                    "name": "inject-latency",
                    "provider": {
                        "type": "python",
                        "module": "json",
                        "func": "dumps",
                        "arguments": {"obj": "on"},
                    },
                },
                probe("p99-under-fault", 180),
            ],
            "rollbacks": [
                {
                    "type": "action",
                    "name": "remove-latency",
                    "provider": {
                        "type": "python",
                        "module": "json",
                        "func": "dumps",
                        "arguments": {"obj": "off"},
                    },
                }
            ],
            "runtime": {"hypothesis": {"frequency": 0.05}},
        }

    out = []
    for bound in (200, 100, 200):
        result = anyio.run(lambda e=exp(bound): run_experiment(e, store=store))  # type: ignore[misc]
        out.append(load_journal(result.run_id, store))
    if [j["status"] for j in out] != ["completed", "failed", "completed"]:
        raise SystemExit(f"template runs did not go as planned: {[(j['status'], j['error']) for j in out]}")
    return out


def journals(templates: list[dict[str, Any]], n: int) -> Iterator[dict[str, Any]]:
    """n journals cloned from the templates, deterministic for a given SEED."""
    rng = random.Random(SEED)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(n):
        kind = rng.random()
        template = templates[0] if kind < 0.6 else templates[2] if kind < 0.9 else templates[1]
        j = copy.deepcopy(template)
        family = f"exp-{rng.randrange(EXPERIMENTS):03d}"
        start = t0 + timedelta(seconds=i * 30 + rng.random())
        j["run_id"] = uuid.UUID(int=rng.getrandbits(128)).hex[:16]
        j["family"] = family
        j["experiment"]["title"] = family
        shift = start - datetime.fromisoformat(template["start"].replace("Z", "+00:00"))
        j["start"] = start.isoformat()
        j["end"] = (datetime.fromisoformat(template["end"].replace("Z", "+00:00")) + shift).isoformat()
        recovery = j["steady_states"].get("recovery")
        if recovery and recovery.get("steady_state_met"):
            slow = rng.random() < 0.01
            recovery["time_to_recover_s"] = round(rng.lognormvariate(-1.0, 0.2) * (6 if slow else 1), 3)
        yield j


def metrics_from_files(directory: Path) -> dict[str, list[dict[str, Any]]]:
    """The naive path: read and parse every journal file, derive its figures, keep each experiment's newest 20."""
    from faultplane.services.evidence import TRAILING_RUNS, _norm_row, run_metrics_row

    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in directory.iterdir():
        j = json.loads(path.read_text(encoding="utf-8"))
        if j.get("dry_run") or j.get("status") in ("running", "refused"):
            continue
        by_key[j.get("family") or j["experiment"]["title"]].append(_norm_row(run_metrics_row(j)))
    return {
        k: sorted(rows, key=lambda r: (r["started_at"], r["run_id"]), reverse=True)[: 2 * TRAILING_RUNS]
        for k, rows in by_key.items()
    }


def _timed(fn: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def _synthetic_metrics(store: Any, n: int) -> None:
    """n run_metrics rows of 2,000 experiments, generated in SQL (a million journals would take minutes to clone)."""
    store.execute("DELETE FROM run_metrics")
    store.execute(
        "INSERT INTO run_metrics SELECT printf('%016x', i), printf('exp-%04d', i % 2000), printf('exp-%04d', i % 2000), "
        "CASE WHEN hash(i) % 10 < 8 THEN 'completed' ELSE 'failed' END, hash(i) % 10 < 8, false, "
        "TIMESTAMPTZ '2026-01-01' + to_seconds(i * 30), 1.0 + (hash(i) % 100) / 50.0, true, "
        "0.3 + (hash(i * 7) % 1000) / 1000.0, 0.0, 1.0, NULL, 300.0, NULL, NULL, false, ['latency'], 0, "
        "CASE WHEN hash(i) % 10 < 8 THEN 100.0 ELSE 30.0 END FROM range(?) t(i)",
        [n],
    )


def main() -> int:
    from faultplane.core.store import Store
    from faultplane.core.store_clickhouse import ClickHouseStore
    from faultplane.services import evidence as ev
    from faultplane.services.evidence_bulk import ingest_ndjson

    work = Path(tempfile.mkdtemp(prefix="fp-bench-store-"))
    try:
        templates = real_templates(work)
        size = sum(len(json.dumps(j)) for j in templates) / len(templates)

        # one JSON file per journal (the naive store) and NDJSON files of 10k journals (the bulk path's input);
        # generating the clones is timed once and taken off the file writes
        generate, _ = _timed(lambda: sum(1 for _ in journals(templates, N)))
        files = work / "journals"
        files.mkdir()

        def write_files() -> None:
            for j in journals(templates, N):
                (files / f"{j['run_id']}.json").write_text(json.dumps(j), encoding="utf-8")

        file_ingest = _timed(write_files)[0] - generate
        ndjson = []
        batch: list[str] = []
        for j in journals(templates, N):
            batch.append(json.dumps(j))
            if len(batch) == 10_000:
                ndjson.append(work / f"batch-{len(ndjson):04d}.ndjson")
                ndjson[-1].write_text("\n".join(batch) + "\n", encoding="utf-8")
                batch = []
        if batch:
            ndjson.append(work / f"batch-{len(ndjson):04d}.ndjson")
            ndjson[-1].write_text("\n".join(batch) + "\n", encoding="utf-8")

        store = Store(work / "store.duckdb")
        store.ensure_schema("evidence", ev.EVIDENCE_MIGRATIONS)
        duck_ingest, ingested = _timed(lambda: ingest_ndjson(store, ndjson))

        small = min(N, 10_000)
        py_store = Store(work / "python.duckdb")
        py_gen = _timed(lambda: sum(1 for _ in journals(templates, small)))[0]
        py_ingest = _timed(lambda: ev.ingest_journals(py_store, journals(templates, small)))[0] - py_gen

        chdb = ClickHouseStore(f"chdb://{work / 'chdb'}?database=bench")
        ch_ingest = _timed(lambda: ev.ingest_journals(chdb, journals(templates, small)))[0] - py_gen

        # the trend query, twice each (the second DuckDB run has its file in the OS cache, as the JSON scan does)
        duck_times, cards = [], []
        for _ in range(2):
            t, cards = _timed(lambda: ev.scorecards(store, sync=False))
            duck_times.append(t)
        scan_times, naive = [], []
        for _ in range(2):
            t, naive = _timed(
                lambda: [ev._scorecard(k, rows) for k, rows in sorted(metrics_from_files(files).items())]
            )
            scan_times.append(t)
        same = [c.model_dump() for c in cards] == [c.model_dump() for c in naive]
        ch_query, ch_cards = _timed(lambda: ev.scorecards(chdb, sync=False))
        py_cards = ev.scorecards(py_store, sync=False)
        same_ch = [c.model_dump() for c in ch_cards] == [c.model_dump() for c in py_cards]
        grades: dict[str, int] = defaultdict(int)
        trends: dict[str, int] = defaultdict(int)
        for c in cards:
            grades[c.grade] += 1
            trends[c.trend] += 1
        anomalies = sum(len(c.anomalies) for c in cards)
        db_mb = (work / "store.duckdb").stat().st_size / 1e6

        print(
            f"{ingested} journals (~{size / 1024:.1f} KiB each, from 3 real runs), {EXPERIMENTS} experiments"
        )
        print(f"{'operation':<40}{'DuckDB':>12}{'JSON files':>14}{'ratio':>10}")
        print(
            f"{'bulk ingest (s, generation excluded)':<40}{duck_ingest:>12.2f}{file_ingest:>14.2f}"
            f"{file_ingest / duck_ingest:>9.2f}x"
        )
        print(f"{'  journals/s':<40}{N / duck_ingest:>12.0f}{N / file_ingest:>14.0f}")
        print(f"{'per-journal Python ingest, journals/s':<40}{small / py_ingest:>12.0f}   ({small} journals)")
        print(
            f"{'ClickHouse (chDB 26.x) ingest, journals/s':<40}{small / ch_ingest:>12.0f}   ({small} journals)"
        )
        d, s = min(duck_times), min(scan_times)
        print(f"{'trend query, best of 2 (s)':<40}{d:>12.3f}{s:>14.3f}{s / d:>9.1f}x")
        print(f"{'trend query, first run (s)':<40}{duck_times[0]:>12.3f}{scan_times[0]:>14.3f}")
        print(f"{'ClickHouse (chDB) trend query (s)':<40}{ch_query:>12.3f}   ({small} journals)")
        print(f"{'store size (MB)':<40}{db_mb:>12.1f}")
        print(f"same scorecards from both: {same}; chDB = DuckDB: {same_ch}; grades {dict(sorted(grades.items()))}, "
              f"trends {dict(sorted(trends.items()))}, anomalies {anomalies}")  # fmt: skip

        print(f"\n{'run_metrics rows':<20}{'trend query (s)':>16}{'per 10k rows (ms)':>20}")
        scale = Store(work / "scale.duckdb")
        scale.ensure_schema("evidence", ev.EVIDENCE_MIGRATIONS)
        for n in (10_000, 100_000, 1_000_000):
            _synthetic_metrics(scale, n)
            best = min(_timed(lambda: ev.scorecards(scale, sync=False))[0] for _ in range(2))
            print(f"{n:<20}{best:>16.3f}{best / (n / 10_000) * 1000:>20.2f}")

        rate_ok = N / duck_ingest >= 50_000
        query_ok = s / d >= 40
        print(f"target (bulk ingest >= 50,000 journals/s): {'met' if rate_ok else 'NOT met'}")
        print(f"target (trend query >= 40x faster than the JSON scan): {'met' if query_ok else 'NOT met'}")
        return 0 if same and same_ch else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
