"""What every phase of a run stands on: the run's state and its journal (written as the run goes), the
registry of runs under way (`abort_run`), running one activity (the policy's choke point just before it runs,
timeouts, pauses, dry modes, controls) or a section of them, and checking the steady-state hypothesis. The
phases themselves are `baseline`, `inject`, `recover` and `analyse`, each a part of the runner that
`lifecycle` puts together."""

from __future__ import annotations

import datetime
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

import faultplane
from faultplane.core.config import mask_secrets
from faultplane.core.model import Activity, ActivityRun, ActivityStatus, Journal, MethodItem
from faultplane.core.store import Store
from faultplane.drivers.base import ActivityContext
from faultplane.engine.admission import _fault_type_of
from faultplane.engine.journal import JournalWriter, now
from faultplane.engine.plan import Plan
from faultplane.engine.providers import ActivityFailed, ActivityTimeout, execute_provider, jsonable
from faultplane.engine.tolerance import within_tolerance

__all__ = ["EventHandler", "RunnerBase", "abort_run", "active_runs"]

EventHandler = Callable[[dict[str, Any]], None]


@dataclass
class _RunState:
    status: str = "running"
    error: list[str] = field(default_factory=list)
    abort_reason: str | None = None
    interrupted: bool = False
    method_started: bool = False
    before_met: bool | None = None
    after_met: bool | None = None
    during_failed: bool = False


@dataclass
class _ActiveRun:
    run_id: str
    scope: anyio.CancelScope
    state: _RunState


_ACTIVE: dict[str, _ActiveRun] = {}


def active_runs() -> list[str]:
    return list(_ACTIVE)


def abort_run(run_id: str, reason: str = "aborted by request") -> bool:
    """Stop a run of this process; its rollbacks still run. False when no such run is active here."""
    run = _ACTIVE.get(run_id)
    if run is None:
        return False
    run.state.abort_reason = reason
    run.scope.cancel()
    return True


