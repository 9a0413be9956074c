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

    python benchmarks/bench_store.py [N_JOURNALS] [--scale]     (default 100000)

The growth table is over `run_metrics` rows generated in SQL by default; `--scale` builds it from 1M journals
really ingested instead (NDJSON written, ingested and deleted in steps of up to 150k: ~0.7 GB of disk at a time; a few
minutes).

Targets: bulk ingest >= 50,000 journals/s; trend query on DuckDB >= 40x faster than the JSON-file scan.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import random
import re
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

_ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
N = int(_ARGS[0]) if _ARGS else 100_000
# --scale: the growth table from journals really ingested (10k, 100k, 1M: ~4.7 GB of NDJSON written and ingested in
# steps of up to 150k, a few minutes) instead of run_metrics rows generated in SQL
SCALE = "--scale" in sys.argv[1:]
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


def _sentinel_text(template: dict[str, Any]) -> tuple[list[str], list[str], timedelta, bool]:
    """The template as JSON text cut at the fields a clone changes: (literal parts, field names between them, its
    end - start, whether it measured a recovery)."""
    j = copy.deepcopy(template)
    j["run_id"] = j["family"] = j["experiment"]["title"] = "@@FAM@@"
    j["run_id"] = "@@RID@@"
    j["start"], j["end"] = "@@START@@", "@@END@@"
    recovery = j["steady_states"].get("recovery")
    measured = bool(recovery and recovery.get("steady_state_met"))
    if measured:
        recovery["time_to_recover_s"] = "@@TTR@@"
        # the checks are what the recovery time is computed from: they must say the same
        recovery["window_s"] = 0.0
        recovery["checks"] = [{"t": 0.0, "met": False}, {"t": "@@TTR@@", "met": True}]
    cut = re.split(r'"@@(\w+)@@"', json.dumps(j))
    span = datetime.fromisoformat(template["end"].replace("Z", "+00:00")) - datetime.fromisoformat(
        template["start"].replace("Z", "+00:00")
    )
    return cut[0::2], cut[1::2], span, measured


def journal_lines(templates: list[dict[str, Any]], n: int) -> Iterator[str]:
    """n journals cloned from the templates as JSON lines, deterministic for a given SEED: the templates' text is
    cut once at the fields that change (run id, experiment, start and end, recovery time and checks) and each clone
    is those pieces joined, a few microseconds each instead of a deepcopy and a json.dumps."""
    rng = random.Random(SEED)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    cuts = [_sentinel_text(t) for t in templates]
    for i in range(n):
        kind = rng.random()
        parts, names, span, measured = cuts[0] if kind < 0.6 else cuts[2] if kind < 0.9 else cuts[1]
        family = f"exp-{rng.randrange(EXPERIMENTS):03d}"
        start = t0 + timedelta(seconds=i * 30 + rng.random())
        values = {
            "RID": f'"{uuid.UUID(int=rng.getrandbits(128)).hex[:16]}"',
            "FAM": f'"{family}"',
            "START": f'"{start.isoformat()}"',
            "END": f'"{(start + span).isoformat()}"',
        }
        if measured:
            slow = rng.random() < 0.01
            values["TTR"] = repr(round(rng.lognormvariate(-1.0, 0.2) * (6 if slow else 1), 3))
        out = [parts[0]]
        for name, part in zip(names, parts[1:], strict=True):
            out += (values[name], part)
        yield "".join(out)


def write_ndjson(lines: Iterator[str], directory: Path, per_file: int = 10_000) -> list[Path]:
    """NDJSON files of `per_file` journals each (the bulk path's input)."""
    directory.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    batch: list[str] = []
    for line in lines:
        batch.append(line)
        if len(batch) == per_file:
            files.append(directory / f"batch-{len(files):05d}.ndjson")
            files[-1].write_text("\n".join(batch) + "\n", encoding="utf-8")
            batch = []
    if batch:
        files.append(directory / f"batch-{len(files):05d}.ndjson")
        files[-1].write_text("\n".join(batch) + "\n", encoding="utf-8")
    return files


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


