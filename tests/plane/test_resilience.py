"""The resilience patterns, each on its own and composed."""

from __future__ import annotations

import anyio
import pytest

from faultplane.plane.resilience import (
    AttemptResult,
    DeadlineRouter,
    EtaCircuitBreaker,
    GracefulDegradation,
    ResiliencePolicy,
    RetryBudget,
    call_with_resilience,
)


def test_retry_budget_caps_retries_to_a_share_of_traffic() -> None:
    budget = RetryBudget(0.1, max_attempts=5, reserve=2)
    assert budget.try_retry(1) and budget.try_retry(1)
    assert not budget.try_retry(1)  # reserve spent, no traffic yet
    for _ in range(10):
        budget.on_first_attempt()
    assert budget.try_retry(1) and not budget.try_retry(1)
    assert not RetryBudget(1.0, max_attempts=2).try_retry(2)
    with pytest.raises(ValueError, match="ratio"):
        RetryBudget(2.0)


def test_breaker_opens_on_low_eta_and_probes_after_cooldown() -> None:
    now = [0.0]
    b = EtaCircuitBreaker(threshold=0.6, window=10, min_calls=4, cooldown_s=5, clock=lambda: now[0])
    for ok in (True, False, True, False):
        assert b.allow("t")
        b.record("t", available=ok, correct=ok)
    assert b.eta("t") == pytest.approx(0.5)
    assert b.state("t") == "open" and not b.allow("t")
    now[0] = 6.0
    assert b.state("t") == "half_open"
    assert b.allow("t") and not b.allow("t")  # one probe at a time
    b.record("t", available=True, correct=True)
    assert b.state("t") == "closed"


def test_breaker_counts_wrong_answers_against_eta() -> None:
    b = EtaCircuitBreaker(threshold=0.6, window=10, min_calls=4)
    for _ in range(4):
        b.record("t", available=True, correct=False)
    assert b.eta("t") == 0.0 and b.state("t") == "open"


def test_degradation_checks_and_fallbacks() -> None:
    g = GracefulDegradation(
        required={"*": ["items"]}, non_empty={"search": ["items"]}, fallbacks={"search": []}
    )
    assert g.usable("search", {"items": [1]})
    assert not g.usable("search", {"items": []})
    assert not g.usable("fetch", {"results": [1]})
    assert not g.usable("fetch", "text")
    assert g.fallback("search") == [] and g.degraded == 1


def test_router_picks_a_route_that_fits_the_deadline() -> None:
    r = DeadlineRouter({"s": ["s", "s-mirror"]}, default_ms=100, safety=1.0)
    r.observe("s", 900)
    r.observe("s-mirror", 200)
    assert r.choose("s", None) == "s"
    assert r.choose("s", 500) == "s-mirror" and r.rerouted == 1
    assert r.choose("s", 100) is None
    assert r.choose("s", 5000, allowed=lambda route: route != "s") == "s-mirror"


@pytest.mark.anyio
async def test_call_with_resilience_retries_then_degrades() -> None:
    outcomes = iter(["rpc_error", "timeout", "ok"])
    calls: list[str] = []

    async def flaky(route: str, timeout_s: float | None) -> AttemptResult:
        calls.append(route)
        o = next(outcomes)
        return AttemptResult(o, {"items": [1]} if o == "ok" else None, 1.0)  # type: ignore[arg-type]

    policy = ResiliencePolicy(retry=RetryBudget(0.2, max_attempts=3), degradation=GracefulDegradation())
    with anyio.fail_after(5):
        end = await call_with_resilience(policy, "t", flaky)
    assert end.status == "ok" and end.attempts == 3 and calls == ["t", "t", "t"]

    async def broken(route: str, timeout_s: float | None) -> AttemptResult:
        return AttemptResult("tool_error")

    with anyio.fail_after(5):
        end = await call_with_resilience(policy, "t", broken)
    assert end.status == "degraded" and end.attempts == 3

    async def wrong(route: str, timeout_s: float | None) -> AttemptResult:
        return AttemptResult("ok", {"nope": 1})

    picky = ResiliencePolicy(retry=RetryBudget(), degradation=GracefulDegradation(required={"t": ["items"]}))
    with anyio.fail_after(5):
        end = await call_with_resilience(picky, "t", wrong)
    assert end.status == "degraded" and end.attempts == 1 and end.reason == "unusable result"
    bare = ResiliencePolicy()
    with anyio.fail_after(5):
        assert (await call_with_resilience(bare, "t", broken)).status == "failed"


@pytest.mark.anyio
async def test_call_with_resilience_escalates_when_the_deadline_cannot_be_met() -> None:
    router = DeadlineRouter(default_ms=1000)
    policy = ResiliencePolicy(router=router)

    async def never(route: str, timeout_s: float | None) -> AttemptResult:  # pragma: no cover
        raise AssertionError("must not be called")

    with anyio.fail_after(5):
        end = await call_with_resilience(
            policy, "t", never, deadline=anyio.current_time() + 0.1, clock=anyio.current_time
        )
    assert end.status == "escalated"
