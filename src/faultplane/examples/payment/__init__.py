"""The payment retry-storm example: connection-pool exhaustion -> unbounded retries -> the caller's own outbound
rate limiter refusing its retries -> a self-inflicted denial of service; and the fix that survives it.

Two real HTTP services run as subprocesses on loopback (`payment_system()` starts and stops them):
`payment-service` (two instances, each with a resizable database connection pool: PostgreSQL when a DSN is given,
else an embedded pool with the same semantics) and `caller` (retries, an outbound rate limiter). Four bundled
experiments shrink the pools step by step under a constant load; `python -m faultplane.examples.payment` runs
them, then the fourth again with the fix, and prints what each run measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from faultplane.examples.payment.system import PaymentSystem, payment_system

__all__ = ["EXPERIMENTS", "FIX_VARIABLES", "HERE", "SYSTEM", "PaymentSystem", "payment_system"]

HERE = Path(__file__).resolve().parent
EXPERIMENTS = [
    HERE / "payment-1-pool-30pct-one-instance.yaml",
    HERE / "payment-2-pool-50pct-default-retries.yaml",
    HERE / "payment-3-pool-70pct-short-timeouts.yaml",
    HERE / "payment-4-pool-90pct-unbounded-retries.yaml",
]
# The system the scenario runs against (`payment_system(**SYSTEM)`). A payment holds a connection 35 ms on average
# (uniform +-50%, no slow outliers: they only add tail variance). Queries of callers that timed out still run, as
# in a database. Both instances stop together for 400 ms every 3 s (a pause of what they share, e.g. the
# database host): invisible with pools of ten, the trigger of the storm with one.
# The physics after experiment 4's cut (one connection per instance): capacity C = 2 / 35 ms = 57 attempts/s
# (49.5/s averaged over the pauses), below the caller's limiter L = 60/s; 30 payments/s keep it 53-61% busy.
# - Storm (250 ms attempt timeout, unbounded retries): a pause outlasts the timeout, so every attempt in it is
#   wasted work; ~12 payments then retry every ~260 ms, 30 + 12 / 0.26 = 76 attempts/s > C, the queue wait
#   stays above the timeout, every attempt is wasted, and the limiter lets through 60/s > C: the backlog can
#   never drain until the rollback. The onset is the first pause after the cut, not a matter of chance.
# - Fix: a pause delays attempts with a 600 ms timeout instead of wasting them, and even if every attempt failed
#   the retry budget bounds them to 30 + 0.2 x 30 + 10 = 46/s < 49.5/s: subcritical, it always drains.
SYSTEM: dict[str, Any] = {
    "pool_size": 10,
    "work_ms": 35.0,
    "slow_fraction": 0.0,
    "slow_ms": 300.0,
    "pause_every_s": 3.0,
    "pause_ms": 400.0,
    "pause_together": True,
    "abandoned_work": True,
}
# The fix, applied to experiment 4 as variables: retries capped at 2 with jittered exponential backoff, the
# limiter as a circuit breaker on retries (a token bucket with a retry budget that stops retries instead of
# refusing payments), and an attempt timeout above the longest pause plus the queue behind it. With the 250 ms
# timeout kept, the same pause wastes every attempt in it and the fix collapses too (measured: 40% errors).
FIX_VARIABLES: dict[str, object] = {
    "retries": 2,
    "backoff_ms": 50,
    "backoff_multiplier": 2,
    "jitter": True,
    "limiter_mode": "breaker",
    "timeout_ms": 600,
}
