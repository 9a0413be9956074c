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
# The system the scenario runs against (`payment_system(**SYSTEM)`). Pools of ten carry 30 payments/s with
# room to spare (a payment holds a connection ~29 ms on average: 23 ms +-50%, 2% slow ones of 300 ms); a pool of
# one per instance still carries them (~45% busy) as long as retries do not multiply the work. Queries of callers
# that timed out still run, as in a database. Each instance stops for 400 ms every 3 s, in turn (a stop-the-world
# pause): invisible with ten connections, the trigger of the storm with one.
SYSTEM: dict[str, Any] = {
    "pool_size": 10,
    "work_ms": 23.0,
    "slow_fraction": 0.02,
    "slow_ms": 300.0,
    "pause_every_s": 3.0,
    "pause_ms": 400.0,
    "abandoned_work": True,
}
# The fix, applied to experiment 4 as variables: retries capped at 2 with jittered exponential backoff, and the
# limiter as a circuit breaker on retries (a token bucket that stops retries instead of refusing payments).
FIX_VARIABLES: dict[str, object] = {
    "retries": 2,
    "backoff_ms": 50,
    "backoff_multiplier": 2,
    "jitter": True,
    "limiter_mode": "breaker",
}
