"""Phase 1, the baseline: before any fault, the steady-state hypothesis must hold and every probe or
Prometheus gate must give a number (a gate that cannot read now would never trip under the fault). Either
failing stops the run here, before anything is injected, saying why."""

from __future__ import annotations

from typing import Any

import anyio

from faultplane.core.model import Activity
from faultplane.engine.providers import execute_provider
from faultplane.engine.runner import RunnerBase
from faultplane.engine.strategies import ctk_outcome, runs_before

__all__ = ["Baseline"]


class Baseline(RunnerBase):
    async def baseline(self) -> bool:
        """Phase 1; False when the run stops before the method (its status and error say why)."""
        st = self.state
        strategy = self.exp.runtime.hypothesis.strategy
        self.enter_phase("baseline")
        if runs_before(strategy):
            st.before_met = await self.check_hypothesis("before")
            if st.before_met is False:
                # Chaos Toolkit: `completed` when a tolerance was merely not met, `failed` when a probe raised
                st.status = ctk_outcome(self._last_probes) if self.compat else "failed"
                st.error.append("steady state hypothesis not met before the method: the method was not run")
                return False
        if self.exp.slo_gates and not self.dry_run:
            blind = await self._baseline_gates()
            if blind is not None:
                st.status = "failed"
                st.error.append(blind)
                return False
        return True

    async def _baseline_gates(self) -> str | None:
        """Read every probe and Prometheus gate once during the baseline, before any fault: a gate whose
        source gives no number now would never trip under the fault (or, by `on_missing: breach`, would
        abort only after the fault is in), so the run stops here, saying why. Load gates are judged in phase
        0 (`gates.source`): their figures need traffic in the window first."""
        import math

        from faultplane.engine.sli import SliError, SliSources

        async def run_probe(spec: dict[str, Any]) -> Any:
            return await execute_provider(Activity.model_validate(spec), self.ctx)

        sources = SliSources(run_probe=run_probe, load=self.load_figures)
        for gate in self.exp.slo_gates:
            if gate.sli not in ("probe", "prometheus"):
                continue
            value: float | None = None
            error: str | None = None
            try:
                with anyio.fail_after(gate.sample_timeout):
                    value = await sources.sample(gate)
            except TimeoutError:
                error = f"no reading within {gate.sample_timeout:g}s"
            except SliError as exc:
                error = str(exc)
            except Exception as exc:  # the probe's own failure: the gate cannot see
                error = f"{type(exc).__name__}: {exc}"
            if value is not None and not math.isfinite(value):
                value, error = None, f"reading {value!r} is not finite"
            self.writer.emit(
                {
                    "event": "gate_baseline",
                    "sample": {"gate": gate.name, "sli": gate.sli, "value": value, "error": error},
                }
            )
            if error is not None:
                return (
                    f"gate {gate.name!r} cannot trip: during the baseline its {gate.sli} gave no number "
                    f"({error}); no fault was injected. Make the gate's source answer a number (check the "
                    "probe, its `value_path`, or the query) and run again"
                )
        return None
