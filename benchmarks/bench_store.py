"""Evidence store: ingest 100k journals and run the trend query on DuckDB, against a naive scan of JSON files.

The journals are real ones (three runs of a real experiment through the engine, on this machine) cloned into
100k runs of 200 experiments, with seeded outcomes and recovery times. Both sides compute the same scorecards
(grade, trend, anomalies over each experiment's trailing 10 runs) with the same Python code; what differs is the
data access: `run_metrics` rows picked by one SQL query, or every journal file read and parsed.

    python benchmarks/bench_store.py [N_JOURNALS]     (default 100000)

Target: the trend query on DuckDB at least 10x faster than the JSON-file scan.
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


def main() -> int:
    from faultplane.core.store import Store
    from faultplane.services import evidence as ev

    work = Path(tempfile.mkdtemp(prefix="fp-bench-store-"))
    try:
        templates = real_templates(work)
        size = sum(len(json.dumps(j)) for j in templates) / len(templates)

        # generating the clones costs the same on both sides; it is timed once and taken off both
        t = time.perf_counter()
        for _ in journals(templates, N):
            pass
        generate = time.perf_counter() - t

        store = Store(work / "store.duckdb")
        t = time.perf_counter()
        ingested = ev.ingest_journals(store, journals(templates, N))
        duck_ingest = time.perf_counter() - t - generate

        files = work / "journals"
        files.mkdir()
        t = time.perf_counter()
        for j in journals(templates, N):
            (files / f"{j['run_id']}.json").write_text(json.dumps(j), encoding="utf-8")
        file_ingest = time.perf_counter() - t - generate

        # the trend query, twice each (the second DuckDB run has its file in the OS cache, as the JSON scan does)
        duck_times, cards = [], []
        for _ in range(2):
            t = time.perf_counter()
            cards = ev.scorecards(store, sync=False)
            duck_times.append(time.perf_counter() - t)
        scan_times, naive = [], []
        for _ in range(2):
            t = time.perf_counter()
            naive = [ev._scorecard(k, rows) for k, rows in sorted(metrics_from_files(files).items())]
            scan_times.append(time.perf_counter() - t)
        same = [c.model_dump() for c in cards] == [c.model_dump() for c in naive]
        grades = defaultdict(int)
        trends = defaultdict(int)
        for c in cards:
            grades[c.grade] += 1
            trends[c.trend] += 1
        anomalies = sum(len(c.anomalies) for c in cards)
        db_mb = (work / "store.duckdb").stat().st_size / 1e6

        print(
            f"{ingested} journals (~{size / 1024:.1f} KiB each, from 3 real runs), {EXPERIMENTS} experiments"
        )
        print(f"{'operation':<34}{'DuckDB':>12}{'JSON files':>14}{'ratio':>10}")
        print(
            f"{'ingest (s, generation excluded)':<34}{duck_ingest:>12.2f}{file_ingest:>14.2f}{file_ingest / duck_ingest:>9.2f}x"
        )
        print(f"{'  journals/s':<34}{N / duck_ingest:>12.0f}{N / file_ingest:>14.0f}")
        d, s = min(duck_times), min(scan_times)
        print(f"{'trend query, best of 2 (s)':<34}{d:>12.3f}{s:>14.3f}{s / d:>9.1f}x")
        print(f"{'trend query, first run (s)':<34}{duck_times[0]:>12.3f}{scan_times[0]:>14.3f}")
        print(f"{'store size (MB)':<34}{db_mb:>12.1f}")
        print(f"same scorecards from both: {same}; grades {dict(sorted(grades.items()))}, "
              f"trends {dict(sorted(trends.items()))}, anomalies {anomalies}")  # fmt: skip
        target = s / d >= 10
        print(f"target (trend query >= 10x faster than the JSON scan): {'met' if target else 'NOT met'}")
        return 0 if same else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
