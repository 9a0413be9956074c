"""Evidence store: ingest 100k journals and run the trend query on DuckDB, against a naive scan of JSON files;
ClickHouse ingest and query figures (chDB 26.x in process, and Debian's 18.16 server over HTTP when installed);
trend-query time from 10k to 1M runs.

The journals are real ones (three runs of a real experiment through the engine, on this machine) cloned into
100k runs of 200 experiments, with seeded outcomes and recovery times. Both sides compute the same scorecards
(grade, trend, anomalies over each experiment's trailing 10 runs) with the same Python code; what differs is the
data access: `run_metrics` rows picked by one SQL query, or every journal file read and parsed.

Ingest: the bulk path (`evidence_bulk.ingest_ndjson`, DuckDB's JSON reader over NDJSON journal files) against
writing one JSON file per journal, and the per-journal Python path (`evidence.ingest_journals`, JSONEachRow inserts
on ClickHouse) on 10k of them. Scaling: `run_metrics` tables of 10k, 100k and 1M rows generated in SQL (2,000
experiments), same query.

Every row has its wall time and its CPU time (this process's, all threads: DuckDB's and chDB's included; the
server's own CPU is not in it). On a machine shared with other work the wall time stretches and the CPU time does
not, so both are printed, with the load average when the benchmark started.

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

from lab_policy import lab_config_home

N = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
EXPERIMENTS = 200
SEED = 7


def real_templates(work: Path) -> list[dict[str, Any]]:
    """Three journals from real runs: completed, failed (steady state not met before), completed again."""
    import anyio

    from faultplane.core.store import Store
    from faultplane.services.experiments import run_experiment
    from faultplane.services.runs import load_journal

    os.environ["XDG_CONFIG_HOME"] = lab_config_home(work)
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
            ttr = round(rng.lognormvariate(-1.0, 0.2) * (6 if slow else 1), 3)
            recovery["time_to_recover_s"] = ttr
            # the checks are what the recovery time is computed from: they must say the same
            recovery["window_s"] = 0.0
            recovery["checks"] = [{"t": 0.0, "met": False}, {"t": ttr, "met": True}]
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


def _timed_cpu(fn: Any) -> tuple[float, float, Any]:
    """(wall s, CPU s of this process, all threads, result)."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t, time.process_time() - c, out


