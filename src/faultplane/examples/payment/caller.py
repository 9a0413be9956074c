"""caller: the checkout service in front of payment-service, with retries and an outbound rate limiter.

Run: python -m faultplane.examples.payment.caller --port 0 --payment URL [--payment URL ...] (prints
`caller listening on PORT`).

Endpoints:
- POST /pay           one incoming payment: attempts against the payment-service instances (round-robin; a
                      retry goes to the next instance) under the retry policy, every attempt passing the outbound rate limiter first.
                      200 when an attempt succeeded; otherwise 503 (downstream failure) or 429 (the last attempt
                      was refused by our own limiter), with the attempt count.
- GET  /health        200.
- GET  /admin/stats   the policy and, since the last reset: incoming requests, attempts, retries, the retry
                      amplification (attempts / requests), limiter rejections, downstream failures by kind,
                      breaker openings and retries it suppressed.
- POST /admin/config  change the policy (any subset of the keys below, plus `reset_stats: true`), or
                      `{"restore": true}` for the policy the caller started with; answers the previous policy
                      and the stats up to this moment.
- POST /admin/reset   zero the counters.

The policy:
- `timeout_ms` per attempt; `deadline_ms` for the whole incoming request (no attempt starts after it).
- `retries`: how many retries after the first attempt, or "unbounded" (retry until the deadline).
- `backoff_ms`, `backoff_multiplier` (1 = constant) and `jitter` (full jitter: a uniform draw in [0, backoff]).
- `limiter`: `rate` attempts per second and `mode`:
  Both modes are a token bucket: `rate` tokens a second, at most `burst` saved (default one second's worth);
  an admitted attempt takes a token, a refused one takes none, so the limiter never admits more than `rate`
  attempts a second and empties as soon as the attempts slow down (no metastable state of its own).
  - "reject": over the rate an attempt is refused at once, and a refused attempt is a failure the retry policy
    retries. Under a retry storm the retries take the tokens first: new payments' attempts are refused with
    them, a self-inflicted denial of service for as long as the storm lasts.
  - "breaker": the same bucket, plus a circuit breaker on retries: a retry spends a token of a retry budget
    (a fifth of a retry per incoming payment plus ten a second, at most thirty saved); when it is empty or the
    bucket refuses an attempt, the circuit opens for `cooldown_ms` and no retries are sent (first attempts
    still are). Retries stay near 20% of the traffic, so they can never crowd out new payments or multiply the
    load on a degraded service.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import itertools
import json
import random
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from faultplane.examples.payment.common import JsonHandler, serve, service_routes

__all__ = ["DEFAULT_POLICY", "main", "validate_policy"]

DEFAULT_POLICY: dict[str, Any] = {
    "timeout_ms": 1000,
    "deadline_ms": 1500,
    "retries": 3,
    "backoff_ms": 50,
    "backoff_multiplier": 2.0,
    "jitter": True,
    "limiter": {"rate": 100, "mode": "reject", "cooldown_ms": 250, "burst": None},
}


def validate_policy(update: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """The policy `base` with `update` applied; raises ValueError naming the bad key and what it accepts."""
    out = json.loads(json.dumps(base))
    for key, value in update.items():
        if key in ("reset_stats", "restore"):
            continue
        if key not in DEFAULT_POLICY:
            raise ValueError(f"unknown policy key {key!r}; known: {', '.join(DEFAULT_POLICY)}")
        if key == "limiter":
            if not isinstance(value, dict):
                raise ValueError("limiter must be an object {rate, mode, cooldown_ms}")
            for lk, lv in value.items():
                if lk == "mode" and lv not in ("reject", "breaker"):
                    raise ValueError("limiter.mode must be 'reject' or 'breaker'")
                if lk in ("rate", "cooldown_ms") and (not isinstance(lv, int | float) or lv <= 0):
                    raise ValueError(f"limiter.{lk} must be a number > 0")
                if lk == "burst" and lv is not None and (not isinstance(lv, int | float) or lv < 1):
                    raise ValueError("limiter.burst must be a number >= 1 (or null: one second's worth)")
                if lk not in ("rate", "mode", "cooldown_ms", "burst"):
                    raise ValueError(f"unknown limiter key {lk!r}; known: rate, mode, cooldown_ms, burst")
                out["limiter"][lk] = lv
        elif key == "retries":
            if value != "unbounded" and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ValueError("retries must be an integer >= 0 or 'unbounded'")
            out[key] = value
        elif key == "jitter":
            if not isinstance(value, bool):
                raise ValueError("jitter must be true or false")
            out[key] = value
        else:
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{key} must be a number >= 0")
            out[key] = value
    if out["timeout_ms"] <= 0 or out["deadline_ms"] <= 0:
        raise ValueError("timeout_ms and deadline_ms must be > 0")
    return out


# Breaker mode's retry budget, Finagle's RetryBudget defaults: each incoming payment earns a fifth of a retry,
# plus ten retries a second whatever the traffic, at most thirty saved. Retries stay near 20% of the traffic
# however many attempts fail, so they cannot multiply the load on a degraded service, while the saved tokens
# cover a short burst of failures.
RETRY_BUDGET_RATIO = 0.2
RETRY_BUDGET_FLOOR_PER_S = 10.0
RETRY_BUDGET_MAX = 30.0


class Limiter:
    """The outbound rate limiter and, in breaker mode, the retry circuit breaker."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tokens = 0.0
        self.shape: tuple[Any, ...] = ()
        self.refilled = time.monotonic()
        self.open_until = 0.0
        self.opened = 0
        self.retry_budget = RETRY_BUDGET_MAX
        self.budget_refilled = time.monotonic()

    def admit(self, policy: dict[str, Any]) -> bool:
        lim = policy["limiter"]
        rate = float(lim["rate"])
        burst = float(lim.get("burst") or rate)
        now = time.monotonic()
        with self.lock:
            shape = (lim["mode"], rate, burst)
            if shape != self.shape:
                # a limiter switched on or re-configured starts with its full allowance
                self.shape, self.tokens, self.refilled = shape, burst, now
                self.retry_budget = RETRY_BUDGET_MAX
            self.tokens = min(burst, self.tokens + (now - self.refilled) * rate)
            self.refilled = now
            if self.tokens >= 1.0:
                self.tokens -= 1.0
                return True
            if lim["mode"] == "breaker":
                self._open(now, policy)
            return False

    def _open(self, now: float, policy: dict[str, Any]) -> None:
        if now >= self.open_until:
            self.opened += 1
        self.open_until = now + float(policy["limiter"]["cooldown_ms"]) / 1000.0

    def earn(self, policy: dict[str, Any]) -> None:
        """An incoming payment: in breaker mode it adds to the retry budget."""
        if policy["limiter"]["mode"] != "breaker":
            return
        with self.lock:
            self.retry_budget = min(RETRY_BUDGET_MAX, self.retry_budget + RETRY_BUDGET_RATIO)

    def retries_allowed(self, policy: dict[str, Any]) -> bool:
        """In breaker mode a retry needs the circuit closed and a token of the retry budget; without one the
        circuit opens: when most attempts fail, retries stop instead of multiplying the load."""
        if policy["limiter"]["mode"] != "breaker":
            return True
        with self.lock:
            now = time.monotonic()
            floor = (now - self.budget_refilled) * RETRY_BUDGET_FLOOR_PER_S
            self.retry_budget = min(RETRY_BUDGET_MAX, self.retry_budget + floor)
            self.budget_refilled = now
            if now < self.open_until:
                return False
            if self.retry_budget >= 1.0:
                self.retry_budget -= 1.0
                return True
            self._open(now, policy)
            return False

    def reset(self) -> None:
        with self.lock:
            self.opened = 0


