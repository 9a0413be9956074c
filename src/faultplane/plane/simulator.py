"""The offline driver: agents running fan-out tasks against simulated tools, on a virtual clock.

No server, no network, no sleeps. Each simulated tool call is a real JSON-RPC request dict that goes through
the same `FaultEngine` the proxies use, and the simulated tool's answer goes back through
`FaultEngine.on_response`, so a plan means the same thing here as in front of a real server. Everything is
drawn from the plan's seed: the same plan and workload give the same numbers, call for call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from faultplane.plane.faults import FaultEngine, uniform
from faultplane.plane.metrics import CallRecord, PlaneMetrics, TaskRecord, compute_metrics, outcome_of
from faultplane.plane.plan import FaultPlan
from faultplane.plane.resilience import (
    AttemptResult,
    DeadlineRouter,
    EtaCircuitBreaker,
    GracefulDegradation,
    PolicyOutcome,
    ResiliencePolicy,
    RetryBudget,
)

__all__ = ["Patterns", "SimulationResult", "Workload", "simulate"]

MIRROR_SUFFIX = "-mirror"


@dataclass(frozen=True)
class Workload:
    """`tasks` tasks, each calling `fanout` tools in turn (cycling through `tools`)."""

    tasks: int = 1000
    fanout: int = 8
    tools: tuple[str, ...] = ("search", "fetch", "lookup", "rank")
    base_latency_ms: dict[str, float] = field(
        default_factory=lambda: {"search": 120.0, "fetch": 200.0, "lookup": 60.0, "rank": 90.0}
    )
    mirror_latency_factor: float = 1.4
    items_per_result: int = 6
    deadline_ms: float = 4000.0
    call_timeout_ms: float = 1000.0
    # head-of-line blocking: how many calls sit queued behind a stalled one on the shared gateway connection
    # (each waits out the stall); the simulator's own calls are sequential, so this is the queue it models
    queued_behind: int = 2
    # tools that change something: an attempt that reached the server acted, answered or not, so a retry
    # after a lost answer acts again unless the tool honours an idempotency key (Patterns.idempotency)
    mutating: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.tasks < 1 or self.fanout < 1:
            raise ValueError("workload needs tasks >= 1 and fanout >= 1")
        if not self.tools:
            raise ValueError("workload needs at least one tool")


@dataclass(frozen=True)
class Patterns:
    retry: bool = False
    degradation: bool = False
    breaker: bool = False
    routing: bool = False
    idempotency: bool = False  # mutating tools take an idempotency key: a retried action acts once

    @property
    def label(self) -> str:
        on = [n for n, v in (("retry budget", self.retry), ("degradation", self.degradation),
                             ("ETA breaker", self.breaker), ("deadline routing", self.routing),
                             ("idempotency keys", self.idempotency)) if v]  # fmt: skip
        return " + ".join(on) if on else "no patterns"

    @property
    def any(self) -> bool:
        return self.retry or self.degradation or self.breaker or self.routing or self.idempotency


@dataclass
class SimulationResult:
    plan: FaultPlan
    workload: Workload
    patterns: Patterns
    metrics: PlaneMetrics
    calls: list[CallRecord]
    tasks: list[TaskRecord]
    duplicate_actions: int = 0  # retries of a mutating tool that acted a second time

    def fingerprint(self) -> list[tuple[Any, ...]]:
        """Call-by-call outcomes, for determinism checks."""
        return [(c.tool, c.outcome, tuple(c.faults), c.corrupted, round(c.latency_ms, 6)) for c in self.calls]


class _Sim:
    def __init__(self, plan: FaultPlan, workload: Workload, patterns: Patterns) -> None:
        self.plan = plan
        self.w = workload
        self.p = patterns
        self.now_ms = 0.0
        self.engine = FaultEngine(plan, clock=lambda: self.now_ms / 1000.0)
        self.calls: list[CallRecord] = []
        self.next_id = 0
        self.reached_server = 0  # attempts of the current call that the server acted on
        self.duplicate_actions = 0
        self.queue_stall_ms = 0.0  # head-of-line: the stall the next queued calls still wait out
        self.queue_left = 0
        self.hol_label = ""
        self.policy = self._policy()

    def _policy(self) -> ResiliencePolicy:
        clock = lambda: self.now_ms / 1000.0  # noqa: E731
        total_items = self.w.items_per_result
        return ResiliencePolicy(
            retry=RetryBudget(0.2, max_attempts=3) if self.p.retry else None,
            breaker=EtaCircuitBreaker(threshold=0.2, window=20, min_calls=8, cooldown_s=5.0, clock=clock)
            if self.p.breaker
            else None,
            degradation=GracefulDegradation(
                required={"*": ("items", "total")},
                predicate=lambda _tool, v: (
                    isinstance(v.get("items"), list)
                    and isinstance(v.get("total"), int)
                    and len(v["items"]) == v["total"] == total_items
                ),
            )
            if self.p.degradation
            else None,
            router=DeadlineRouter(
                {t: [t, t + MIRROR_SUFFIX] for t in self.w.tools},
                default_ms=max(self.w.base_latency_ms.values(), default=100.0),
            )
            if self.p.routing
            else None,
            call_timeout_ms=self.w.call_timeout_ms,
        )

    def _base_latency(self, route: str, call_id: int) -> float:
        tool = route.removesuffix(MIRROR_SUFFIX)
        base = self.w.base_latency_ms.get(tool, 100.0)
        if route.endswith(MIRROR_SUFFIX):
            base *= self.w.mirror_latency_factor
        return base * (0.5 + uniform(self.plan.seed, -1, route, call_id, "base"))

    def _answer(self, route: str, rid: int, *, text: bool) -> dict[str, Any]:
        n = self.w.items_per_result
        sc = {"items": [f"{route}-{rid}-{k}" for k in range(n)], "total": n}
        # The text rendering matters only to a fault that rewrites it; skip the encoding otherwise.
        content = [{"type": "text", "text": json.dumps(sc)}] if text else []
        return {
            "jsonrpc": "2.0",
            "id": rid,
            "result": {"content": content, "structuredContent": sc, "isError": False},
        }

    def invoke(self, route: str, timeout_ms: float | None, task_id: str) -> tuple[AttemptResult, bool]:
        """One tool call through the fault engine; returns the result and whether it was corrupted."""
        rid = self.next_id
        self.next_id += 1
        request = {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "tools/call",
            "params": {"name": route, "arguments": {}},
        }
        d = self.engine.on_request(request)
        delay = d.delay_s * 1000.0 if d else 0.0
        response: dict[str, Any] | None
        corrupted = False
        faults = [e.fault_name for e in d.immediate_events] if d else []
        if self.queue_left > 0:  # queued behind a stalled call on the gateway connection
            delay += self.queue_stall_ms
            faults.append(self.hol_label)
            self.queue_left -= 1
        if d is not None and d.block_s > 0:
            self.queue_stall_ms, self.queue_left = d.block_s * 1000.0, self.w.queued_behind
            self.hol_label = next(
                (e.fault_name for e in d.events if e.fault_type == "head_of_line"), "head_of_line"
            )
        if d is None or d.reply is None:
            self.reached_server += 1  # the server did the work, whether or not its answer comes back
        if d is not None and d.reply is not None:
            response, latency = d.reply, delay + 1.0
        elif d is not None and d.drop_response:
            response, latency = None, float("inf")
            faults += [d.timeout_event.fault_name] if d.timeout_event else []
        else:
            response = self._answer(route, rid, text=d is not None and bool(d.mutators))
            latency = delay + self._base_latency(route, rid)
            if d is not None:
                # Calls run one after another here: a duplicate or held answer changes nothing.
                mutated, effective = self.engine.respond(response, d, can_duplicate=False, can_hold=False)
                faults += [e.fault_name for e in effective]
                if mutated is not None:
                    response, corrupted = mutated, True
        outcome = outcome_of(response)
        if timeout_ms is not None and latency > timeout_ms:
            outcome, latency, response, corrupted = "timeout", timeout_ms, None, False
        elif latency == float("inf"):
            latency = self.w.deadline_ms  # nobody waits forever: the task's deadline ends the wait
        self.now_ms += latency
        self.calls.append(
            CallRecord(
                ts=self.now_ms / 1000.0,
                method="tools/call",
                tool=route,
                request_id=str(rid),
                outcome=outcome,
                latency_ms=latency,
                faults=faults,
                corrupted=corrupted,
                task_id=task_id,
            )
        )
        value = response["result"].get("structuredContent") if response and "result" in response else None
        return AttemptResult(outcome, value, latency), corrupted

    def run_task(self, index: int) -> TaskRecord:
        task_id = f"task-{index}"
        start = self.now_ms
        first_call = len(self.calls)
        deadline = start + self.w.deadline_ms
        outcome = "succeeded"
        silent = False
        degraded = False
        for i in range(self.w.fanout):
            tool = self.w.tools[i % len(self.w.tools)]
            if not self.p.any:
                res, corrupted = self.invoke(tool, self.w.call_timeout_ms, task_id)
                if res.outcome != "ok":
                    outcome = "noticed"
                    break
                silent |= corrupted
                continue
            end, corrupted = self._resilient_call(tool, deadline, task_id)
            if end.status == "escalated":
                outcome = "escalated"
                break
            if end.status == "failed":
                outcome = "noticed"
                break
            if end.status == "degraded":
                degraded = True
            else:
                silent |= corrupted
        if outcome == "succeeded":
            if self.now_ms > deadline:
                outcome = "noticed"  # the caller saw the task blow its deadline
            elif degraded:
                outcome = "degraded"
            elif silent:
                outcome = "silent"
        calls = self.calls[first_call:]
        return TaskRecord(
            task_id=task_id,
            outcome=outcome,  # type: ignore[arg-type]
            calls=len(calls),
            hit_fault=any(c.faults for c in calls),
            latency_ms=self.now_ms - start,
        )

    def _resilient_call(self, tool: str, deadline: float, task_id: str) -> tuple[PolicyOutcome, bool]:
        # The same loop as resilience.call_with_resilience, on the virtual clock.
        attempts = 0
        corrupted = False
        self.reached_server = 0
        while True:
            step = self.policy.next_attempt(tool, max(0.0, deadline - self.now_ms), attempts=attempts)
            if isinstance(step, PolicyOutcome):
                self._count_duplicates(tool)
                return step, False
            attempts += 1
            result, corrupted = self.invoke(step.route, step.timeout_ms, task_id)
            end = self.policy.settle(tool, step, result, attempts=attempts)
            if end is not None:
                self._count_duplicates(tool)
                return end, corrupted

    def _count_duplicates(self, tool: str) -> None:
        if tool in self.w.mutating and not self.p.idempotency and self.reached_server > 1:
            self.duplicate_actions += self.reached_server - 1


def simulate(
    plan: FaultPlan, workload: Workload | None = None, patterns: Patterns | None = None
) -> SimulationResult:
    """Run the workload under the plan, with the given resilience patterns, and compute the metrics."""
    workload = workload or Workload()
    patterns = patterns or Patterns()
    sim = _Sim(plan, workload, patterns)
    tasks = [sim.run_task(i) for i in range(workload.tasks)]
    metrics = compute_metrics(sim.calls, tasks)
    return SimulationResult(plan, workload, patterns, metrics, sim.calls, tasks, sim.duplicate_actions)
