"""The built-in load generator: open-model constant arrival rate over HTTP, measured without coordinated omission.

Requests are issued at fixed arrival times (`start + i / rate`) whatever the responses do: a slow service gets
more requests in flight, not fewer requests. Latency is measured from each request's *scheduled* time, so when
the generator itself falls behind (a busy event loop, a GC pause) the delay shows in the numbers instead of
hiding in a slower arrival rate. In-flight requests are bounded by `max_in_flight`; a request that would exceed
the bound is not sent and counts as an `overflow` error, because an open model must never silently slow down.

What is recorded:
- every completion (a response or a failure) in 100 ms slots, so `snapshot(window_s)` answers the SLI gates
  for any trailing window with exact percentiles;
- a per-second series `{t, sent, ok, errors, p50, p95, p99, throughput}` for the journal and the report;
- run totals in an HDR histogram (microsecond resolution, 3 significant digits) for the summary percentiles.

Latency covers every request that was sent (successes, error statuses and timeouts alike): it is the time the
client waited for an outcome. Requests dropped by the in-flight bound have no latency.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import anyio
import anyio.lowlevel
import httpx
from hdrh.histogram import HdrHistogram
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from faultplane.core.formats import ExperimentError, ValidationIssue, issues_from_pydantic

__all__ = ["LoadGenerator", "LoadSpec", "parse_load_spec", "percentile", "run_load"]

_SLOT_S = 0.1
_SLOTS_PER_S = 10
# Raw latencies older than this are dropped once their second is summarised: a long run keeps bounded memory.
# Gate windows (`lookback_s`) are at most an hour in the schema but in practice a few seconds.
RETENTION_S = 900.0
_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")


class LoadSpec(BaseModel):
    """The experiment's `load:` mapping (also the options of `faultplane load URL`)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    url: str = Field(description="http(s) URL every request goes to")
    method: str = Field("GET", description="HTTP method")
    rate: float = Field(gt=0, le=100_000, description="arrivals per second (open model, constant rate)")
    duration_s: float | None = Field(
        None, gt=0, le=86_400, description="stop after this many seconds; default: run until stopped"
    )
    timeout_s: float = Field(2.0, gt=0, le=600, description="a request with no answer by then is an error")
    headers: dict[str, str] = Field(default_factory=dict)
    json_body: Any = Field(None, alias="json", description="JSON body sent with every request")
    body: str | None = Field(None, description="raw body sent with every request (instead of `json`)")
    max_in_flight: int = Field(
        500, ge=1, le=100_000, description="requests outstanding at once; beyond it a request is an error"
    )
    ok_status: list[int] | None = Field(
        None, description="statuses that count as success; default: any status below 400"
    )
    arrival: Literal["constant", "poisson"] = Field(
        "constant",
        description="constant: evenly spaced arrivals; poisson: exponential gaps with the same mean rate "
        "(independent users: bursts and lulls, as real traffic has)",
    )
    seed: int | None = Field(None, description="seed of the poisson arrival times (reproducible schedules)")

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https:// (got {v!r})")
        return v

    @field_validator("method")
    @classmethod
    def _known_method(cls, v: str) -> str:
        up = v.upper()
        if up not in _METHODS:
            raise ValueError(f"method must be one of {', '.join(_METHODS)} (got {v!r})")
        return up

    @model_validator(mode="after")
    def _one_body(self) -> LoadSpec:
        if self.json_body is not None and self.body is not None:
            raise ValueError("give either `json` or `body`, not both")
        return self


def parse_load_spec(data: Mapping[str, Any] | LoadSpec, where: str = "load") -> LoadSpec:
    """Validate a `load:` mapping; raises ExperimentError naming each bad field (e.g. `load.rate`) and its fix."""
    if isinstance(data, LoadSpec):
        return data
    if not isinstance(data, Mapping):
        raise ExperimentError(
            [
                _issue(
                    where,
                    f"must be a mapping, not {type(data).__name__}",
                    "write e.g. `load: {url: http://127.0.0.1:8080/, rate: 50}`",
                )
            ]
        )
    try:
        return LoadSpec.model_validate(dict(data))
    except ValidationError as exc:
        issues = issues_from_pydantic(exc)
        for issue in issues:
            issue.field = f"{where}.{issue.field}" if issue.field else where
        raise ExperimentError(issues) from None


