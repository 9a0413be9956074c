"""The offline driver and the demo: deterministic, compounding, and collapsing with the patterns on."""

from __future__ import annotations

import itertools
import json
import math

from typer.testing import CliRunner

from faultplane.cli.plane import app
from faultplane.plane.demo import mixed_plan, run_demo
from faultplane.plane.plan import parse_plan
from faultplane.plane.simulator import Patterns, Workload, simulate

ALL = Patterns(retry=True, degradation=True, breaker=True, routing=True)
TWO_PERCENT = parse_plan({"seed": 7, "faults": [{"type": "error_injection", "rate": 0.02}]})


def test_same_seed_same_run_and_other_seed_differs() -> None:
    w = Workload(tasks=200)
    plan = mixed_plan(3)
    assert simulate(plan, w, ALL).fingerprint() == simulate(plan, w, ALL).fingerprint()
    assert simulate(plan, w, ALL).fingerprint() != simulate(mixed_plan(4), w, ALL).fingerprint()


def test_failure_compounds_across_the_fanout() -> None:
    n_tasks = 2000
    for fanout in (1, 8, 16):
        m = simulate(TWO_PERCENT, Workload(tasks=n_tasks, fanout=fanout), Patterns()).metrics
        expected = 1 - 0.98**fanout
        sd = math.sqrt(expected * (1 - expected) / n_tasks)
        assert abs((m.task_failure_rate or 0) - expected) <= 4.5 * sd + 0.002, (fanout, m.task_failure_rate)
        assert m.blast_radius == m.task_failure_rate  # every failure here is caused by an injected error


def test_patterns_collapse_the_failure_rate_within_a_retry_budget() -> None:
    w = Workload(tasks=1000, fanout=8)
    off = simulate(TWO_PERCENT, w, Patterns()).metrics
    on = simulate(TWO_PERCENT, w, ALL).metrics
    assert (off.task_failure_rate or 0) > 0.08
    assert (on.task_failure_rate or 0) < 0.005
    assert on.tcaf is not None and on.tcaf < 8 * 1.2  # retries stay inside the 20% budget


def test_degradation_turns_silent_failures_into_safe_ones() -> None:
    w = Workload(tasks=500)
    plan = mixed_plan(7)
    retry_only = simulate(plan, w, Patterns(retry=True)).metrics
    degraded = simulate(plan, w, Patterns(retry=True, degradation=True)).metrics
    assert retry_only.failed_silently > 0
    assert degraded.failed_silently == 0 and degraded.failed_safely > 0


def test_every_fault_type_runs_through_the_simulator() -> None:
    plan = parse_plan(
        {
            "seed": 1,
            "faults": [
                {"type": "latency", "added_ms": 10, "probability": 0.1},
                {"type": "cold_tool", "added_ms": 500, "idle_ms": 10_000},
                {"type": "duplicate_response", "probability": 0.1},
                {"type": "reorder", "probability": 0.1},
                {"type": "registry_inconsistency", "mode": "missing_from_list"},
            ],
        }
    )
    r = simulate(plan, Workload(tasks=50), ALL)
    kinds = {f for c in r.calls for f in c.faults}
    # Sequential simulated calls: a duplicate or held answer changes nothing, and no tools/list is ever
    # sent, so those faults are not counted as injected.
    assert kinds == {"latency", "cold_tool"}
    assert r.metrics.faults_injected == sum(len(c.faults) for c in r.calls)


def test_demo_command_prints_the_tables_and_json() -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["demo", "--tasks", "200", "--json"])
    assert out.exit_code == 0
    data = json.loads(out.output)
    assert data["fanout_compounding"][3]["fanout"] == 8
    first, last = data["patterns_mixed_plan"][0], data["patterns_mixed_plan"][-1]
    assert first["task_failure_rate"] > last["task_failure_rate"]


