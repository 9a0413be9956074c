"""The live gate monitor: samples every SLO gate during the inject phase and aborts on a sustained breach.

Each gate samples on its own schedule (`interval_s`). A predicate breaches when it holds on every sample for its
whole window: the window is measured between the start times of the first breaching sample and the current one,
so `error_rate > 0.01 for 30s` with 1s sampling aborts on the first sample taken 30s after the breach began,
i.e. within one interval of the window filling. A sample that yields no number (source down, probe failed,
sample too slow) counts as breaching unless the gate says `on_missing: ignore`: a gate that cannot see must not
let the fault run on blind.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from faultplane.core.gates import GatePredicate, GateSpec
from faultplane.engine.sli import SliError, SliSources

__all__ = ["GateMonitor"]


@dataclass
class _GateState:
    spec: GateSpec
    predicate: GatePredicate
    breach_started: float | None = None  # monotonic start of the first sample of the current breaching run
    breach_started_wall: float | None = None
    breaching_samples: int = 0
    samples: int = 0


class GateMonitor:
    """Watches `gates` with `sources`; reports every sample to `on_sample` and calls `abort` once on a breach."""

    def __init__(
        self,
        gates: Sequence[GateSpec | dict[str, Any]],
        sources: SliSources,
        on_sample: Callable[[dict[str, Any]], None],
        *,
        stop_after_abort: bool = False,
    ) -> None:
        specs = [g if isinstance(g, GateSpec) else GateSpec.model_validate(g) for g in gates]
        self.gates = specs
        self.sources = sources
        self.on_sample = on_sample
        self.stop_after_abort = stop_after_abort
        self.breach: dict[str, Any] | None = None
        self.samples_taken = 0
        self.problems = {g.name: m for g in specs if (m := sources.missing(g))}
        self._states = [_GateState(g, g.predicate) for g in specs]
        self._aborted = False
        self._abort: Callable[[str], None] | None = None
        self._scope: anyio.CancelScope | None = None

    async def run(self, abort: Callable[[str], None]) -> None:
        """Sample until cancelled (or, with stop_after_abort, until the first breach)."""
        self._abort = abort
        async with anyio.create_task_group() as tg:
            self._scope = tg.cancel_scope
            for state in self._states:
                tg.start_soon(self._watch, state)

    async def _watch(self, state: _GateState) -> None:
        spec = state.spec
        problem = self.problems.get(spec.name)
        if problem and spec.on_missing == "breach":
            # no source at all will never start measuring: waiting out the window would only let the fault run
            self._trip(state, None, time.time(), reason=f"gate {spec.name!r} cannot be measured: {problem}")
            if self.stop_after_abort:
                return
        next_tick = time.monotonic()
        while True:
            started = time.monotonic()
            wall = time.time()
            value, error = await self._sample(spec)
            self._judge(state, value, error, started, wall)
            # keep to the schedule; when a sample overran, skip the ticks it missed instead of bursting
            next_tick += spec.interval_s
            now = time.monotonic()
            if next_tick < now:
                next_tick = now + (spec.interval_s - (now - next_tick) % spec.interval_s)
            await anyio.sleep(next_tick - now)

    async def _sample(self, spec: GateSpec) -> tuple[float | None, str | None]:
        try:
            with anyio.fail_after(spec.sample_timeout):
                value = await self.sources.sample(spec)
        except TimeoutError:
            return None, f"no reading within {spec.sample_timeout:g}s"
        except SliError as exc:
            return None, str(exc)
        except Exception as exc:  # a probe's own failure is a reading too: the gate cannot see
            return None, f"{exc.__class__.__name__}: {exc}"
        if not math.isfinite(value):
            return None, f"reading {value!r} is not finite"
        return value, None

    def _judge(
        self, state: _GateState, value: float | None, error: str | None, started: float, wall: float
    ) -> None:
        spec, pred = state.spec, state.predicate
        state.samples += 1
        self.samples_taken += 1
        breaching = spec.on_missing == "breach" if value is None else pred.breached_by(value)
        if breaching:
            if state.breach_started is None:
                state.breach_started, state.breach_started_wall = started, wall
                state.breaching_samples = 0
            state.breaching_samples += 1
        else:
            state.breach_started = state.breach_started_wall = None
            state.breaching_samples = 0
        held = started - state.breach_started if state.breach_started is not None else 0.0
        sample: dict[str, Any] = {
            "gate": spec.name,
            "sli": spec.sli,
            "value": value,
            "ts": wall,
            "breaching": breaching,
            "threshold": pred.threshold,
            "op": pred.op,
            "window_s": pred.window_s,
            "held_s": round(held, 3),
        }
        if error:
            sample["error"] = error
        with contextlib.suppress(Exception):  # a broken journal writer must not blind the gate
            self.on_sample(sample)
        if breaching and held >= pred.window_s and not self._aborted:
            self._trip(state, value, wall, held=held, error=error)

    def _trip(
        self,
        state: _GateState,
        value: float | None,
        wall: float,
        *,
        held: float = 0.0,
        error: str | None = None,
        reason: str | None = None,
    ) -> None:
        if self._aborted:
            return
        self._aborted = True
        spec, pred = state.spec, state.predicate
        if reason is None:
            shown = "no reading" if value is None else f"{value:g}"
            reason = (
                f"gate {spec.name!r}: {spec.rollback_on!r} held for {held:.1f}s "
                f"(last {spec.sli} = {shown}{'; ' + error if error else ''})"
            )
        self.breach = {
            "gate": spec.name,
            "sli": spec.sli,
            "predicate": spec.rollback_on,
            "value": value,
            "threshold": pred.threshold,
            "op": pred.op,
            "window_s": pred.window_s,
            "held_s": round(held, 3),
            "first_breach_ts": state.breach_started_wall if state.breach_started_wall is not None else wall,
            "ts": wall,
            "breaching_samples": state.breaching_samples,
            "reason": reason,
        }
        if error:
            self.breach["error"] = error
        assert self._abort is not None
        self._abort(reason)
        if self.stop_after_abort and self._scope is not None:
            self._scope.cancel()
