"""A run's lifecycle, top to bottom: 0 plan (`plan`) and policy (`admission`), refused before anything runs;
1 baseline (`baseline`); 2 inject (`inject`); 3 recover (`recover`); 4 analyse (`analyse`). This module puts
the phases in order and holds the guarantee that binds them: whatever ends phases 1 and 2 (done, failed, a
gate breached, an error, a timeout, Ctrl-C, SIGTERM, `abort_run`), phase 3 runs shielded from that
cancellation, so rollbacks and driver reverts always run, and the journal (`engine/journal.py`, written as the
run goes) is always finished by phase 4. What every phase stands on (the run's state, running one activity,
the hypothesis check) is in `runner`.

Every name other code imports from here (`plan`, `Plan`, `execute`, `exit_code`, `evaluate_document`, ...)
still is importable from here."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import anyio

# What every run reaches (the policy's choke point, preflight, controls, effects and exposure, the signal
# watcher of handle_signals) is loaded with the engine, not lazily inside the first run: imported there, it
# was the largest fixed cost of a run (most of its wall time for a short experiment), paid while the run's
# clock ticks and its probes wait. Commands that never run an experiment do not import this module.
import anyio._core._signals
import anyio.abc

import faultplane.core.effects
import faultplane.core.exposure
import faultplane.core.hostile
import faultplane.core.policy  # every run is checked against the policy: loaded with the engine
import faultplane.engine.choke
import faultplane.engine.controls
import faultplane.engine.keys
import faultplane.engine.preflight
import faultplane.services.ctk  # noqa: F401 (loaded for its side effect, as the block above)
from faultplane.core.model import Journal
from faultplane.core.store import Store
from faultplane.drivers.blast import radius_cap

# the phases, and every name other code took from this module before they had modules of their own
# (`X as X`: kept importable from here)
from faultplane.engine.admission import _decision_dict, _load_policy, evaluate_plan
from faultplane.engine.admission import _fault_type_of as _fault_type_of
from faultplane.engine.admission import _targets_of as _targets_of
from faultplane.engine.admission import approval_hash as approval_hash
from faultplane.engine.admission import evaluate_document as evaluate_document
from faultplane.engine.admission import evaluate_policy as evaluate_policy
from faultplane.engine.admission import policy_document as policy_document
from faultplane.engine.analyse import EXIT_CODES as EXIT_CODES
from faultplane.engine.analyse import EXIT_ROLLBACK_FAILED as EXIT_ROLLBACK_FAILED
from faultplane.engine.analyse import Analyse
from faultplane.engine.analyse import _verdict as _verdict
from faultplane.engine.analyse import exit_code as exit_code
from faultplane.engine.analyse import rollback_failed as rollback_failed
from faultplane.engine.baseline import Baseline
from faultplane.engine.inject import Inject
from faultplane.engine.journal import now, recover_interrupted
from faultplane.engine.plan import Plan, _with_dynamic_configuration, checked_plan
from faultplane.engine.plan import _canonical as _canonical
from faultplane.engine.plan import _slug as _slug
from faultplane.engine.plan import content_hash as content_hash
from faultplane.engine.plan import plan as plan
from faultplane.engine.providers import arm_inline_signals, disarm_inline_signals
from faultplane.engine.recover import Recover
from faultplane.engine.runner import _ACTIVE, EventHandler, _ActiveRun
from faultplane.engine.runner import _RunState as _RunState
from faultplane.engine.runner import abort_run as abort_run
from faultplane.engine.runner import active_runs as active_runs
from faultplane.engine.strategies import CTK_COMPAT

__all__ = [
    "EXIT_CODES",
    "EXIT_ROLLBACK_FAILED",
    "EventHandler",
    "Plan",
    "abort_run",
    "active_runs",
    "approval_hash",
    "checked_plan",
    "content_hash",
    "evaluate_document",
    "evaluate_plan",
    "evaluate_policy",
    "execute",
    "exit_code",
    "plan",
    "policy_document",
    "refused_journal",
    "rollback_failed",
    "run_plan",
]

# the policy's decision on a plan (phase 0)
_evaluate = evaluate_plan


# ---- phase 0: plan and policy, then the run -------------------------------------------------------------
async def execute(
    raw: Mapping[str, Any],
    *,
    variables: Mapping[str, Any] | None = None,
    dry_run: bool = False,
    store: Store | None = None,
    on_event: EventHandler | None = None,
    policy_path: str | Path | None = None,
    approval_token: str | None = None,
    handle_signals: bool = False,
    journal_dir: Path | None = None,
    ctk_compat: bool | None = None,
    strict_variables: Collection[str] = (),
    global_controls: Any | None = None,
) -> Journal:
    """The whole lifecycle: plan and policy (phase 0), then run. Every surface goes through here, so the
    policy cannot be bypassed. Raises ExperimentError for invalid input; a refusal is a `refused` journal."""
    p = checked_plan(
        raw,
        variables,
        ctk_compat=ctk_compat,
        strict_variables=strict_variables,
        global_controls=global_controls,
    )
    policy = _load_policy(policy_path)
    decision = None
    if p.dynamic and not dry_run:
        # the policy sees the experiment before its dynamic configuration probes run, then as it will run
        if policy is not None:
            with store.batch() if isinstance(store, Store) else contextlib.nullcontext():
                decision = _evaluate(p, policy, store, approval_token)
            if not decision.allowed:
                return refused_journal(p, decision, store, journal_dir)
        p = await _with_dynamic_configuration(
            p, raw, variables, ctk_compat, strict_variables, global_controls
        )
    if policy is not None:
        # the policy reads the family's history in several queries: one store open for all of them
        with store.batch() if isinstance(store, Store) else contextlib.nullcontext():
            decision = _evaluate(p, policy, store, approval_token)
    if decision is not None and not decision.allowed:
        return refused_journal(p, decision, store, journal_dir)
    return await run_plan(
        p,
        dry_run=dry_run,
        store=store,
        on_event=on_event,
        handle_signals=handle_signals,
        policy_decision=decision,
        policy=policy,
        journal_dir=journal_dir,
    )


async def run_plan(
    p: Plan,
    *,
    dry_run: bool = False,
    store: Store | None = None,
    on_event: EventHandler | None = None,
    handle_signals: bool = False,
    policy_decision: Any | None = None,
    policy: Any | None = None,
    journal_dir: Path | None = None,
) -> Journal:
    """Run phases 1-4 of a planned experiment and return its journal."""
    recover_interrupted(store, journal_dir)
    runner = _Runner(
        p,
        dry_run=dry_run,
        store=store,
        on_event=on_event,
        policy_decision=policy_decision,
        journal_dir=journal_dir,
    )
    runner.policy = policy
    return await runner.run(handle_signals)


def refused_journal(p: Plan, decision: Any, store: Store | None, journal_dir: Path | None = None) -> Journal:
    """Record a run that the policy refused in phase 0: nothing ran."""
    runner = _Runner(
        p, dry_run=False, store=store, on_event=None, policy_decision=decision, journal_dir=journal_dir
    )
    runner.writer.start()
    runner.writer.emit({"event": "policy", "policy": _decision_dict(decision)})
    reasons = "; ".join(
        f"{v.rule} at {v.field}: {v.message} (fix: {v.fix})" for v in getattr(decision, "violations", [])
    )
    end = now()
    runner.writer.emit(
        {
            "event": "end",
            "status": "refused",
            "end": end.isoformat(),
            "duration": (end - runner.writer.journal.start).total_seconds(),
            "verdict": "refused by the policy before anything ran",
            "error": reasons or "refused",
        }
    )
    return runner.writer.finish(blast_stage=getattr(decision, "stage", None))


# ---- phases 1-4 -------------------------------------------------------------------------------------------
class _Runner(Baseline, Inject, Recover, Analyse):
    """One run: the phases of `baseline`, `inject`, `recover` and `analyse` on the context of `runner`."""

    async def run(self, handle_signals: bool) -> Journal:
        token = CTK_COMPAT.set(self.compat)
        try:
            return await self._run(handle_signals)
        finally:
            CTK_COMPAT.reset(token)

    async def _run(self, handle_signals: bool) -> Journal:
        self.writer.start()
        if self.policy_decision is not None:
            self.writer.emit({"event": "policy", "policy": _decision_dict(self.policy_decision)})
        scope = anyio.CancelScope()
        _ACTIVE[self.ctx.run_id] = _ActiveRun(self.ctx.run_id, scope, self.state)
        try:
            # every target selection of the run (method, rollbacks, threads) is held to the blast radius
            with radius_cap(self._radius()):
                if self.controls.enabled:
                    self.controls.configure()
                    self.controls.apply("experiment", "before", self.p.dump())
                await self._run_phases(handle_signals, scope)
        finally:
            _ACTIVE.pop(self.ctx.run_id, None)
        journal = self.analyse()  # 4: status, verdict; the journal is finished
        if self.controls.enabled:
            # as in Chaos Toolkit, the control sees the finished journal (its changes are not written back)
            self.controls.apply("experiment", "after", self.p.dump(), journal.model_dump(mode="json"))
            self.controls.cleanup()
        return journal

    async def _run_phases(self, handle_signals: bool, scope: anyio.CancelScope) -> None:
        async with anyio.create_task_group() as outer:
            if handle_signals:
                await outer.start(self._watch_signals, scope)  # armed before the first activity runs
            load = self._start_load(outer)
            if load is not None:
                await load[0].wait_started()  # worker processes take a moment: gates must not read nothing
            # blocking probes may run on this loop's thread while nothing else needs it (see providers), and
            # only where the run's own activity timeouts are the only deadlines (not inside a caller's)
            self.ctx.inline = (
                handle_signals and load is None and anyio.current_effective_deadline() == float("inf")
            )
            try:
                with scope:
                    if await self.baseline():  # 1: the steady state holds and every gate can read
                        await self.inject()  # 2: the method, under the gates' watch
                if scope.cancelled_caught:
                    self.state.interrupted = True
            except BaseException:
                self.state.interrupted = True
                self.state.error.append("the run was stopped by an unexpected error")
                raise
            finally:
                with anyio.CancelScope(shield=True):
                    await self.recover()  # 3: on every way out of 1 and 2, whatever cancelled them
                    await self._stop_load(load)
                outer.cancel_scope.cancel()

    def _radius(self) -> dict[str, float | int] | None:
        radius = getattr(self.policy_decision, "radius", None)
        if radius is None and self.exp.blast_radius is not None:
            br = self.exp.blast_radius
            radius = {"percent": br.percent} if br.percent is not None else {"count": br.count}
        return radius if radius and None not in radius.values() else None

    def _start_load(self, tg: anyio.abc.TaskGroup) -> tuple[Any, anyio.CancelScope, anyio.Event] | None:
        """Background load from the start of the baseline to the end of recovery; its figures feed the gates."""
        if self.exp.load is None or self.dry_run:
            return None
        from faultplane.engine.load import make_load

        gen = make_load(
            self.exp.load, on_second=lambda row: self.writer.emit({"event": "load_second", "row": row})
        )
        self.load_figures = gen
        scope, done = anyio.CancelScope(), anyio.Event()

        async def drive() -> None:
            try:
                with scope:
                    await gen.run()
            finally:
                done.set()

        tg.start_soon(drive)
        return gen, scope, done

    async def _stop_load(self, load: tuple[Any, anyio.CancelScope, anyio.Event] | None) -> None:
        if load is None:
            return
        gen, scope, done = load
        scope.cancel()
        with anyio.move_on_after(10):
            await done.wait()
        self.writer.emit({"event": "load", "load": gen.summary()})

    async def _watch_signals(
        self, scope: anyio.CancelScope, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            arm_inline_signals()
            task_status.started()
            try:
                async for signum in signals:
                    self.state.abort_reason = f"received {signal.Signals(signum).name}"
                    scope.cancel()
                    return
            finally:
                disarm_inline_signals()
