"""Phase 3, recover: on every way out of phases 1 and 2 (done, failed, a gate breached, an error, a timeout,
Ctrl-C, SIGTERM, `abort_run`) the rollbacks the strategy asks for run, then every revert a driver registered,
each recorded in the journal; then, when something was restored, how long the steady state took to return."""

from __future__ import annotations

from typing import Any

import anyio

from faultplane.core.model import MethodItem
from faultplane.engine.journal import now
from faultplane.engine.providers import ActivityFailed, execute_provider
from faultplane.engine.runner import RunnerBase
from faultplane.engine.strategies import ctk_play_rollbacks
from faultplane.engine.tolerance import within_tolerance

__all__ = ["Recover"]


class Recover(RunnerBase):
    async def recover(self) -> None:
        """Phase 3: rollbacks as the strategy says, every registered revert, then the recovery check."""
        st = self.state
        self.enter_phase("recover")
        strategy = self.exp.runtime.rollbacks.strategy
        # a steady state refuted after the method is the main case `deviated` exists for
        deviated_so_far = st.status in ("failed", "aborted") or st.during_failed or st.after_met is False
        run_rollbacks = {
            "default": st.method_started,
            "always": True,
            "never": False,
            "deviated": st.method_started and deviated_so_far,
        }[strategy]
        # A gate breach or an interruption is exactly when rollbacks matter: run them whatever was started.
        if st.status == "aborted" or st.interrupted:
            run_rollbacks = run_rollbacks or (strategy != "never" and st.method_started)
        if self.compat:
            run_rollbacks = ctk_play_rollbacks(
                strategy, "interrupted" if st.interrupted else st.status, st.after_met is False
            )
        if run_rollbacks and self.controls.enabled:
            self.controls.apply("rollback", "before", self.p.dump())
        if run_rollbacks and self.exp.rollbacks:
            for item in self.exp.rollbacks:
                run = await self._run_recorded(item, "rollbacks")
                if run.status in ("failed", "timeout"):
                    st.error.append(f"rollback {run.activity.get('name')!r} failed: {run.exception}")
        if run_rollbacks and self.controls.enabled:
            self.controls.apply(
                "rollback", "after", self.p.dump(), self._runs_json(self.writer.journal.rollbacks)
            )
        reverted = await self.ctx.revert_all()
        for label, exc in reverted:
            self.writer.emit(
                {
                    "event": "revert",
                    "revert": {"label": label, "ok": exc is None, "error": None if exc is None else str(exc)},
                }
            )
            if exc is not None:
                st.error.append(f"revert {label!r} failed: {exc}")
        restored = bool(reverted) or bool(run_rollbacks and self.exp.rollbacks)
        if st.method_started and not st.interrupted and not self.dry_run:
            await self._recover_check(restored)

    def _recovery_asked(self) -> bool:
        """The recovery re-check repeats the hypothesis' probes (which may have side effects) and may wait
        for them. It waits only when the experiment asks (`recovery_timeout`, `recovery_window_s`); otherwise
        it is one pass after a rollback or revert, and none when nothing was restored."""
        if self.compat:
            return False
        return bool({"recovery_timeout", "recovery_window_s"} & self.exp.runtime.model_fields_set)

    async def _recover_check(self, restored: bool) -> None:
        st = self.state
        hypo = self.exp.steady_state_hypothesis
        if self.compat or hypo is None or not hypo.probes:
            return
        if self._recovery_asked():
            await self.check_recovery(wait=True)
        elif restored:
            # one pass, no waiting: a rollback or revert changed the system, and the steady state after it
            # is what time-to-recover measures
            await self.check_recovery(wait=False)
        elif st.after_met is True and not st.during_failed and st.status != "aborted":
            # it held after the method: nothing to recover from, and no probe needs repeating
            state = {
                "steady_state_met": True,
                "time_to_recover_s": 0.0,
                "window_s": 0.0,
                "checks": [],
                "from": "hypothesis_after",
                "at": now().isoformat(),
            }
            self.writer.emit({"event": "hypothesis", "when": "recovery", "state": state})

    async def check_recovery(self, wait: bool = True) -> None:
        """After rollbacks: how long until the steady state holds again (bounded by runtime.recovery_timeout)."""
        hypo = self.exp.steady_state_hypothesis
        if hypo is None or not hypo.probes:
            return
        rt = self.exp.runtime
        window = rt.recovery_window_s
        start = anyio.current_time()
        deadline = start + rt.recovery_timeout + window if wait else start
        checks: list[dict[str, Any]] = []
        held_since: float | None = None
        met = False
        while True:
            ok = await self._probe_all(hypo.probes)
            t = anyio.current_time() - start
            checks.append({"t": round(t, 3), "met": ok})
            if not ok:
                held_since = None
            elif held_since is None:
                held_since = t
            # recovered = the steady state held on every check for the whole window (not one lucky sample)
            if ok and held_since is not None and t - held_since >= window:
                met = True
                break
            if anyio.current_time() >= deadline:
                break
            await anyio.sleep(rt.hypothesis.frequency)
        state = {
            "steady_state_met": met,
            "time_to_recover_s": round(held_since, 3) if met and held_since is not None else None,
            "window_s": window,
            "checks": checks[-1000:],
            "at": now().isoformat(),
        }
        self.writer.emit({"event": "hypothesis", "when": "recovery", "state": state})
        if not met:
            self.state.error.append(
                f"the steady state did not return within {self.exp.runtime.recovery_timeout}s after rollback"
            )

    async def _probe_all(self, items: list[MethodItem]) -> bool:
        for item in items:
            activity = self.exp.resolve(item)
            try:
                with anyio.fail_after(activity.timeout) if activity.timeout else anyio.CancelScope():
                    output = await execute_provider(activity, self.ctx)
            except (ActivityFailed, TimeoutError):
                return False
            except Exception:
                return False
            if not await within_tolerance(activity.tolerance, output, self._probe_tolerance):
                return False
        return True