def _issue(field: str, message: str, fix: str) -> ValidationIssue:
    return ValidationIssue(field=field, message=message, fix=fix)


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of an ascending list; None when empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


@dataclass
class _Slot:
    sent: int = 0
    ok: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)


class LoadGenerator:
    """Drives `spec` until cancelled (or for `spec.duration_s`); implements the gates' `LoadFigures` protocol.

    `on_second(row)` is called once per elapsed second with that second's row of the series (from the event
    loop: keep it quick). `snapshot()` and `summary()` may be called at any time, from any thread.
    """

    def __init__(
        self,
        spec: LoadSpec | Mapping[str, Any],
        *,
        on_second: Callable[[dict[str, Any]], None] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.spec = parse_load_spec(spec)
        self.on_second = on_second
        self._client = client
        self._lock = threading.Lock()
        self._slots: dict[int, _Slot] = {}
        self._rows: list[dict[str, Any]] = []
        self._closed_until = 0  # seconds [0, _closed_until) have rows
        self._hist = HdrHistogram(1, 3_600_000_000, 3)  # microseconds, 1 us .. 1 h
        self._errors_by: Counter[str] = Counter()
        self._sent = self._ok = self._errors = self._overflow = 0
        self.in_flight = 0
        self._t0: float | None = None  # monotonic start
        self._t0_wall: float | None = None
        self._t_end: float | None = None
        self._ok_status = set(self.spec.ok_status) if self.spec.ok_status else None

    # ---- running ------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Issue requests at the constant rate until cancelled or `duration_s` is over (then wait for answers)."""
        if self._t0 is not None:
            raise RuntimeError("a LoadGenerator runs once; create a new one for another run")
        spec = self.spec
        client = self._client or httpx.AsyncClient(
            timeout=httpx.Timeout(spec.timeout_s),
            limits=httpx.Limits(
                max_connections=spec.max_in_flight,
                max_keepalive_connections=min(spec.max_in_flight, 256),
            ),
            follow_redirects=False,
        )
        self._t0_wall = time.time()
        self._t0 = time.monotonic()
        try:
            async with anyio.create_task_group() as outer:
                outer.start_soon(self._ticker)
                async with anyio.create_task_group() as requests:
                    await self._schedule(requests, client)
                outer.cancel_scope.cancel()
        finally:
            self._t_end = time.monotonic()
            with self._lock:
                rows = self._close_seconds(math.ceil(self._t_end - self._t0))
            if self._client is None:
                with anyio.CancelScope(shield=True):
                    await client.aclose()
            self._emit(rows)

    async def _schedule(self, tg: anyio.abc.TaskGroup, client: httpx.AsyncClient) -> None:
        assert self._t0 is not None
        interval = 1.0 / self.spec.rate
        duration = self.spec.duration_s
        rng = random.Random(self.spec.seed) if self.spec.arrival == "poisson" else None
        i = 0
        offset = 0.0
        while True:
            if rng is not None:
                # the schedule is drawn up front, never from what the responses did: still an open model
                offset += rng.expovariate(self.spec.rate)
            else:
                offset = i * interval
            if duration is not None and offset >= duration:
                return
            scheduled = self._t0 + offset
            delay = scheduled - time.monotonic()
            if delay > 0:
                await anyio.sleep(delay)
            elif i % 32 == 0:
                # catching up on a backlog: launch it at once (latency still counts from the schedule), but
                # let the answers in now and then so they are timed fairly
                await anyio.lowlevel.checkpoint()
            if self.in_flight >= self.spec.max_in_flight:
                self._record(None, "overflow", sent=True)
            else:
                self.in_flight += 1
                self._record(None, None, sent=True, outcome=False)
                tg.start_soon(self._one, client, scheduled)
            i += 1

    async def _one(self, client: httpx.AsyncClient, scheduled: float) -> None:
        spec = self.spec
        kind: str | None
        try:
            with anyio.fail_after(spec.timeout_s):
                resp = await client.request(
                    spec.method,
                    spec.url,
                    headers=spec.headers,
                    json=spec.json_body,
                    content=spec.body,
                )
            status = resp.status_code
            good = status in self._ok_status if self._ok_status is not None else status < 400
            kind = None if good else f"status:{status}"
        except (TimeoutError, httpx.TimeoutException):
            kind = "timeout"
        except httpx.HTTPError as exc:
            kind = type(exc).__name__
        except OSError as exc:
            kind = type(exc).__name__
        except Exception as exc:
            # anything else (a broken event hook, a transport bug) fails this request, never the whole run;
            # cancellation is a BaseException and still stops it
            kind = type(exc).__name__
        finally:
            self.in_flight -= 1
        latency_ms = (time.monotonic() - scheduled) * 1000.0
        self._record(latency_ms, kind, sent=False)

    async def _ticker(self) -> None:
        assert self._t0 is not None
        second = 1
        while True:
            await anyio.sleep(max(0.0, self._t0 + second - time.monotonic()))
            with self._lock:
                rows = self._close_seconds(int(time.monotonic() - self._t0))
            self._emit(rows)
            second = max(second + 1, self._closed_until + 1)

    def _emit(self, rows: list[dict[str, Any]]) -> None:
        if self.on_second is None:
            return
        for row in rows:
            try:
                self.on_second(dict(row))
            except Exception:  # a broken progress display must never stop the load
                self.on_second = None
                return

    # ---- recording ----------------------------------------------------------------------------------------
    def _record(
        self, latency_ms: float | None, kind: str | None, *, sent: bool, outcome: bool = True
    ) -> None:
        """Count a request sent now (`sent`) and/or an outcome now: the slot is the current 100 ms."""
        assert self._t0 is not None
        now = time.monotonic()
        slot_id = int((now - self._t0) / _SLOT_S)
        with self._lock:
            slot = self._slots.get(slot_id)
            if slot is None:
                slot = self._slots[slot_id] = _Slot()
            if sent:
                slot.sent += 1
                self._sent += 1
            if not outcome:
                return
            if kind is None:
                slot.ok += 1
                self._ok += 1
            else:
                slot.errors += 1
                self._errors += 1
                self._errors_by[kind] += 1
                if kind == "overflow":
                    self._overflow += 1
            if latency_ms is not None:
                slot.latencies.append(latency_ms)
                self._hist.record_value(max(1, round(latency_ms * 1000.0)))

    def _close_seconds(self, until: int) -> list[dict[str, Any]]:
        """Summarise every second before `until` not yet summarised; drop raw data past the retention."""
        rows = []
        for sec in range(self._closed_until, max(self._closed_until, until)):
            slots = [self._slots.get(sec * _SLOTS_PER_S + k) for k in range(_SLOTS_PER_S)]
            present = [s for s in slots if s is not None]
            lat = sorted(x for s in present for x in s.latencies)
            ok = sum(s.ok for s in present)
            row = {
                "t": sec,
                "sent": sum(s.sent for s in present),
                "ok": ok,
                "errors": sum(s.errors for s in present),
                "p50": _r(percentile(lat, 50)),
                "p95": _r(percentile(lat, 95)),
                "p99": _r(percentile(lat, 99)),
                "throughput": float(ok),
                "in_flight": self.in_flight,
            }
            self._rows.append(row)
            rows.append(row)
        self._closed_until = max(self._closed_until, until)
        horizon = int((self._closed_until - RETENTION_S) / _SLOT_S)
        if horizon > 0:
            for slot_id in [s for s in self._slots if s < horizon]:
                del self._slots[slot_id]
        return rows

    # ---- reading ------------------------------------------------------------------------------------------
    def elapsed(self) -> float:
        if self._t0 is None:
            return 0.0
        end = self._t_end if self._t_end is not None else time.monotonic()
        return end - self._t0

    def snapshot(self, window_s: float = 1.0) -> dict[str, float | None]:
        """Figures over the trailing `window_s` seconds (100 ms granularity); see the `LoadFigures` protocol."""
        elapsed = self.elapsed()
        window = min(max(window_s, _SLOT_S), RETENTION_S)
        covered = min(window, elapsed)
        last = int(elapsed / _SLOT_S)
        first = int(max(0.0, elapsed - window) / _SLOT_S)
        with self._lock:
            present = [s for k in range(first, last + 1) if (s := self._slots.get(k)) is not None]
            lat = sorted(x for s in present for x in s.latencies)
            ok = sum(s.ok for s in present)
            errors = sum(s.errors for s in present)
            sent = sum(s.sent for s in present)
        done = ok + errors
        return {
            "error_rate": errors / done if done else None,
            "availability": ok / done if done else None,
            "latency_p50": _r(percentile(lat, 50)),
            "latency_p95": _r(percentile(lat, 95)),
            "latency_p99": _r(percentile(lat, 99)),
            "throughput": ok / covered if covered > 0 else None,
            "sent": float(sent),
            "ok": float(ok),
            "errors": float(errors),
            "in_flight": float(self.in_flight),
            "window_s": round(covered, 3),
        }

    def summary(self) -> dict[str, Any]:
        """Totals, HDR percentiles, the per-second series and the error breakdown (the journal's `load`)."""
        elapsed = self.elapsed()
        with self._lock:
            if self._t0 is not None and self._t_end is None:
                # a live summary includes the second in progress without closing it
                partial = self._partial_row(int(elapsed))
                series = [dict(r) for r in self._rows] + ([partial] if partial else [])
            else:
                series = [dict(r) for r in self._rows]
            hist = self._hist
            count = hist.get_total_count()

            def ms(us: float) -> float:
                return round(us / 1000.0, 3)

            latency = (
                {
                    "min": ms(hist.get_min_value()),
                    "mean": ms(hist.get_mean_value()),
                    "p50": ms(hist.get_value_at_percentile(50)),
                    "p90": ms(hist.get_value_at_percentile(90)),
                    "p95": ms(hist.get_value_at_percentile(95)),
                    "p99": ms(hist.get_value_at_percentile(99)),
                    "p999": ms(hist.get_value_at_percentile(99.9)),
                    "max": ms(hist.get_max_value()),
                }
                if count
                else None
            )
            done = self._ok + self._errors
            return {
                "spec": {
                    "url": self.spec.url,
                    "method": self.spec.method,
                    "rate": self.spec.rate,
                    "arrival": self.spec.arrival,
                    "timeout_s": self.spec.timeout_s,
                    "max_in_flight": self.spec.max_in_flight,
                },
                "started_at": (
                    datetime.fromtimestamp(self._t0_wall, UTC).isoformat() if self._t0_wall else None
                ),
                "t0": self._t0_wall,
                "duration_s": round(elapsed, 3),
                "sent": self._sent,
                "ok": self._ok,
                "errors": self._errors,
                "overflow": self._overflow,
                "in_flight": self.in_flight,
                "error_rate": round(self._errors / done, 6) if done else None,
                "achieved_rate": round(self._sent / elapsed, 3) if elapsed > 0 else None,
                "throughput": round(self._ok / elapsed, 3) if elapsed > 0 else None,
                "latency_ms": latency,
                "errors_by": dict(self._errors_by.most_common()),
                "series": series,
            }

    def _partial_row(self, sec: int) -> dict[str, Any] | None:
        if sec < self._closed_until:
            return None
        present = [
            s for k in range(_SLOTS_PER_S) if (s := self._slots.get(sec * _SLOTS_PER_S + k)) is not None
        ]
        if not present:
            return None
        lat = sorted(x for s in present for x in s.latencies)
        ok = sum(s.ok for s in present)
        return {
            "t": sec,
            "sent": sum(s.sent for s in present),
            "ok": ok,
            "errors": sum(s.errors for s in present),
            "p50": _r(percentile(lat, 50)),
            "p95": _r(percentile(lat, 95)),
            "p99": _r(percentile(lat, 99)),
            "throughput": float(ok),
            "in_flight": self.in_flight,
            "partial": True,
        }


async def run_load(
    url: str,
    rate: float,
    duration_s: float,
    method: str = "GET",
    timeout_s: float = 2.0,
    headers: dict[str, str] | None = None,
    json: Any = None,
    max_in_flight: int = 500,
) -> dict[str, Any]:
    """Python-provider entry point: run load for `duration_s` and return the summary (a background activity)."""
    spec = parse_load_spec(
        {
            "url": url,
            "rate": rate,
            "duration_s": duration_s,
            "method": method,
            "timeout_s": timeout_s,
            "headers": headers or {},
            "json": json,
            "max_in_flight": max_in_flight,
        }
    )
    gen = LoadGenerator(spec)
    await gen.run()
    return gen.summary()
