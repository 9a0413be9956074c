"""The one metrics model of the plane: per-call records, per-task records, and the formulas over them.

The simulator and both proxies produce the same `CallRecord`s, so a report means the same thing whichever
driver produced it. The formulas are documented in docs/plane.md; the docstrings here repeat them briefly.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["CallRecord", "PlaneMetrics", "TaskRecord", "compute_metrics", "outcome_of"]

Outcome = Literal["ok", "tool_error", "rpc_error", "timeout", "unanswered"]
TaskOutcome = Literal["succeeded", "degraded", "escalated", "noticed", "silent"]


@dataclass(slots=True)
class CallRecord:
    """One request/response exchange as the client experienced it."""

    ts: float
    method: str
    tool: str | None
    request_id: str | None
    outcome: Outcome
    latency_ms: float
    faults: list[str] = field(default_factory=list)
    corrupted: bool = False  # the plane changed the answer without saying so
    task_id: str | None = None
    detected: bool = False  # the client reported noticing the answer was wrong (a safe failure, not silent)

    @property
    def available(self) -> bool:
        """The tool answered with a non-error result."""
        return self.outcome == "ok"

    @property
    def correct(self) -> bool:
        """Available, and the answer is the one the tool produced."""
        return self.available and not self.corrupted

    def as_row(self) -> dict[str, Any]:
        row = asdict(self)
        del row["detected"]  # known later, from the client's report: kept in plane_detections
        row["faults"] = ",".join(self.faults)
        row["available"] = self.available
        row["correct"] = self.correct
        return row


@dataclass(slots=True)
class TaskRecord:
    """One agent task: its calls and how it ended.

    `outcome`: succeeded (right answer), degraded (answered, flagged as partial), escalated (handed to a
    human or caller), noticed (failed with an error it reported), silent (reported success, answer wrong).
    """

    task_id: str
    outcome: TaskOutcome
    calls: int
    hit_fault: bool
    latency_ms: float = 0.0


def outcome_of(msg: dict[str, Any] | None) -> Outcome:
    """Classify a JSON-RPC response (None means it never arrived)."""
    if msg is None:
        return "timeout"
    if "error" in msg:
        return "rpc_error"
    result = msg.get("result")
    if isinstance(result, dict) and result.get("isError") is True:
        return "tool_error"
    return "ok"


def _ratio(n: float, d: float) -> float | None:
    return n / d if d else None


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[k]


@dataclass(slots=True)
class PlaneMetrics:
    calls: int
    tool_calls: int
    availability: float | None
    correctness: float | None
    eta: float | None
    eta_by_tool: dict[str, float]
    tcsr: float | None
    apparent_success: float | None
    faults_injected: int
    faulted_calls: int
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    tasks: int
    tcaf: float | None
    task_failure_rate: float | None
    blast_radius: float | None
    tasks_hit_by_fault: int
    failed_safely: int
    failed_silently: int
    task_outcomes: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def compute_metrics(
    calls: Iterable[CallRecord], tasks: Iterable[TaskRecord] | None = None, *, fault_events: int | None = None
) -> PlaneMetrics:
    """All plane metrics over `tools/call` records (other methods count in `calls` only).

    A  = available tool calls / tool calls            (per-call availability)
    C  = correct tool calls / available tool calls     (per-call correctness)
    ETA_t = A_t * C_t per tool; ETA = unweighted mean of ETA_t over tools called
    TCSR = correct tool calls / tool calls             (call-weighted; retries count as calls)
    apparent success = available / tool calls          (what a client that checks only isError sees)
    TCAF = tool calls / tasks
    blast radius = tasks that failed and hit an injected fault / tasks
    failed safely = hit a fault and ended degraded, escalated or noticed; failed silently = ended silent
    """
    all_calls = list(calls)
    tc = [c for c in all_calls if c.method == "tools/call"]
    n = len(tc)
    available = sum(1 for c in tc if c.available)
    correct = sum(1 for c in tc if c.correct)
    per_tool: dict[str, list[CallRecord]] = defaultdict(list)
    for c in tc:
        per_tool[c.tool or "?"].append(c)
    eta_by_tool = {}
    for tool, recs in sorted(per_tool.items()):
        a = sum(1 for c in recs if c.available) / len(recs)
        ok = sum(1 for c in recs if c.correct)
        av = sum(1 for c in recs if c.available)
        eta_by_tool[tool] = a * (ok / av if av else 0.0)
    eta = sum(eta_by_tool.values()) / len(eta_by_tool) if eta_by_tool else None
    lat = [c.latency_ms for c in tc if c.outcome not in ("timeout", "unanswered")]

    task_list = list(tasks) if tasks is not None else _tasks_from_calls(tc)
    nt = len(task_list)
    failed = [t for t in task_list if t.outcome != "succeeded"]
    hit = [t for t in task_list if t.hit_fault]
    hit_failed = [t for t in failed if t.hit_fault]
    outcomes: dict[str, int] = defaultdict(int)
    for t in task_list:
        outcomes[t.outcome] += 1
    return PlaneMetrics(
        calls=len(all_calls),
        tool_calls=n,
        availability=_ratio(available, n),
        correctness=_ratio(correct, available),
        eta=eta,
        eta_by_tool=eta_by_tool,
        tcsr=_ratio(correct, n),
        apparent_success=_ratio(available, n),
        faults_injected=fault_events if fault_events is not None else sum(len(c.faults) for c in all_calls),
        faulted_calls=sum(1 for c in all_calls if c.faults),
        latency_p50_ms=_percentile(lat, 0.50),
        latency_p99_ms=_percentile(lat, 0.99),
        tasks=nt,
        tcaf=_ratio(sum(t.calls for t in task_list), nt),
        task_failure_rate=_ratio(len(failed), nt),
        blast_radius=_ratio(len(hit_failed), nt),
        tasks_hit_by_fault=len(hit),
        failed_safely=sum(1 for t in hit_failed if t.outcome in ("degraded", "escalated", "noticed")),
        failed_silently=sum(1 for t in hit_failed if t.outcome == "silent"),
        task_outcomes=dict(outcomes),
    )


def _tasks_from_calls(calls: list[CallRecord]) -> list[TaskRecord]:
    """Tasks as seen by a proxy: calls labelled with `_meta["faultplane/task"]`.

    A proxy cannot see what the agent concluded, so a task's outcome is read off its calls: for each tool,
    the last call decides. A wrong answer the client took as fine is `silent`; an error it saw is `noticed`.
    """
    by_task: dict[str, list[CallRecord]] = defaultdict(list)
    for c in calls:
        if c.task_id is not None:
            by_task[c.task_id].append(c)
    out = []
    for task_id, recs in by_task.items():
        last: dict[str, CallRecord] = {}
        for c in sorted(recs, key=lambda r: r.ts):
            last[c.tool or "?"] = c
        finals = list(last.values())
        outcome: TaskOutcome
        if all(c.correct for c in finals):
            outcome = "succeeded"
        elif any(c.available and c.corrupted and not c.detected for c in finals) and all(
            c.available for c in finals
        ):
            outcome = "silent"
        else:
            outcome = "noticed"
        out.append(
            TaskRecord(
                task_id=task_id,
                outcome=outcome,
                calls=len(recs),
                hit_fault=any(c.faults for c in recs),
                latency_ms=sum(c.latency_ms for c in recs),
            )
        )
    return out
