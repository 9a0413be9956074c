"""Phase 2, inject: the method runs under watch. SLO gates sample their SLIs and a continuous hypothesis is
checked while it runs; a breach cancels the method (the rollbacks of phase 3 still run). Then, before any
rollback, whether the system held its steady state under the fault."""

from __future__ import annotations

from typing import Any

import anyio

from faultplane.core.model import Activity
from faultplane.engine.providers import execute_provider, jsonable
from faultplane.engine.runner import RunnerBase
from faultplane.engine.strategies import ctk_outcome, runs_after, runs_during

__all__ = ["Inject"]


class Inject(RunnerBase):
    async def inject(self) -> None:
        """Phase 2 (after a baseline that held)."""
        st = self.state
        strategy = self.exp.runtime.hypothesis.strategy
        self.enter_phase("inject")
        st.method_started = True
        method_scope = anyio.CancelScope()
        inline = self.ctx.inline
        async with anyio.create_task_group() as monitors:
            if self.exp.slo_gates and not self.dry_run:
                self.ctx.inline = False  # gates sample on this loop while the method runs
                monitors.start_soon(self._gates, method_scope)
            if runs_during(strategy) and not self.dry_run:
                self.ctx.inline = False
                monitors.start_soon(self._continuous_hypothesis, method_scope)
            with method_scope:
                if self.controls.enabled:
                    self.controls.apply("method", "before", self.p.dump())
                ok = await self.run_section(self.exp.method, "method", stop_on_failure=True)
                if self.controls.enabled:
                    self.controls.apply(
                        "method", "after", self.p.dump(), self._runs_json(self.writer.journal.run)
                    )
                if self.compat:
                    await self._ctk_after()
                elif not ok:
                    st.status = "failed"
                    failed = [r for r in self.writer.journal.run if r.status in ("failed", "timeout")]
                    if failed:
                        st.error.append(
                            f"action {failed[-1].activity.get('name')!r} failed: {failed[-1].exception}"
                        )
                # Did the system hold its steady state under the fault? Checked before any rollback.
                elif runs_after(strategy):
                    st.after_met = await self.check_hypothesis("after")
            monitors.cancel_scope.cancel()
        self.ctx.inline = inline

    async def _continuous_hypothesis(self, method_scope: anyio.CancelScope) -> None:
        rt = self.exp.runtime.hypothesis
        while True:
            await anyio.sleep(rt.frequency)
            met = await self.check_hypothesis("during")
            if met is False and self.compat:
                # Chaos Toolkit records it; only --fail-fast changes the outcome, and lets the current
                # activity finish
                if rt.fail_fast:
                    self.state.status = "failed"
                    self.state.error.append("steady state not met during the method (fail_fast)")
                    return
            elif met is False:
                self.state.during_failed = True
                if rt.fail_fast:
                    self.state.error.append("steady state not met during the method (fail_fast)")
                    method_scope.cancel()
                    return

    async def _gates(self, method_scope: anyio.CancelScope) -> None:
        try:
            from faultplane.engine.gates import GateMonitor
            from faultplane.engine.sli import SliSources
        except ImportError:
            return

        async def run_probe(spec: dict[str, Any]) -> Any:
            return await execute_provider(Activity.model_validate(spec), self.ctx)

        def on_sample(sample: dict[str, Any]) -> None:
            self.writer.emit({"event": "gate_sample", "sample": sample})

        def abort(reason: str) -> None:
            self.state.abort_reason = reason
            self.state.status = "aborted"
            breach = getattr(monitor, "breach", None)
            self.writer.emit(
                {"event": "gate_breach", "breach": jsonable(breach) if breach else {"reason": reason}}
            )
            method_scope.cancel()

        sources = SliSources(run_probe=run_probe, load=self.load_figures)
        monitor = GateMonitor(self.exp.slo_gates, sources, on_sample)
        await monitor.run(abort)

    async def _ctk_after(self) -> None:
        """After the method, Chaos Toolkit's way: failed actions do not fail the run; the hypothesis is checked
        again unless the run was aborted or interrupted, and a refuted one sets the outcome."""
        st = self.state
        if st.status in ("aborted", "interrupted") or not runs_after(self.exp.runtime.hypothesis.strategy):
            return
        st.after_met = await self.check_hypothesis("after")
        if st.after_met is False:
            st.status = ctk_outcome(self._last_probes)