class RunnerBase:
    """One run's context, journal and activities; the phases are its subclasses' (see `lifecycle._Runner`)."""

    def __init__(
        self,
        p: Plan,
        *,
        dry_run: bool,
        store: Store | None,
        on_event: EventHandler | None,
        policy_decision: Any | None,
        journal_dir: Path | None,
    ) -> None:
        self.p = p
        self.exp = p.experiment
        self.dry_run = dry_run
        self.state = _RunState()
        seed = self.exp.seed if self.exp.seed is not None else random.SystemRandom().randrange(2**31)
        self.ctx = ActivityContext(
            run_id=uuid.uuid4().hex[:16],
            configuration=p.configuration,
            secrets=p.secrets,
            rng=random.Random(seed),
            dry_run=dry_run,
            store_path=str(store.path) if store else None,
            secret_values=list(p.secret_values),
        )
        journal = Journal(
            run_id=self.ctx.run_id,
            faultplane_version=faultplane.__version__,
            # the values this run used (env, --var, --var-file), so the journal alone reproduces it
            experiment=mask_secrets(
                {**p.raw, "configuration": p.configuration} if p.configuration else p.raw, p.secret_values
            ),
            status="running",
            start=now(),
            dry_run=dry_run,
            seed=seed,
            content_hash=p.content_hash,
            family=p.family,
            estimate=self.exp.estimate.model_dump(exclude_none=True) if self.exp.estimate else None,
            warnings=[str(w) for w in p.warnings],
        )
        self.writer = JournalWriter(
            journal, store=store, secret_values=p.secret_values, directory=journal_dir, on_event=on_event
        )
        if on_event is not None:
            self.ctx.on_hold = self._fault_held
        self.policy_decision = policy_decision
        self.policy: Any | None = None
        self.compat = self.exp.runtime.ctk_compat
        self._last_probes: list[dict[str, Any]] = []
        from faultplane.engine.controls import Controls

        self.controls = Controls(
            p.dump(),
            p.configuration,
            p.secrets,
            lambda message: self.writer.journal.warnings.append(message),
            p.global_controls,
        )
        self.load_figures: Any | None = None
        # each declared activity's journal entry, from the one dump of the experiment
        self._dumped: dict[int, dict[str, Any]] = {}
        dump = p.dump()
        hypo = self.exp.steady_state_hypothesis
        for items, dumped in (
            (self.exp.method, dump.get("method")),
            (self.exp.rollbacks, dump.get("rollbacks")),
            (hypo.probes if hypo else [], (dump.get("steady-state-hypothesis") or {}).get("probes")),
        ):
            for item, entry in zip(items, dumped or [], strict=False):
                if isinstance(item, Activity):
                    self._dumped[id(item)] = entry

    def enter_phase(self, phase: str) -> None:
        """Mark in the journal where a phase (baseline, inject, recover, analyse) starts."""
        self.writer.emit({"event": "phase", "phase": phase, "at": now().isoformat()})

    def _fault_held(self, label: str, seconds: float) -> None:
        """A fault stays for its duration, then is undone: the listener shows a countdown to that moment."""
        until = now() + datetime.timedelta(seconds=seconds)
        self.writer.notify(
            {"event": "fault_held", "label": label, "seconds": seconds, "until": until.isoformat()}
        )

    # ---- activities -------------------------------------------------------------------------------------
    async def run_activity(self, item: MethodItem, section: str) -> ActivityRun:
        activity = self.exp.resolve(item)
        if self.writer.on_event is not None:
            self.writer.notify(
                {
                    "event": "activity_start",
                    "section": section,
                    "name": activity.name,
                    "type": activity.type,
                    "pauses": activity.pauses.model_dump(exclude_none=True) if activity.pauses else None,
                }
            )
        if self.controls.enabled:
            self.controls.apply("activity", "before", self._activity_dict(activity))
        start = now()
        status: ActivityStatus = "succeeded"
        output: Any = None
        error: str | None = None
        # `chaos run --dry`: such an activity "succeeds" without running, as chaoslib's execute_activity does
        dry = self.exp.runtime.dry
        is_dry = dry == "activities" or (dry is not None and dry == f"{activity.type}s")
        pause = not (self.dry_run or is_dry or dry == "pause")
        if activity.pauses and activity.pauses.before and pause:
            await anyio.sleep(activity.pauses.before)
        refused = None
        applied_before = self.ctx.applied
        if not self.dry_run and not is_dry and self.policy is not None:
            from faultplane.engine.choke import refusal

            refused = refusal(
                self._activity_dict(activity),
                self.policy,
                self.p.secret_values,
                approved=getattr(self.policy_decision, "approved_by", None) is not None,
                fault_type_of=_fault_type_of,
            )
        if self.dry_run:
            status = "skipped"
        elif is_dry:
            pass
        elif refused is not None:
            status, error = "failed", refused
        else:
            try:
                if activity.timeout:
                    with anyio.fail_after(activity.timeout):
                        output = await execute_provider(activity, self.ctx)
                else:
                    output = await execute_provider(activity, self.ctx)
            except TimeoutError:
                status, error = "timeout", f"timed out after {activity.timeout}s"
            except ActivityTimeout as exc:
                status, error, output = "timeout", str(exc), exc.output
            except ActivityFailed as exc:
                status, error, output = "failed", str(exc), exc.output
            except Exception as exc:  # a bug in a provider fails the activity, never the run's bookkeeping
                status, error = "failed", f"internal error: {type(exc).__name__}: {exc}"
        end = now()
        if status == "succeeded" and section == "method" and not self.dry_run:
            self._record_injection(activity, output, self.ctx.applied - applied_before)
        # built from values the engine made itself: validating them again costs more than a quick probe
        run = ActivityRun.model_construct(
            activity=self._activity_dict(activity),
            phase=section,
            status=status,
            start=start,
            end=end,
            duration=(end - start).total_seconds(),
            output=jsonable(output),
            exception=error,
            tolerance_met=None,
        )
        if self.controls.enabled:
            self.controls.apply("activity", "after", run.activity, run.model_dump(mode="json"))
        if activity.pauses and activity.pauses.after and pause:
            await anyio.sleep(activity.pauses.after)
        return run

    def _record_injection(self, activity: Activity, output: Any, leases: int) -> None:
        """Journal the fault this method action really applied (core.exposure): a driver action whose catalog
        names a fault kind, that registered a revert it kept or whose output names what it hit. Bookkeeping:
        it never fails the run."""
        try:
            from faultplane.core.exposure import affected_count, target_identity

            prov = self._activity_dict(activity).get("provider") or {}
            if prov.get("type") != "driver":
                return
            kind = _fault_type_of(str(prov.get("driver")), str(prov.get("name")))
            affected = affected_count(output)
            if not kind or (leases <= 0 and affected <= 0):
                return
            self.writer.emit(
                {
                    "event": "injection",
                    "injection": {
                        "activity": activity.name,
                        "action": f"{prov.get('driver')}.{prov.get('name')}",
                        "fault_kind": kind,
                        "target": target_identity(str(prov.get("driver")), prov.get("arguments") or {}),
                        "leases": max(leases, 0),
                        "affected": affected,
                        "at": now().isoformat(),
                    },
                }
            )
        except Exception as exc:  # a record that cannot be made costs the stage it would earn, not the run
            self.writer.journal.warnings.append(f"injection record not written: {type(exc).__name__}: {exc}")

    def _activity_dict(self, activity: Activity) -> dict[str, Any]:
        # an activity is dumped once per run, not once per execution (a method may repeat it via `ref`)
        found = self._dumped.get(id(activity))
        if found is None:
            found = self._dumped[id(activity)] = activity.model_dump(
                mode="json", by_alias=True, exclude_none=True
            )
        return found

    async def _probe_tolerance(self, tol: dict[str, Any], value: Any) -> Any:
        spec = {k: v for k, v in tol.items() if k != "tolerance"}
        provider = dict(spec["provider"])
        args = dict(provider.get("arguments") or {})
        args["value"] = value
        provider["arguments"] = args
        spec["provider"] = provider
        return await execute_provider(Activity.model_validate(spec), self.ctx)

    async def check_hypothesis(self, when: str) -> bool | None:
        hypo = self.exp.steady_state_hypothesis
        if hypo is None or not hypo.probes:
            return None
        met = True
        probes: list[dict[str, Any]] = []
        self._last_probes = probes
        hypo_dict = self.p.dump().get("steady-state-hypothesis") or {}
        if self.controls.enabled:
            self.controls.apply("hypothesis", "before", hypo_dict)
        for item in hypo.probes:
            run = await self.run_activity(item, f"hypothesis_{when}")
            if run.status == "skipped":
                run.tolerance_met = None
            elif run.status != "succeeded":
                run.tolerance_met = False
            elif self.exp.runtime.dry in ("probes", "activities"):
                run.tolerance_met = True  # chaoslib checks no tolerance in these dry modes
            else:
                run.tolerance_met = await within_tolerance(
                    self.exp.resolve(item).tolerance,
                    run.output,
                    self._probe_tolerance,
                    ctk_compat=self.compat,
                )
            probes.append(run.model_dump(mode="json"))
            if run.tolerance_met is False:
                met = False
                break
        state = {"steady_state_met": None if self.dry_run else met, "probes": probes, "at": now().isoformat()}
        if self.controls.enabled:
            self.controls.apply("hypothesis", "after", hypo_dict, state)
        self.writer.emit({"event": "hypothesis", "when": when, "state": state})
        return None if self.dry_run else met

    async def run_section(self, items: list[MethodItem], section: str, *, stop_on_failure: bool) -> bool:
        """Run activities in order, background ones concurrently; False when one failed."""
        ok = True
        inline = self.ctx.inline
        async with anyio.create_task_group() as tg:
            for item in items:
                activity = self.exp.resolve(item)
                if activity.background:
                    self.ctx.inline = False  # it shares the loop from now to the end of the section
                    tg.start_soon(self._run_recorded, item, section)
                    continue
                run = await self._run_recorded(item, section)
                if self.compat and section == "method" and self.state.status == "failed":
                    break  # chaoslib checks the run's status between activities (a fail-fast hypothesis)
                if run.status in ("failed", "timeout") and activity.type == "action":
                    ok = False
                    if stop_on_failure and not self.compat:
                        break
        self.ctx.inline = inline
        return ok and not any(
            r.status in ("failed", "timeout") and r.activity.get("type") == "action"
            for r in (self.writer.journal.run if section == "method" else [])
        )

    @staticmethod
    def _runs_json(runs: list[ActivityRun]) -> list[dict[str, Any]]:
        return [r.model_dump(mode="json") for r in runs]

    async def _run_recorded(self, item: MethodItem, section: str) -> ActivityRun:
        run = await self.run_activity(item, section)
        self.writer.activity(section, run)
        return run
