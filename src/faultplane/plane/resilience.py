"""Resilience patterns for agents calling tools: a small library, usable in your own agent loop.

* `RetryBudget` — retries are allowed only as a fraction of first attempts (a token bucket), so a failing
  tool cannot turn every call into N calls: retries help with sparse faults and stop a retry storm.
* `EtaCircuitBreaker` — per tool, a sliding window of outcomes; it opens when the window's Effective Tool
  Availability (available x correct) drops below a threshold, and lets one probe through after a cooldown.
* `GracefulDegradation` — check a result against what the caller actually needs (fields, non-empty lists,
  a custom predicate); on a miss, hand back a fallback flagged as degraded instead of a wrong answer.
* `DeadlineRouter` — equivalent routes for a tool (replicas, mirrors, a cheaper tool); pick the first whose
  expected latency (an EWMA of observed latencies) fits in what is left of the task's deadline.

`ResiliencePolicy` composes them without doing I/O: ask it what to do next (`next_attempt`), do it, report
what happened (`settle`). `call_with_resilience` is the async loop around it for real calls (for example an
`mcp.Client.call_tool`); the plane simulator runs the same policy on a virtual clock.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "Attempt",
    "AttemptResult",
    "DeadlineRouter",
    "EtaCircuitBreaker",
    "GracefulDegradation",
    "PolicyOutcome",
    "ResiliencePolicy",
    "RetryBudget",
    "call_with_resilience",
    "mcp_invoke",
]

Clock = Callable[[], float]


class RetryBudget:
    """Token bucket: each first attempt deposits `ratio` tokens, each retry spends one.

    `max_attempts` caps the attempts of one call; `reserve` tokens are there from the start so the first
    sparse failures can be retried before any traffic has filled the bucket.
    """

    def __init__(self, ratio: float = 0.2, *, max_attempts: int = 3, reserve: float = 10.0) -> None:
        if not 0 <= ratio <= 1:
            raise ValueError("ratio must be within [0, 1]")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.ratio = ratio
        self.max_attempts = max_attempts
        self.capacity = max(reserve, 1.0)
        self.tokens = reserve
        self.retries = 0
        self.denied = 0

    def on_first_attempt(self) -> None:
        self.tokens = min(self.capacity, self.tokens + self.ratio)

    def try_retry(self, attempts_so_far: int) -> bool:
        if attempts_so_far >= self.max_attempts or self.tokens < 1.0 - 1e-9:
            self.denied += 1
            return False
        self.tokens -= 1.0
        self.retries += 1
        return True


@dataclass
class _Window:
    outcomes: deque[tuple[bool, bool]]
    opened_at: float | None = None
    probing: bool = False
    available: int = 0  # running counts over `outcomes`
    correct: int = 0

    def push(self, available: bool, correct: bool) -> None:
        if len(self.outcomes) == self.outcomes.maxlen:
            a, c = self.outcomes[0]
            self.available -= a
            self.correct -= a and c
        self.outcomes.append((available, correct))
        self.available += available
        self.correct += available and correct

    def clear(self) -> None:
        self.outcomes.clear()
        self.available = self.correct = 0


class EtaCircuitBreaker:
    """Opens a tool's circuit when its windowed ETA (availability x correctness) falls below `threshold`.

    The breaker is for tools that are down, not for flaky ones: a tool that fails half its calls still
    answers 7 calls in 8 within three attempts, and opening on it turns rescuable calls into failures. So
    the default threshold is low (0.2: at least four calls in five fail); set it above the ETA of the
    flakiest tool that retries still rescue.
    """

    def __init__(
        self,
        *,
        threshold: float = 0.2,
        window: int = 20,
        min_calls: int = 5,
        cooldown_s: float = 5.0,
        clock: Clock = time.monotonic,
    ) -> None:
        self.threshold = threshold
        self.window = window
        self.min_calls = min_calls
        self.cooldown_s = cooldown_s
        self.clock = clock
        self._tools: dict[str, _Window] = {}
        self.rejected = 0

    def _w(self, tool: str) -> _Window:
        w = self._tools.get(tool)
        if w is None:
            w = self._tools[tool] = _Window(deque(maxlen=self.window))
        return w

    def eta(self, tool: str) -> float | None:
        w = self._w(tool)
        if not w.outcomes:
            return None
        n = len(w.outcomes)
        return (w.available / n) * (w.correct / w.available if w.available else 0.0)

    def state(self, tool: str) -> Literal["closed", "open", "half_open"]:
        w = self._w(tool)
        if w.opened_at is None:
            return "closed"
        if self.clock() - w.opened_at >= self.cooldown_s:
            return "half_open"
        return "open"

    def allow(self, tool: str) -> bool:
        w = self._w(tool)
        st = self.state(tool)
        if st == "closed":
            return True
        if st == "half_open" and not w.probing:
            w.probing = True  # exactly one probe call at a time
            return True
        self.rejected += 1
        return False

    def record(self, tool: str, *, available: bool, correct: bool) -> None:
        w = self._w(tool)
        if w.probing:
            w.probing = False
            if available and correct:
                w.opened_at = None
                w.clear()
            else:
                w.opened_at = self.clock()
            return
        w.push(available, correct)
        if w.opened_at is None and len(w.outcomes) >= self.min_calls:
            eta = self.eta(tool)
            if eta is not None and eta < self.threshold:
                w.opened_at = self.clock()


class GracefulDegradation:
    """Decide whether a tool result is usable, and what to use when it is not.

    `required`: tool-name -> fields the structured result must have. `non_empty`: fields that must be
    non-empty lists. `predicate`: tool, result -> bool for anything else. Fallbacks: tool -> value.
    """

    def __init__(
        self,
        *,
        required: dict[str, Sequence[str]] | None = None,
        non_empty: dict[str, Sequence[str]] | None = None,
        predicate: Callable[[str, Any], bool] | None = None,
        fallbacks: dict[str, Any] | None = None,
    ) -> None:
        self.required = required or {}
        self.non_empty = non_empty or {}
        self.predicate = predicate
        self.fallbacks = fallbacks or {}
        self.degraded = 0

    @staticmethod
    def _key(table: dict[str, Sequence[str]], tool: str) -> Sequence[str]:
        return table.get(tool, table.get("*", ()))

    def usable(self, tool: str, result: Any) -> bool:
        fields = self._key(self.required, tool)
        if fields and (not isinstance(result, dict) or any(f not in result for f in fields)):
            return False
        for f in self._key(self.non_empty, tool):
            v = result.get(f) if isinstance(result, dict) else None
            if not isinstance(v, list) or not v:
                return False
        return self.predicate(tool, result) if self.predicate else True

    def fallback(self, tool: str) -> Any:
        self.degraded += 1
        return self.fallbacks.get(tool)


class DeadlineRouter:
    """Routes per tool, in preference order, with an EWMA latency estimate per route."""

    def __init__(
        self,
        routes: dict[str, Sequence[str]] | None = None,
        *,
        alpha: float = 0.2,
        default_ms: float = 100.0,
        safety: float = 1.5,
    ) -> None:
        self.routes = {k: list(v) for k, v in (routes or {}).items()}
        self.alpha = alpha
        self.default_ms = default_ms
        self.safety = safety
        self._ewma: dict[str, float] = {}
        self.rerouted = 0

    def observe(self, route: str, latency_ms: float) -> None:
        prev = self._ewma.get(route)
        self._ewma[route] = latency_ms if prev is None else prev + self.alpha * (latency_ms - prev)

    def expected_ms(self, route: str) -> float:
        return self._ewma.get(route, self.default_ms)

    def choose(
        self,
        tool: str,
        remaining_ms: float | None,
        allowed: Callable[[str], bool] | None = None,
        *,
        per_call_ms: float | None = None,
    ) -> str | None:
        """The first allowed route expected to finish in time; None when none is.

        "In time" means within the task's remaining deadline and, preferably, within the per-call timeout
        (a route expected to exceed it would just time out); when no route fits the timeout, the first that
        fits the deadline is taken.
        """
        candidates = self.routes.get(tool) or [tool]
        verdicts: dict[str, bool] = {}

        def ok(route: str) -> bool:
            # `allowed` may have side effects (a breaker admits one probe): ask once, and only for a route
            # that would otherwise be taken.
            if allowed is None:
                return True
            if route not in verdicts:
                verdicts[route] = allowed(route)
            return verdicts[route]

        budgets = [remaining_ms] if per_call_ms is None else [_min(remaining_ms, per_call_ms), remaining_ms]
        for budget in budgets:
            for route in candidates:
                if (budget is None or self.expected_ms(route) * self.safety <= budget) and ok(route):
                    if route != candidates[0]:
                        self.rerouted += 1
                    return route
        return None


def _min(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


# --- composition ------------------------------------------------------------------------------------------


@dataclass(slots=True)
class AttemptResult:
    """What one attempt produced: outcome as in the metrics model, the structured value, latency."""

    outcome: Literal["ok", "tool_error", "rpc_error", "timeout", "unanswered"]
    value: Any = None
    latency_ms: float = 0.0


@dataclass(slots=True)
class Attempt:
    route: str
    timeout_ms: float | None


@dataclass(slots=True)
class PolicyOutcome:
    """How a call ended: ok, degraded (fallback used, flagged), failed (error surfaced), escalated."""

    status: Literal["ok", "degraded", "failed", "escalated"]
    value: Any = None
    attempts: int = 0
    reason: str = ""


@dataclass
class ResiliencePolicy:
    """Any subset of the four patterns; None disables one. Sans-I/O: the caller performs the attempts."""

    retry: RetryBudget | None = None
    breaker: EtaCircuitBreaker | None = None
    degradation: GracefulDegradation | None = None
    router: DeadlineRouter | None = None
    call_timeout_ms: float | None = None

    def next_attempt(
        self, tool: str, remaining_ms: float | None, *, attempts: int = 0
    ) -> Attempt | PolicyOutcome:
        """The route to try now, or how the call ends without trying."""
        if attempts == 0 and self.retry is not None:
            self.retry.on_first_attempt()
        allowed = self.breaker.allow if self.breaker is not None else None
        if self.router is not None:
            route = self.router.choose(tool, remaining_ms, allowed, per_call_ms=self.call_timeout_ms)
            if route is None:
                breaker = self.breaker
                routes = self.router.routes.get(tool) or [tool]
                if breaker is not None and not any(breaker.state(r) == "closed" for r in routes):
                    return self._give_up(tool, attempts, "circuit open")
                return PolicyOutcome("escalated", attempts=attempts, reason="deadline cannot be met")
        else:
            route = tool
            if allowed is not None and not allowed(route):
                return self._give_up(tool, attempts, "circuit open")
        timeout = self.call_timeout_ms
        if remaining_ms is not None and self.router is not None:
            timeout = min(timeout, remaining_ms) if timeout is not None else remaining_ms
        return Attempt(route=route, timeout_ms=timeout)

    def settle(
        self, tool: str, attempt: Attempt, result: AttemptResult, *, attempts: int
    ) -> PolicyOutcome | None:
        """Record an attempt's result; None means: try again (ask `next_attempt`)."""
        available = result.outcome == "ok"
        usable = available and (self.degradation is None or self.degradation.usable(tool, result.value))
        if self.breaker is not None:
            self.breaker.record(attempt.route, available=available, correct=usable)
        if self.router is not None:
            # A timeout is observed too, as the time it took to give up: a lower bound, but without it a
            # route that only ever times out would keep its old, optimistic estimate.
            self.router.observe(attempt.route, result.latency_ms or attempt.timeout_ms or 0.0)
        if usable:
            return PolicyOutcome("ok", result.value, attempts=attempts)
        if available:
            # A wrong answer is not retried: the same tool would likely give the same wrong answer.
            return self._give_up(tool, attempts, "unusable result")
        if self.retry is not None and self.retry.try_retry(attempts):
            return None
        return self._give_up(tool, attempts, result.outcome)

    def _give_up(self, tool: str, attempts: int, reason: str) -> PolicyOutcome:
        if self.degradation is not None:
            return PolicyOutcome(
                "degraded", self.degradation.fallback(tool), attempts=attempts, reason=reason
            )
        return PolicyOutcome("failed", attempts=attempts, reason=reason)


