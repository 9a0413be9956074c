"""Scores, trends, anomalies, estimate vs actual and baselines on real runs; the formulas on hand-made samples."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import anyio
import pytest
from evidence_helpers import ESTIMATE, PLAN, service_experiment
from hypothesis import given
from hypothesis import strategies as st

from faultplane.core.model import check_tolerance
from faultplane.services import evidence as ev


def _cards(store: Any) -> dict[str, ev.Scorecard]:
    return {c.experiment: c for c in ev.scorecards(store)}


def test_scorecards_grade_trend_and_anomaly(real_runs: Any) -> None:
    cards = _cards(real_runs.store)
    assert set(cards) == {"svc", "db", "cache"}

    svc = cards["svc"]
    assert svc.runs == ev.TRAILING_RUNS  # 11 runs made, graded on the trailing 10
    assert svc.pass_rate == 1.0 and svc.grade == "A"
    # nine runs at 100 and the slow one at 85 (recovered, but slower than the 0.3 s estimate)
    assert svc.score == pytest.approx((9 * 100 + 85) / 10)
    assert svc.trend == "stable"
    assert [a.run_id for a in svc.anomalies] == [real_runs.run_ids[10]]
    anomaly = svc.anomalies[0]
    # the service restarts for 0.7 s from inside the revert; the engine stamps the removal after the revert
    # returns, so a loaded machine measures somewhat less (0.696 s seen): a margin, not the exact figure
    assert anomaly.time_to_recover_s >= 0.5 and anomaly.baseline_median_s < 0.2
    assert anomaly.history == 10 and "passed, but recovery took" in anomaly.reason

    db = cards["db"]  # four deviated runs, then four good ones
    assert db.trend == "improving" and db.score_delta == pytest.approx(70.0)
    assert db.grade == "C" and db.pass_rate == 0.5 and not db.anomalies
    cache = cards["cache"]  # three good, then three deviated
    assert cache.trend == "degrading" and cache.score_delta == pytest.approx(-70.0)
    assert cache.last_status == "deviated"


def test_summary_last_and_all_and_estimate_vs_actual(real_runs: Any) -> None:
    summary = ev.summarize(real_runs.store, last=5)
    assert summary.runs_total == len(PLAN) and summary.runs_shown == 5
    assert [r.run_id for r in summary.runs] == list(reversed(real_runs.run_ids))[:5]
    everything = ev.summarize(real_runs.store, last=None)
    assert everything.runs_shown == len(PLAN)
    slow = next(r for r in everything.runs if r.run_id == real_runs.run_ids[10])
    assert slow.anomaly and slow.passed and slow.fault_types == ["latency"]
    est = {c.metric: c for c in slow.estimate}
    assert est["recovery_seconds"].estimate == ESTIMATE["recovery_seconds"]
    assert est["recovery_seconds"].actual == slow.time_to_recover_s
    assert est["recovery_seconds"].within is False and est["recovery_seconds"].ratio > 2
    assert est["latency_p99_ms"].estimate == 80 and est["latency_p99_ms"].actual is None  # no load generator
    fast = everything.runs[-1]
    assert {c.metric: c for c in fast.estimate}["recovery_seconds"].within is True
    with pytest.raises(ev.EvidenceError, match="last"):
        ev.summarize(real_runs.store, last=0)


def test_estimate_vs_actual_reads_the_load_summary(real_runs: Any) -> None:
    journal = dict(real_runs.journals[0])
    # the shape the built-in load generator records (engine.sli.LoadFigures.snapshot)
    journal["load"] = {"error_rate": 0.002, "latency_p99": 61.5, "throughput": 40.0}
    result = ev.estimate_vs_actual(journal)
    rows = {c.metric: c for c in result["comparisons"]}
    assert result["impact"] == ESTIMATE["impact"]
    assert rows["latency_p99_ms"].actual == 61.5 and rows["latency_p99_ms"].within is True
    assert rows["error_rate"].actual == 0.002 and rows["error_rate"].estimate is None


def test_probe_baseline_from_stored_readings(real_runs: Any) -> None:
    samples = ev.probe_samples(real_runs.store, "latency", "svc")
    assert samples == [20.0] * 11  # the baseline phase: before any fault
    after = ev.probe_samples(real_runs.store, "latency", "db", phase="hypothesis_after")
    assert sorted(set(after)) == [50.0, 170.0]
    b = ev.probe_baseline(real_runs.store, "latency", "db", phase="hypothesis_after", method="percentile",
                          percentiles=(0, 100))  # fmt: skip
    assert b.tolerance == {"type": "range", "range": [50.0, 170.0]}
    check_tolerance(b.tolerance)
    with pytest.raises(ev.EvidenceError, match="no numeric readings of 'nope'"):
        ev.probe_baseline(real_runs.store, "nope")


def test_derived_tolerance_runs_in_a_real_experiment(
    real_runs: Any, tmp_path: Path, lab_policy: Path
) -> None:
    """A tolerance derived from past readings is accepted by the engine and holds on a healthy run."""
    from faultplane.services.experiments import run_experiment

    tol = ev.derive_tolerance([19.0, 20.0, 21.0, 20.0, 20.5], method="mean_ksigma", k=3)
    exp = service_experiment("derived", tmp_path / "svc.json", restart_s=0.0)
    exp["steady-state-hypothesis"]["probes"][0]["tolerance"] = tol
    exp["method"] = []
    result = anyio.run(lambda: run_experiment(exp, store=real_runs.store, journal_dir=tmp_path))
    assert result.status == "completed"


def test_baseline_formulas() -> None:
    data = [10.0, 12.0, 11.0, 13.0, 9.0, 11.0, 100.0]
    b = ev.baseline(data, "mean_ksigma", k=2)
    assert b.low == pytest.approx(statistics.fmean(data) - 2 * statistics.stdev(data))
    assert b.high == pytest.approx(statistics.fmean(data) + 2 * statistics.stdev(data))
    m = ev.baseline(data, "mad", k=3)
    assert m.median == 11.0 and m.mad == 1.0
    assert m.tolerance["range"] == pytest.approx([11 - 3 * 1.4826, 11 + 3 * 1.4826])
    p = ev.baseline(list(range(101)), "percentile", percentiles=(5, 95))
    assert p.tolerance["range"] == [5.0, 95.0]
    for bad, field in (([], "samples"), (["x"], r"samples\[0\]"), ([1.0, float("nan")], r"samples\[1\]")):
        with pytest.raises(ev.EvidenceError, match=field):
            ev.baseline(bad)
    with pytest.raises(ev.EvidenceError, match="method"):
        ev.baseline([1.0, 2.0], "zscore")
    with pytest.raises(ev.EvidenceError, match="k:"):
        ev.baseline([1.0, 2.0], k=-1)
    with pytest.raises(ev.EvidenceError, match="needs at least 2"):
        ev.baseline([1.0], "mean_ksigma")


@given(
    st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=50),
    st.sampled_from(["mean_ksigma", "mad", "percentile"]),
)
def test_derived_range_contains_the_centre(samples: list[float], method: str) -> None:
    b = ev.baseline(samples, method, k=3, percentiles=(0, 100))
    check_tolerance(b.tolerance)
    lo, hi = b.tolerance["range"]
    centre = {"mean_ksigma": b.mean, "mad": b.median, "percentile": b.median}[method]
    assert lo - 1e-6 <= centre <= hi + 1e-6


def test_grades_and_run_score() -> None:
    assert [ev.grade(s) for s in (100, 90, 89.9, 75, 50, 49.9, 0)] == ["A", "A", "B", "B", "C", "D", "D"]
    assert ev.run_score("completed", True, 0.1, 0.3) == 100
    assert ev.run_score("completed", True, 0.5, 0.3) == 85
    assert ev.run_score("completed", False, None, 0.3) == 70
    assert ev.run_score("completed", None, None, None) == 100
    assert ev.run_score("deviated", True, 0.1, None) == 30
    assert ev.run_score("aborted", False, None, None) == 0


def test_sustained_recovery_window() -> None:
    checks = [(0.0, False), (0.1, True), (0.2, False), (0.3, True), (0.4, True), (0.5, True), (0.6, True)]
    assert ev.sustained_recovery(checks, 0) == 0.1
    assert ev.sustained_recovery(checks, 0.25) == 0.3
    assert ev.sustained_recovery(checks, 0.3) == 0.3
    assert ev.sustained_recovery(checks, 0.31) is None
    with pytest.raises(ev.EvidenceError, match="window_s"):
        ev.sustained_recovery(checks, -1)


def test_single_passing_check_is_not_recovery(tmp_path: Path, lab_policy: Path, store: Any) -> None:
    """A service that answers once mid-restart fools a one-check recovery; the engine's sustained window
    (`runtime.recovery_window_s`) is not fooled, and evidence reads the recorded checks the same way."""
    from faultplane.services.experiments import run_experiment
    from faultplane.services.runs import load_journal

    restart_s = 0.4
    one_check_state = tmp_path / "svc1.json"
    exp = service_experiment("flappy", one_check_state, restart_s=restart_s, probe_func="flapping_latency")
    result = anyio.run(lambda: run_experiment(exp, store=store, journal_dir=tmp_path))
    fooled = ev.recovery_of(load_journal(result.run_id, store))
    assert fooled.source == "checks" and fooled.time_to_recover_s is not None
    assert fooled.time_to_recover_s < restart_s / 2  # the one good answer during the restart

    sustained_state = tmp_path / "svc2.json"
    exp = service_experiment("flappy", sustained_state, restart_s=restart_s, probe_func="flapping_latency")
    exp["runtime"]["recovery_window_s"] = 0.2
    result = anyio.run(lambda: run_experiment(exp, store=store, journal_dir=tmp_path))
    journal = load_journal(result.run_id, store)
    recorded = journal["steady_states"]["recovery"]
    assert recorded["steady_state_met"] is True and recorded["window_s"] == 0.2
    assert any(not c["met"] for c in recorded["checks"])  # the flap was seen and did not count
    assert restart_s - 0.05 <= recorded["time_to_recover_s"] <= restart_s + 0.3
    sustained = ev.recovery_of(journal)
    assert sustained.source == "checks" and sustained.time_to_recover_s == recorded["time_to_recover_s"]
    assert ev.recovery_of(journal, window_s=0).time_to_recover_s < restart_s / 2  # one check: the flap


def test_dry_runs_are_not_scored(real_runs: Any, tmp_path: Path, lab_policy: Path, store: Any) -> None:
    from faultplane.services.experiments import run_experiment

    exp = service_experiment("dry", tmp_path / "svc.json")
    anyio.run(lambda: run_experiment(exp, store=store, dry_run=True, journal_dir=tmp_path))
    assert ev.summarize(store).runs_total == 0
    assert ev.scorecards(store) == []


def test_recovery_that_became_immediate_is_an_improving_trend() -> None:
    """Newer runs recovering at the first check (median 0 s) against slower older ones: a trend, not a crash."""
    from datetime import UTC, datetime, timedelta

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        {
            "run_id": f"r{i}",
            "experiment_key": "exp",
            "experiment_title": "exp",
            "status": "completed",
            "passed": True,
            "run_score": 100.0,
            "time_to_recover_s": 0.0 if i < 4 else 0.5,
            "recovery_met": True,
            "started_at": t0 - timedelta(minutes=i),
        }
        for i in range(8)  # newest first
    ]
    card = ev._scorecard("exp", rows)
    assert card.trend == "improving"
    assert "immediate" in card.trend_reason
