"""The metric formulas on hand-made records."""

from __future__ import annotations

import pytest

from faultplane.plane.metrics import CallRecord, TaskRecord, compute_metrics, outcome_of


def rec(
    tool: str, outcome: str, *, corrupted: bool = False, faults: tuple[str, ...] = (), task: str | None = None
):
    return CallRecord(0.0, "tools/call", tool, None, outcome, 1.0, list(faults), corrupted, task)  # type: ignore[arg-type]


def test_outcome_classification() -> None:
    assert outcome_of(None) == "timeout"
    assert outcome_of({"id": 1, "error": {"code": 1}}) == "rpc_error"
    assert outcome_of({"id": 1, "result": {"isError": True}}) == "tool_error"
    assert outcome_of({"id": 1, "result": {"content": []}}) == "ok"


def test_call_level_formulas() -> None:
    calls = [
        rec("a", "ok"),
        rec("a", "ok"),
        rec("a", "ok", corrupted=True, faults=("drift",)),
        rec("a", "rpc_error", faults=("err",)),
        rec("b", "ok"),
        rec("b", "timeout", faults=("timeout",)),
    ]
    m = compute_metrics(calls, [])
    assert m.tool_calls == 6
    assert m.availability == pytest.approx(4 / 6)
    assert m.correctness == pytest.approx(3 / 4)
    assert m.tcsr == pytest.approx(3 / 6)
    assert m.apparent_success == pytest.approx(4 / 6)
    # ETA_a = 3/4 * 2/3 = 0.5 ; ETA_b = 1/2 * 1 = 0.5
    assert m.eta_by_tool == {"a": pytest.approx(0.5), "b": pytest.approx(0.5)}
    assert m.eta == pytest.approx(0.5)
    assert m.faulted_calls == 3


def test_task_level_formulas() -> None:
    tasks = [
        TaskRecord("1", "succeeded", 8, hit_fault=False),
        TaskRecord("2", "succeeded", 10, hit_fault=True),
        TaskRecord("3", "degraded", 9, hit_fault=True),
        TaskRecord("4", "silent", 8, hit_fault=True),
        TaskRecord("5", "noticed", 5, hit_fault=False),
    ]
    m = compute_metrics([], tasks)
    assert m.tcaf == pytest.approx(40 / 5)
    assert m.task_failure_rate == pytest.approx(3 / 5)
    assert m.blast_radius == pytest.approx(2 / 5)
    assert (m.failed_safely, m.failed_silently) == (1, 1)


def test_proxy_tasks_from_meta_labels() -> None:
    calls = [
        rec("a", "ok", task="t1"),
        rec("b", "ok", task="t1"),
        rec("a", "rpc_error", faults=("e",), task="t2"),
        rec("a", "ok", corrupted=True, faults=("d",), task="t3"),
    ]
    m = compute_metrics(calls)
    assert m.tasks == 3
    assert m.task_outcomes == {"succeeded": 1, "noticed": 1, "silent": 1}
    assert m.failed_silently == 1 and m.failed_safely == 1