Invoke = Callable[[str, float | None], Awaitable[AttemptResult]]


async def call_with_resilience(
    policy: ResiliencePolicy,
    tool: str,
    invoke: Invoke,
    *,
    deadline: float | None = None,
    clock: Clock = time.monotonic,
) -> PolicyOutcome:
    """Run one logical tool call under `policy`. `invoke(route, timeout_s)` performs one attempt.

    `deadline` is an absolute `clock()` time by which the task must be done (None: no deadline).
    """
    attempts = 0
    while True:
        remaining_ms = None if deadline is None else max(0.0, (deadline - clock()) * 1000.0)
        step = policy.next_attempt(tool, remaining_ms, attempts=attempts)
        if isinstance(step, PolicyOutcome):
            return step
        attempts += 1
        t0 = clock()
        result = await invoke(step.route, None if step.timeout_ms is None else step.timeout_ms / 1000.0)
        if not result.latency_ms:
            result.latency_ms = (clock() - t0) * 1000.0
        outcome = policy.settle(tool, step, result, attempts=attempts)
        if outcome is not None:
            return outcome


def mcp_invoke(client: Any, arguments: dict[str, Any] | None = None) -> Invoke:
    """An `invoke` for `call_with_resilience` that calls a tool through an `mcp.Client` (or ClientSession).

    The value handed to the policy is the structured content (or the text of the first content block).
    A result the SDK rejects against the tool's outputSchema counts as answered but unusable.
    """
    import anyio

    from mcp import MCPError

    async def invoke(route: str, timeout_s: float | None) -> AttemptResult:
        try:
            with anyio.fail_after(timeout_s) if timeout_s else nullcontext():
                r = await client.call_tool(route, arguments or {})
        except TimeoutError:
            return AttemptResult("timeout")
        except MCPError as exc:
            return AttemptResult("timeout" if exc.error.code == -32001 else "rpc_error")
        except RuntimeError:
            return AttemptResult("ok", value=None)
        if r.is_error:
            return AttemptResult("tool_error")
        if r.structured_content is not None:
            return AttemptResult("ok", value=r.structured_content)
        text = next((c.text for c in r.content if getattr(c, "type", "") == "text"), None)
        return AttemptResult("ok", value=text)

    return invoke