def _scale_journals(templates: list[dict[str, Any]], work: Path) -> None:
    """The growth table from journals really ingested: 1M clones in steps of up to 150k NDJSON (written, ingested
    by the bulk path, deleted), the trend query at 10k, 100k and 1M. A step past 100k holds more than one DuckDB row
    group (122,880 rows) of journals, so DuckDB writes its rows as they come, as in one large ingest; a smaller step
    into the store, which has rows by then, would be appended row by row at COMMIT (evidence_bulk._BATCH_BYTES)."""
    from faultplane.core.store import Store
    from faultplane.services import evidence as ev
    from faultplane.services.evidence_bulk import ingest_ndjson

    store = Store(work / "scale.duckdb")
    store.ensure_schema("evidence", ev.EVIDENCE_MIGRATIONS)
    stream = journal_lines(templates, 1_000_000)
    done, ingest_wall, ingest_cpu = 0, 0.0, 0.0
    print(
        f"\n{'journals ingested':<20}{'ingest wall s':>14}{'CPU s':>8}{'per wall s':>12}{'per CPU s':>11}"
        f"{'query wall s':>14}{'CPU s':>8}{'store MB':>10}"
    )
    for target in (10_000, 100_000, 1_000_000):
        while done < target:
            step = min(150_000, target - done)
            files = write_ndjson(itertools.islice(stream, step), work / "scale-ndjson")
            w, c, _ = _timed_cpu(lambda: ingest_ndjson(store, files))  # noqa: B023 (called at once)
            ingest_wall, ingest_cpu, done = ingest_wall + w, ingest_cpu + c, done + step
            shutil.rmtree(work / "scale-ndjson")
        best = min(_timed_cpu(lambda: ev.scorecards(store, sync=False))[:2] for _ in range(2))
        mb = (work / "scale.duckdb").stat().st_size / 1e6
        print(
            f"{done:<20}{ingest_wall:>14.2f}{ingest_cpu:>8.2f}{done / ingest_wall:>12.0f}{done / ingest_cpu:>11.0f}"
            f"{best[0]:>14.3f}{best[1]:>8.3f}{mb:>10.1f}"
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

        # one JSON file per journal (the naive store) and NDJSON files of 10k journals (the bulk path's input),
        # both from the same journal text; generating the text is timed once and taken off the file writes
        gen_wall, gen_cpu, _ = _timed_cpu(lambda: sum(1 for _ in journal_lines(templates, N)))
        files = work / "journals"
        files.mkdir()

        def write_files() -> None:
            for i, line in enumerate(journal_lines(templates, N)):
                (files / f"{i:07d}.json").write_text(line, encoding="utf-8")

        file_wall, file_cpu, _ = _timed_cpu(write_files)
        file_ingest, file_cpu = file_wall - gen_wall, file_cpu - gen_cpu
        ndjson = write_ndjson(journal_lines(templates, N), work / "ndjson")

        load = os.getloadavg()[0]
        rows: list[tuple[str, int, float, float]] = []  # (path, journals, wall, cpu)
        rows.append(("JSON files, one per journal", N, file_ingest, file_cpu))

        store = Store(work / "store.duckdb")
        store.ensure_schema("evidence", ev.EVIDENCE_MIGRATIONS)
        duck_ingest, duck_cpu, ingested = _timed_cpu(lambda: ingest_ndjson(store, ndjson))
        rows.append(("DuckDB bulk (NDJSON reader)", N, duck_ingest, duck_cpu))

        small = min(N, 10_000)
        py_store = Store(work / "python.duckdb")
        sample = [json.loads(line) for line in journal_lines(templates, small)]
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
        # the scan once: its files were just written and are in the OS cache
        scan_runs, naive = [], []
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
        print(
            f"\n{'trend query (200 experiments)':<40}{'wall s':>8}{'CPU s':>8}{'vs JSON scan: wall':>20}{'CPU':>7}"
        )
        print(f"{'DuckDB, best of 2':<40}{d:>8.3f}{dc:>8.3f}{s_ / d:>19.1f}x{sc / dc:>6.1f}x")
        print(f"{'DuckDB, first run':<40}{duck_runs[0][0]:>8.3f}{duck_runs[0][1]:>8.3f}")
        print(f"{'JSON file scan':<40}{s_:>8.3f}{sc:>8.3f}")
        print(f"{f'chDB ({small} journals)':<40}{ch_q:>8.3f}{ch_q_cpu:>8.3f}")
        if server_q is not None:
            print(f"{f'ClickHouse server ({small} journals)':<40}{server_q[0]:>8.3f}{server_q[1]:>8.3f}")
        print(f"store size (MB): {db_mb:.1f}")
        print(f"same scorecards from both: {same}; ClickHouse = DuckDB: {same_ch}; grades {dict(sorted(grades.items()))}, "
              f"trends {dict(sorted(trends.items()))}, anomalies {anomalies}")  # fmt: skip

        if SCALE:
            _scale_journals(templates, work)
        else:
            print(f"\n{'run_metrics rows (SQL)':<24}{'wall s':>10}{'CPU s':>10}{'per 10k rows (ms)':>20}")
            scale = Store(work / "scale.duckdb")
            scale.ensure_schema("evidence", ev.EVIDENCE_MIGRATIONS)
            for n in (10_000, 100_000, 1_000_000):
                _synthetic_metrics(scale, n)
                best = min(_timed_cpu(lambda: ev.scorecards(scale, sync=False))[:2] for _ in range(2))
                print(f"{n:<24}{best[0]:>10.3f}{best[1]:>10.3f}{best[0] / (n / 10_000) * 1000:>20.2f}")

        rate, cpu_rate = N / duck_ingest, N / duck_cpu
        print(
            f"target (bulk ingest >= 50,000 journals/s): {'met' if rate >= 50_000 else 'NOT met'} "
            f"({rate:,.0f}/s wall, {cpu_rate:,.0f} per CPU-second)"
        )
        print(
            f"target (trend query >= 40x faster than the JSON scan): wall {'met' if s_ / d >= 40 else 'NOT met'} "
            f"({s_ / d:.0f}x), CPU {'met' if sc / dc >= 40 else 'NOT met'} ({sc / dc:.0f}x)"
        )
        return 0 if same and same_ch else 1
    finally:
        for started in servers:
            if started is not None:
                started[1](started[0])
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
