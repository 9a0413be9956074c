"""payment-service: takes a payment by holding a database connection from its pool for the payment's work.

Run: python -m faultplane.examples.payment.payment_service --port 0 [--dsn postgresql://...] (prints
`payment-service listening on PORT`). Without --dsn (or $PAYMENT_DSN) it uses the embedded pool.

Endpoints:
- POST /pay            take a payment: wait for a pool connection (FIFO, up to the acquire timeout, else 503
                       "pool exhausted"), run the payment's query on it, answer 200.
- GET  /health         200 with the pool size.
- GET  /admin/stats    pool size, in use, waiting, and since the last reset: payments, pool timeouts, pool wait
                       percentiles, answers the caller never read (it had timed out: the work was wasted).
- POST /admin/pool     {"size": n} | {"reduce_percent": p} (of the base size) | {"restore": true}; answers the
                       previous and new size and the stats. This is the fault and its rollback.
- POST /admin/reset    zero the counters.

A payment's work time is drawn from a seeded generator: `--work-ms` on average (uniform within +-50%), and
a `--slow-fraction` of payments take `--slow-ms` (a fraud check, a cold index page). With a large pool the slow
ones are invisible; with a pool of one they hold everyone else up, which is what a smaller pool does for real.
A payment whose caller has already gone (it timed out while the payment queued for the pool) gives the
connection back unused, as servers that notice disconnects do; `--abandoned-work` does the work anyway, as a
database does with a query whose client has left.

`--pause-every-s N --pause-ms M` stops the service for M ms every N s (from `--pause-offset-s`), the way a
stop-the-world garbage collection does: requests that arrive or finish inside a pause wait for its end. With a
full pool a pause is a blip; with one connection it is the trigger a retry storm needs. `--pause-epoch` (a
`time.monotonic()` value) puts several instances on one schedule.
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
from typing import Any

from faultplane.examples.payment.common import CURRENT, JsonHandler, percentile, serve, service_routes
from faultplane.examples.payment.pool import Pool, PoolTimeout, make_pool

__all__ = ["main"]


class _State:
    def __init__(
        self, pool: Pool, base_size: int, work_ms: float, slow_fraction: float, slow_ms: float, seed: int
    ):
        self.pool = pool
        self.base_size = base_size
        self.work_ms = work_ms
        self.slow_fraction = slow_fraction
        self.slow_ms = slow_ms
        self.rng = random.Random(seed)
        self.seed = seed
        self.skip_abandoned = False
        self.pause_every_s = 0.0
        self.pause_s = 0.0
        self.pause_offset_s = 0.0
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.requests = 0
            self.ok = 0
            self.pool_timeouts = 0
            self.unread = 0
            self.skipped = 0
            self.max_waiting = 0
            self.waits_ms: list[float] = []
            self.since = time.time()

    def wait_out_pause(self) -> None:
        """Hold the calling request until the current pause (if any) is over."""
        if self.pause_every_s <= 0 or self.pause_s <= 0:
            return
        since = (time.monotonic() - self.started - self.pause_offset_s) % self.pause_every_s
        if since < self.pause_s:
            time.sleep(self.pause_s - since)

    def work_s(self) -> float:
        with self.lock:
            if self.rng.random() < self.slow_fraction:
                return self.slow_ms / 1000.0
            return self.rng.uniform(0.5, 1.5) * self.work_ms / 1000.0

    def stats(self) -> dict[str, Any]:
        with self.lock:
            waits = list(self.waits_ms)
            return {
                "pool": {
                    "kind": self.pool.kind,
                    "size": self.pool.size,
                    "base_size": self.base_size,
                    "in_use": self.pool.in_use,
                    "waiting": self.pool.waiting,
                    "acquire_timeout_ms": round(self.pool.acquire_timeout_s * 1000),
                },
                "requests": self.requests,
                "ok": self.ok,
                "pool_timeouts": self.pool_timeouts,
                "unread_answers": self.unread,
                "skipped_abandoned": self.skipped,
                "max_waiting": self.max_waiting,
                "pool_wait_ms": {
                    "p50": _round(percentile(waits, 50)),
                    "p99": _round(percentile(waits, 99)),
                    "max": _round(max(waits) if waits else None),
                },
                "seconds": round(time.time() - self.since, 3),
                "seed": self.seed,
            }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


STATE: _State | None = None


def _state() -> _State:
    assert STATE is not None
    return STATE


def pay(body: Any) -> tuple[int, Any]:
    st = _state()
    st.wait_out_pause()
    with st.lock:
        st.requests += 1
        st.max_waiting = max(st.max_waiting, st.pool.waiting + 1)
    try:
        conn, waited = st.pool.acquire()
    except PoolTimeout as exc:
        with st.lock:
            st.pool_timeouts += 1
        return 503, {"error": f"pool exhausted: {exc}"}
    handler = getattr(CURRENT, "handler", None)
    if st.skip_abandoned and handler is not None and handler.peer_gone():
        # the caller timed out while we queued for the pool: do not spend a connection on an answer nobody reads
        st.pool.release(conn)
        with st.lock:
            st.skipped += 1
        return 499, {"error": "client went away while waiting"}
    broken = False
    try:
        st.pool.work(conn, st.work_s())
    except Exception as exc:
        broken = True
        return 500, {"error": f"database error: {exc}"}
    finally:
        st.wait_out_pause()  # a pause holds the connection too: the work cannot finish inside it
        st.pool.release(conn, broken=broken)
    with st.lock:
        st.ok += 1
        if len(st.waits_ms) < 200_000:
            st.waits_ms.append(waited * 1000.0)
    return 200, {"status": "paid", "pool_wait_ms": round(waited * 1000.0, 2)}


def health(body: Any) -> tuple[int, Any]:
    return 200, {"status": "ok", "pool_size": _state().pool.size}


def set_pool(body: Any) -> tuple[int, Any]:
    st = _state()
    if not isinstance(body, dict):
        raise ValueError("body must be an object: {size} | {reduce_percent} | {restore: true}")
    if body.get("restore"):
        size = st.base_size
    elif "reduce_percent" in body:
        pct = body["reduce_percent"]
        if not isinstance(pct, int | float) or not 0 <= pct < 100:
            raise ValueError("reduce_percent must be a number in [0, 100)")
        # a reduction always leaves at least one connection: the pool is starved, not removed
        size = max(1, round(st.base_size * (1 - pct / 100.0)))
    elif "size" in body:
        size = body["size"]
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError("size must be an integer >= 1")
    else:
        raise ValueError("give one of: size, reduce_percent, restore")
    snapshot = st.stats()  # the counters and size that held until now: what a rollback wants to report
    previous = st.pool.resize(size)
    if body.get("reset_stats"):
        st.reset()
    return 200, {"previous_size": previous, "size": size, "stats": snapshot}


class Handler(JsonHandler):
    routes = service_routes(
        _state, {("POST", "/pay"): pay, ("GET", "/health"): health, ("POST", "/admin/pool"): set_pool}
    )

    def answer_lost(self, path: str) -> None:
        if path == "/pay" and STATE is not None:
            with STATE.lock:
                STATE.unread += 1


def main(argv: list[str] | None = None) -> None:
    global STATE
    parser = argparse.ArgumentParser(description="payment-service of the Faultplane payment example")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--pool-size", type=int, default=10)
    parser.add_argument("--acquire-timeout-ms", type=float, default=1000.0)
    parser.add_argument("--work-ms", type=float, default=20.0)
    parser.add_argument("--slow-fraction", type=float, default=0.02)
    parser.add_argument("--slow-ms", type=float, default=200.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--abandoned-work",
        action="store_true",
        help="do the work even when the client has gone (by default a payment whose caller timed out while it "
        "queued for the pool gives its connection back unused)",
    )
    parser.add_argument("--pause-every-s", type=float, default=0.0, help="a stop-the-world pause this often")
    parser.add_argument("--pause-ms", type=float, default=0.0, help="how long each pause lasts")
    parser.add_argument("--pause-offset-s", type=float, default=0.0, help="when the first pause starts")
    parser.add_argument(
        "--pause-epoch",
        type=float,
        default=None,
        help="time.monotonic() the pause schedule counts from (default: this process's start), so that "
        "several instances can share one schedule",
    )
    parser.add_argument("--dsn", default=os.environ.get("PAYMENT_DSN") or None)
    args = parser.parse_args(argv)
    pool = make_pool(args.pool_size, args.acquire_timeout_ms / 1000.0, args.dsn)
    pool.prefill()
    STATE = _State(pool, args.pool_size, args.work_ms, args.slow_fraction, args.slow_ms, args.seed)
    STATE.skip_abandoned = not args.abandoned_work
    STATE.pause_every_s, STATE.pause_s = args.pause_every_s, args.pause_ms / 1000.0
    STATE.pause_offset_s = args.pause_offset_s
    if args.pause_epoch is not None:
        STATE.started = args.pause_epoch
    try:
        serve(Handler, args.port, "payment-service")
    finally:
        pool.close()


if __name__ == "__main__":
    main()