def test_demo_reads_whole_at_80_columns() -> None:
    out = CliRunner().invoke(app, ["demo", "--tasks", "200"], env={"COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert "…" not in out.output  # nothing cut short
    report = run_demo(tasks=200)
    for header in ("calls/task", "1-(1-p)^n", "failed w/ retry", "TCAF w/ retry", "silently", "TCSR", "ETA"):
        assert header in out.output
    row8 = next(line for line in lines if line.split()[:1] == ["8"])
    r8 = report.fanout_rows[3]
    assert row8.split()[1:] == [
        f"{r8.analytic:.1%}",
        f"{r8.without:.1%}",
        f"{r8.with_retry:.1%}",
        f"{r8.tcaf_with:.2f}",
    ]
    for label in ("+ deadline routing", "+ ETA breaker", "deadline routing", "retry + degradation"):
        assert any(line.strip().startswith(label) for line in lines), label


def test_demo_numbers_are_consistent_and_each_pattern_does_its_job() -> None:
    report = run_demo(tasks=300)
    sc = {s.pattern: s for s in report.scenarios}
    n8 = next(r for r in report.fanout_rows if r.fanout == 8)
    # The same simulation behind both tables, so the same number.
    assert sc["retry budget"].without.metrics.task_failure_rate == n8.without
    assert sc["retry budget"].with_pattern.metrics.task_failure_rate == n8.with_retry
    for r in report.fanout_rows:
        assert r.analytic is not None and r.without > 0 and r.with_retry < r.without
    rb = sc["retry budget"]
    assert (rb.with_pattern.metrics.task_failure_rate or 0) < 0.2 * (
        rb.without.metrics.task_failure_rate or 1
    )
    deg = sc["degradation"]
    assert deg.without.metrics.failed_silently > 0 and deg.with_pattern.metrics.failed_silently == 0
    br = sc["ETA breaker"]  # a dead tool: fewer wasted calls, more of them correct
    assert (br.with_pattern.metrics.tcaf or 0) < (br.without.metrics.tcaf or 0) - 2
    assert (br.with_pattern.metrics.tcsr or 0) > (br.without.metrics.tcsr or 0) + 0.2
    rt = sc["deadline routing"]
    assert (
        (rt.with_pattern.metrics.task_failure_rate or 0) < 0.05 < (rt.without.metrics.task_failure_rate or 0)
    )
    # Stacked against mixed faults, no pattern makes things worse (beyond a task or two of noise).
    rates = [r.metrics.task_failure_rate or 0 for r in report.mixed_rows]
    assert all(b <= a + 0.01 for a, b in itertools.pairwise(rates)), rates
    assert report.mixed_rows[-1].metrics.failed_silently == 0


def test_the_breaker_stays_closed_on_a_flaky_tool_that_retries_rescue() -> None:
    plan = parse_plan(
        {"seed": 5, "faults": [{"type": "registry_inconsistency", "tools": ["rank"], "probability": 0.5}]}
    )
    w = Workload(tasks=300)
    without = simulate(plan, w, Patterns(retry=True, degradation=True)).metrics
    with_breaker = simulate(plan, w, Patterns(retry=True, degradation=True, breaker=True)).metrics
    assert (with_breaker.task_failure_rate or 0) <= (without.task_failure_rate or 0) + 0.01


def test_simulate_and_validate_commands(tmp_path) -> None:
    plan = tmp_path / "p.yaml"
    plan.write_text("seed: 1\nfaults:\n  - type: timeout\n    probability: 0.1\n")
    runner = CliRunner()
    out = runner.invoke(app, ["validate", str(plan)])
    assert out.exit_code == 0 and "1 fault(s): timeout" in out.output
    out = runner.invoke(
        app, ["simulate", "--plan", str(plan), "--tasks", "50", "--patterns", "all", "--json"]
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["tool_calls"] > 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("faults:\n  - type: latency\n")
    out = runner.invoke(app, ["validate", str(bad)])
    assert out.exit_code == 2 and "faults[0].added_ms" in out.output
    out = runner.invoke(app, ["simulate", "--plan", str(plan), "--patterns", "magic"])
    assert out.exit_code == 2 and "unknown" in out.output