class _Caller:
    def __init__(self, payments: list[str], seed: int) -> None:
        self.targets = [urlsplit(u) for u in payments]
        self.next_target = itertools.count()
        self.policy = json.loads(json.dumps(DEFAULT_POLICY))
        self.startup_policy = json.loads(json.dumps(DEFAULT_POLICY))
        self.limiter = Limiter()
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.requests = 0
            self.ok = 0
            self.failed = 0
            self.attempts = 0
            self.retries = 0
            self.limiter_rejections = 0
            self.retries_suppressed = 0
            self.downstream: collections.Counter[str] = collections.Counter()
            self.failed_by: collections.Counter[str] = collections.Counter()
            self.since = time.time()
        self.limiter.reset()

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "policy": self.policy,
                "requests": self.requests,
                "ok": self.ok,
                "failed": self.failed,
                "failed_by": dict(self.failed_by),
                "attempts": self.attempts,
                "retries": self.retries,
                "retry_amplification": round(self.attempts / self.requests, 3) if self.requests else None,
                "limiter_rejections": self.limiter_rejections,
                "downstream_failures": dict(self.downstream),
                "breaker_opened": self.limiter.opened,
                "retries_suppressed": self.retries_suppressed,
                "seconds": round(time.time() - self.since, 3),
            }

    def _attempt(self, target: Any, timeout_s: float) -> str | None:
        """One downstream call; None on success, else the failure kind."""
        conn = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port, timeout=timeout_s)
        try:
            conn.request("POST", "/pay", body=b"{}", headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            return None if resp.status == 200 else f"status:{resp.status}"
        except TimeoutError:
            return "timeout"
        except OSError as exc:
            return type(exc).__name__
        except http.client.HTTPException as exc:
            return type(exc).__name__
        finally:
            conn.close()

    def pay(self) -> tuple[int, dict[str, Any]]:
        policy = self.policy  # one policy per request, even if it changes meanwhile
        start = time.monotonic()
        deadline = start + policy["deadline_ms"] / 1000.0
        retries = policy["retries"]
        with self.lock:
            self.requests += 1
        self.limiter.earn(policy)
        attempts = 0
        last = "no attempt"
        # round-robin across requests; a retry goes to the next instance, not back to the one that just failed
        first = next(self.next_target)
        while True:
            attempts += 1
            with self.lock:
                self.attempts += 1
                if attempts > 1:
                    self.retries += 1
            if self.limiter.admit(policy):
                left = deadline - time.monotonic()
                target = self.targets[(first + attempts - 1) % len(self.targets)]
                failure = self._attempt(target, max(0.001, min(policy["timeout_ms"] / 1000.0, left)))
                if failure is None:
                    with self.lock:
                        self.ok += 1
                    return 200, {"status": "paid", "attempts": attempts}
                with self.lock:
                    self.downstream[failure] += 1
                last = failure
            else:
                with self.lock:
                    self.limiter_rejections += 1
                last = "rate_limited"
            if retries != "unbounded" and attempts > retries:
                break
            if not self.limiter.retries_allowed(policy):
                with self.lock:
                    self.retries_suppressed += 1
                break
            base = policy["backoff_ms"] * policy["backoff_multiplier"] ** (attempts - 1)
            base = min(base, 2000.0)
            with self.lock:
                pause = self.rng.uniform(0, base) if policy["jitter"] else base
            if time.monotonic() + pause / 1000.0 >= deadline:
                break
            time.sleep(pause / 1000.0)
        with self.lock:
            self.failed += 1
            self.failed_by[last] += 1
        status = 429 if last == "rate_limited" else 503
        return status, {"error": last, "attempts": attempts}


CALLER: _Caller | None = None


def _caller() -> _Caller:
    assert CALLER is not None
    return CALLER


def pay(body: Any) -> tuple[int, Any]:
    return _caller().pay()


def health(body: Any) -> tuple[int, Any]:
    return 200, {"status": "ok"}


def config(body: Any) -> tuple[int, Any]:
    c = _caller()
    if not isinstance(body, dict):
        raise ValueError("body must be an object of policy keys")
    new = json.loads(json.dumps(c.startup_policy)) if body.get("restore") else validate_policy(body, c.policy)
    previous, snapshot = c.policy, c.stats()
    c.policy = new
    if body.get("reset_stats"):
        c.reset()
    return 200, {"previous": previous, "policy": new, "stats": snapshot}


class Handler(JsonHandler):
    routes = service_routes(
        _caller, {("POST", "/pay"): pay, ("GET", "/health"): health, ("POST", "/admin/config"): config}
    )


def main(argv: list[str] | None = None) -> None:
    global CALLER
    parser = argparse.ArgumentParser(description="caller of the Faultplane payment example")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--payment", action="append", required=True, help="payment-service base URL")
    parser.add_argument("--policy", default=None, help="JSON object overriding the default policy")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    CALLER = _Caller(args.payment, args.seed)
    if args.policy:
        CALLER.policy = validate_policy(json.loads(args.policy), CALLER.policy)
    CALLER.startup_policy = json.loads(json.dumps(CALLER.policy))
    serve(Handler, args.port, "caller")


if __name__ == "__main__":
    main()