def _server() -> tuple[Any, Any] | None:
    """Debian's ClickHouse server on a free port (the test suite's launcher), or None when it is not installed."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "evidence"))
    try:
        from conftest import clickhouse_command, start_clickhouse, stop_clickhouse  # the suite's launcher
    except ImportError:
        return None
    if clickhouse_command() is None:
        return None
    return start_clickhouse(Path(tempfile.mkdtemp(prefix="fp-bench-ch-"))), stop_clickhouse


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
    servers: list[Any] = []
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

        gen_cpu = _timed_cpu(lambda: sum(1 for _ in journals(templates, N)))[1]
        file_wall, file_cpu, _ = _timed_cpu(write_files)
        file_ingest, file_cpu = file_wall - generate, file_cpu - gen_cpu
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

        load = os.getloadavg()[0]
        rows: list[tuple[str, int, float, float]] = []  # (path, journals, wall, cpu)
        rows.append(("JSON files, one per journal", N, file_ingest, file_cpu))

        store = Store(work / "store.duckdb")
        store.ensure_schema("evidence", ev.EVIDENCE_MIGRATIONS)
        duck_ingest, duck_cpu, ingested = _timed_cpu(lambda: ingest_ndjson(store, ndjson))
        rows.append(("DuckDB bulk (NDJSON reader)", N, duck_ingest, duck_cpu))

        small = min(N, 10_000)
        py_store = Store(work / "python.duckdb")
        sample = list(journals(templates, small))
        w, c, _ = _timed_cpu(lambda: ev.ingest_journals(py_store, sample))
        rows.append(("DuckDB per-journal Python", small, w, c))

        chdb = ClickHouseStore(f"chdb://{work / 'chdb'}?database=bench")
        w, c, _ = _timed_cpu(lambda: ev.ingest_journals(chdb, sample))
        rows.append(("chDB 26.x, JSONEachRow", small, w, c))

        server = _server()
        servers.append(server)
        server_store = None
        if server is not None:
            server_store = ClickHouseStore(server[0].url("bench"))
            version = server_store.server_version
            w, c, _ = _timed_cpu(lambda: ev.ingest_journals(server_store, sample))
            rows.append((f"ClickHouse {version} HTTP, JSONEachRow", small, w, c))

        # the trend query, twice each (the second DuckDB run has its file in the OS cache, as the JSON scan does)
        duck_runs, cards = [], []
        for _ in range(2):
            w, c, cards = _timed_cpu(lambda: ev.scorecards(store, sync=False))
            duck_runs.append((w, c))
        scan_runs, naive = [], []
        for _ in range(2):
            w, c, naive = _timed_cpu(
                lambda: [ev._scorecard(k, rows) for k, rows in sorted(metrics_from_files(files).items())]
            )
            scan_runs.append((w, c))
        same = [c.model_dump() for c in cards] == [c.model_dump() for c in naive]
        ch_q, ch_q_cpu, ch_cards = _timed_cpu(lambda: ev.scorecards(chdb, sync=False))
        py_cards = ev.scorecards(py_store, sync=False)
        same_ch = [c.model_dump() for c in ch_cards] == [c.model_dump() for c in py_cards]
        server_q = None
        if server_store is not None:
            server_q = _timed_cpu(lambda: ev.scorecards(server_store, sync=False))
            same_ch = same_ch and [c.model_dump() for c in server_q[2]] == [c.model_dump() for c in py_cards]
        grades: dict[str, int] = defaultdict(int)
        trends: dict[str, int] = defaultdict(int)
        for card in cards:
            grades[card.grade] += 1
            trends[card.trend] += 1
        anomalies = sum(len(card.anomalies) for card in cards)
        db_mb = (work / "store.duckdb").stat().st_size / 1e6

        print(
            f"{ingested} journals (~{size / 1024:.1f} KiB each, from 3 real runs), {EXPERIMENTS} experiments; "
            f"load average {load:.1f} on {os.cpu_count()} CPUs at the start"
        )
        print(f"{'ingest':<40}{'journals':>9}{'wall s':>8}{'CPU s':>8}{'per wall s':>12}{'per CPU s':>11}")
        for name, n, w, c in rows:
            print(f"{name:<40}{n:>9}{w:>8.2f}{c:>8.2f}{n / w:>12.0f}{n / max(c, 1e-9):>11.0f}")
        (d, dc), (s_, sc) = min(duck_runs), min(scan_runs)
        print(f"\n{'trend query (200 experiments)':<40}{'wall s':>8}{'CPU s':>8}{'vs JSON scan':>14}")
        print(f"{'DuckDB, best of 2':<40}{d:>8.3f}{dc:>8.3f}{s_ / d:>13.1f}x")
        print(f"{'DuckDB, first run':<40}{duck_runs[0][0]:>8.3f}{duck_runs[0][1]:>8.3f}")
        print(f"{'JSON file scan, best of 2':<40}{s_:>8.3f}{sc:>8.3f}")
        print(f"{f'chDB ({small} journals)':<40}{ch_q:>8.3f}{ch_q_cpu:>8.3f}")
        if server_q is not None:
            print(f"{f'ClickHouse server ({small} journals)':<40}{server_q[0]:>8.3f}{server_q[1]:>8.3f}")
        print(f"store size (MB): {db_mb:.1f}")
        print(f"same scorecards from both: {same}; ClickHouse = DuckDB: {same_ch}; grades {dict(sorted(grades.items()))}, "
              f"trends {dict(sorted(trends.items()))}, anomalies {anomalies}")  # fmt: skip

        print(f"\n{'run_metrics rows':<20}{'wall s':>10}{'CPU s':>10}{'per 10k rows (ms)':>20}")
        scale = Store(work / "scale.duckdb")
        scale.ensure_schema("evidence", ev.EVIDENCE_MIGRATIONS)
        for n in (10_000, 100_000, 1_000_000):
            _synthetic_metrics(scale, n)
            best = min(_timed_cpu(lambda: ev.scorecards(scale, sync=False))[:2] for _ in range(2))
            print(f"{n:<20}{best[0]:>10.3f}{best[1]:>10.3f}{best[0] / (n / 10_000) * 1000:>20.2f}")

        rate, cpu_rate = N / duck_ingest, N / duck_cpu
        print(
            f"target (bulk ingest >= 50,000 journals/s): {'met' if rate >= 50_000 else 'NOT met'} "
            f"({rate:,.0f}/s wall, {cpu_rate:,.0f} per CPU-second)"
        )
        print(
            f"target (trend query >= 40x faster than the JSON scan): {'met' if s_ / d >= 40 else 'NOT met'}"
        )
        return 0 if same and same_ch else 1
    finally:
        for started in servers:
            if started is not None:
                started[1](started[0])
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
