"""The five-phase run: plan, baseline, inject, recover, analyse — with rollbacks on every exit path."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import random
import signal
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

# What every run reaches (the policy's choke point, preflight, controls, effects and exposure, the signal
# watcher of handle_signals) is loaded with the engine, not lazily inside the first run: imported there, it
# was the largest fixed cost of a run (most of its wall time for a short experiment), paid while the run's
# clock ticks and its probes wait. Commands that never run an experiment do not import this module.
import anyio._core._signals
import anyio.abc

import faultplane
import faultplane.core.effects
import faultplane.core.exposure
import faultplane.core.hostile
import faultplane.core.policy  # every run is checked against the policy: loaded with the engine
import faultplane.core.policy_layers
import faultplane.engine.choke
import faultplane.engine.controls
import faultplane.engine.keys
import faultplane.engine.preflight
import faultplane.services.ctk
from faultplane.core.config import mask_secrets, resolve
from faultplane.core.formats import ExperimentError, ValidationIssue
from faultplane.core.model import Activity, ActivityRun, ActivityStatus, Experiment, Journal, MethodItem
from faultplane.core.store import Store
from faultplane.drivers.base import ActivityContext, get_activity
from faultplane.drivers.blast import radius_cap
from faultplane.engine.journal import JournalWriter, now, recover_interrupted
from faultplane.engine.providers import (
    ActivityFailed,
    ActivityTimeout,
    arm_inline_signals,
    disarm_inline_signals,
    execute_provider,
    jsonable,
)
from faultplane.engine.strategies import (
    CTK_COMPAT,
    ctk_outcome,
    ctk_play_rollbacks,
    runs_after,
    runs_before,
    runs_during,
)
from faultplane.engine.tolerance import within_tolerance

__all__ = [
    "EXIT_CODES",
    "EXIT_ROLLBACK_FAILED",
    "Plan",
    "abort_run",
    "active_runs",
    "approval_hash",
    "content_hash",
    "evaluate_document",
    "evaluate_plan",
    "evaluate_policy",
    "execute",
    "exit_code",
    "plan",
    "policy_document",
    "run_plan",
]

EXIT_CODES = {"completed": 0, "deviated": 1, "failed": 1, "aborted": 3, "refused": 3, "interrupted": 130}

EventHandler = Callable[[dict[str, Any]], None]


# a rollback or a driver's revert failed: the system may still be under the fault, whatever else happened
EXIT_ROLLBACK_FAILED = 5


def rollback_failed(journal: Journal) -> bool:
    """Did a rollback activity or a registered revert fail in this run?"""
    return any(r.status in ("failed", "timeout") for r in journal.rollbacks) or any(
        not r.get("ok", True) for r in journal.reverts
    )


def exit_code(journal: Journal) -> int:
    if journal.status != "refused" and rollback_failed(journal):
        return EXIT_ROLLBACK_FAILED
    if journal.status == "completed":
        after = (journal.steady_states.get("after") or {}).get("steady_state_met")
        return 0 if after in (None, True) else 1
    return EXIT_CODES.get(journal.status, 1)


def _canonical(document: Mapping[str, Any]) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def content_hash(document: Mapping[str, Any]) -> str:
    return hashlib.sha256(_canonical(document).encode()).hexdigest()


@dataclass
class Plan:
    """Phase 0's output: a validated, resolved experiment ready to run."""

    raw: dict[str, Any]
    experiment: Experiment
    configuration: dict[str, Any]
    secrets: dict[str, Any]
    secret_values: list[str]
    content_hash: str
    family: str
    _dump: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    # the document held a `${`: what runs may differ from what was written
    substituted: bool = True
    # keys dropped as unknown, checks that did not refuse the run (unloadable controls, CTK-required keys)
    warnings: list[ValidationIssue] = field(default_factory=list)
    # configuration keys a probe gives when the run starts (engine/dynamic_config.py); `${}` of them unresolved
    dynamic: list[str] = field(default_factory=list)
    # controls from Chaos Toolkit's settings and control files (engine/controls.GlobalControls)
    global_controls: Any | None = None

    def dump(self) -> dict[str, Any]:
        """The experiment as JSON data (aliases, no nulls), made once: the policy reads it and the journal
        takes each activity's entry from it. Treat it as read-only."""
        if self._dump is None:
            self._dump = self.experiment.model_dump(mode="json", by_alias=True, exclude_none=True)
        return self._dump


def plan(
    raw: Mapping[str, Any],
    variables: Mapping[str, Any] | None = None,
    *,
    ctk_compat: bool | None = None,
    strict_variables: Collection[str] = (),
) -> Plan:
    """Resolve and validate; raises ExperimentError listing every problem at once. Keys Faultplane does not
    know are dropped with a warning (`Plan.warnings`), as Chaos Toolkit ignores them."""
    from faultplane.engine.keys import validate_lenient

    raw = dict(raw)

    def structure_issues() -> list[ValidationIssue]:
        # the document as written, before values are substituted in: errors point at what the author wrote
        try:
            validate_lenient(raw)
        except ExperimentError as exc:
            return exc.issues
        return []

    # most experiments hold no `${}`; the one serialisation gives the content hash and says so
    canonical: str | None
    try:
        canonical = _canonical(raw)
    except TypeError:  # keys JSON cannot sort (a YAML mapping with mixed key types): validation names them
        canonical = None
    substituted = canonical is None or "${" in canonical
    runtime = raw.get("runtime")
    compat = (
        ctk_compat
        if ctk_compat is not None
        else isinstance(runtime, dict) and bool(runtime.get("ctk_compat"))
    )
    try:
        resolved = resolve(
            raw, variables, substitute=substituted, keep_unknown=compat, strict=strict_variables
        )
    except ExperimentError as exc:
        raise ExperimentError(structure_issues() + exc.issues) from None
    try:
        # one validation on the common path; the document as written is validated only to explain a failure
        experiment, warnings = validate_lenient(resolved.document)
    except ExperimentError as exc:
        raise ExperimentError(structure_issues() or exc.issues) from None
    if ctk_compat is not None:
        experiment.runtime.ctk_compat = ctk_compat
    if experiment.load is not None:
        from faultplane.engine.load_spec import parse_load_spec

        parse_load_spec(experiment.load)  # raises ExperimentError naming load.<field>
    family = experiment.family or _slug(experiment.title)
    return Plan(
        raw,
        experiment,
        resolved.configuration,
        resolved.secrets,
        resolved.secret_values,
        hashlib.sha256(canonical.encode()).hexdigest() if canonical is not None else content_hash(raw),
        family,
        substituted=substituted,
        warnings=warnings,
        dynamic=resolved.dynamic,
    )


def checked_plan(
    raw: Mapping[str, Any],
    variables: Mapping[str, Any] | None = None,
    *,
    ctk_compat: bool | None = None,
    strict_variables: Collection[str] = (),
    global_controls: Any | None = None,
) -> Plan:
    """`plan`, then what the run would find out too late (engine/preflight.py): both `validate` and a run
    start here, so what validates is what runs."""
    from faultplane.engine.preflight import preflight

    p = plan(raw, variables, ctk_compat=ctk_compat, strict_variables=strict_variables)
    p.global_controls = global_controls
    errors, warnings = preflight(p)
    if errors:
        refusal = ExperimentError(errors)
        refusal.warnings = p.warnings + warnings  # type: ignore[attr-defined]
        raise refusal
    p.warnings.extend(warnings)
    return p


async def _with_dynamic_configuration(
    p: Plan,
    raw: Mapping[str, Any],
    variables: Mapping[str, Any] | None,
    ctk_compat: bool | None,
    strict_variables: Collection[str],
    global_controls: Any | None,
) -> Plan:
    """Run the dynamic configuration probes (chaoslib's `load_dynamic_configuration`), then plan again with
    their values, so the run, the policy and the journal see them like any configuration value."""
    from faultplane.core.config import Variables
    from faultplane.engine.dynamic_config import evaluate

    raw_config = raw.get("configuration")
    values, failures = await evaluate(
        raw_config if isinstance(raw_config, dict) else {},
        p.dynamic,
        p.configuration,
        p.secrets,
        p.secret_values,
    )
    given = Variables(variables or {}, secrets=getattr(variables, "secrets", None))
    given.update(values)
    notes = [
        ValidationIssue(
            field=f.split(":", 1)[0],
            message=f.split(":", 1)[1].strip(),
            fix="the key is left unset, as in Chaos Toolkit; fix the probe or pass --var for it",
        )
        for f in failures
    ]
    try:
        again = checked_plan(
            raw,
            given,
            ctk_compat=ctk_compat,
            strict_variables=strict_variables,
            global_controls=global_controls,
        )
    except ExperimentError as exc:
        # a `${key}` its failed probe should have given is undefined: say why first
        raise ExperimentError(notes + exc.issues) from None
    if again.dynamic and not again.experiment.runtime.ctk_compat:
        # a failed probe's key stays unset; where the experiment uses it, the run would carry `${key}` as text
        doc = json.dumps({k: v for k, v in raw.items() if k not in ("configuration", "secrets")}, default=str)
        used = [
            n
            for n in notes
            if any(f"${{{k}}}" in doc and n.field == f"configuration.{k}" for k in again.dynamic)
        ]
        if used:
            raise ExperimentError(used)
    again.dynamic = []
    again.warnings.extend(notes)
    return again


def _slug(text: str) -> str:
    return "-".join("".join(c.lower() if c.isalnum() else " " for c in text).split())


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


class _Runner:
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

    async def _ctk_after(self) -> None:
        """After the method, Chaos Toolkit's way: failed actions do not fail the run; the hypothesis is checked
        again unless the run was aborted or interrupted, and a refuted one sets the outcome."""
        st = self.state
        if st.status in ("aborted", "interrupted") or not runs_after(self.exp.runtime.hypothesis.strategy):
            return
        st.after_met = await self.check_hypothesis("after")
        if st.after_met is False:
            st.status = ctk_outcome(self._last_probes)

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

    async def _run_recorded(self, item: MethodItem, section: str) -> ActivityRun:
        run = await self.run_activity(item, section)
        self.writer.activity(section, run)
        return run

    # ---- monitors ---------------------------------------------------------------------------------------
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

    # ---- the run ----------------------------------------------------------------------------------------
    async def inject(self) -> None:
        st = self.state
        strategy = self.exp.runtime.hypothesis.strategy
        self.writer.emit({"event": "phase", "phase": "baseline", "at": now().isoformat()})
        if runs_before(strategy):
            st.before_met = await self.check_hypothesis("before")
            if st.before_met is False:
                # Chaos Toolkit: `completed` when a tolerance was merely not met, `failed` when a probe raised
                st.status = ctk_outcome(self._last_probes) if self.compat else "failed"
                st.error.append("steady state hypothesis not met before the method: the method was not run")
                return
        if self.exp.slo_gates and not self.dry_run:
            blind = await self._baseline_gates()
            if blind is not None:
                st.status = "failed"
                st.error.append(blind)
                return
        self.writer.emit({"event": "phase", "phase": "inject", "at": now().isoformat()})
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

    async def recover(self) -> None:
        st = self.state
        self.writer.emit({"event": "phase", "phase": "recover", "at": now().isoformat()})
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

    def analyse(self) -> Journal:
        st = self.state
        self.writer.emit({"event": "phase", "phase": "analyse", "at": now().isoformat()})
        if st.interrupted:
            status = "interrupted"
        elif st.status in ("failed", "aborted"):
            status = st.status
        elif st.after_met is False or st.during_failed:
            status = "deviated"
        else:
            status = "completed"
        deviated = st.after_met is False or st.during_failed
        rolled_back_badly = any(e.startswith(("rollback ", "revert ")) for e in st.error)
        before_rollback = status
        if rolled_back_badly and status in ("completed", "deviated"):
            status = "failed"  # a run that may have left its fault behind did not complete
        if st.abort_reason and status == "aborted":
            st.error.insert(0, f"aborted: {st.abort_reason}")
        elif st.abort_reason and status == "interrupted":
            st.error.insert(0, f"interrupted: {st.abort_reason}")
        verdict = _verdict(before_rollback, st, self.dry_run)
        if rolled_back_badly:
            verdict = (
                "rollback failed: the system may still be under the fault; check it and revert by hand "
                f"(`faultplane drivers leases list` shows what is held). Before that: {verdict}"
            )
        advice = self._advice(status)
        if advice:
            verdict += ". " + " ".join(advice)  # two sentences, not one run-on
        end = now()
        self.writer.emit(
            {
                "event": "end",
                "status": status,
                "deviated": deviated,
                "end": end.isoformat(),
                "duration": (end - self.writer.journal.start).total_seconds(),
                "verdict": verdict,
                "error": "; ".join(st.error) or None,
            }
        )
        return self.writer.finish(blast_stage=getattr(self.policy_decision, "stage", None))

    def _advice(self, status: str) -> list[str]:
        """The three-greens advice, counting the run that just ended."""
        decision = self.policy_decision
        if decision is None or self.dry_run or self.policy is None:
            return []
        from faultplane.core.policy import advice_after_run

        green = (
            status == "completed" and self.state.before_met is not False and self.state.after_met is not False
        )
        try:
            return advice_after_run(
                self.writer.store, self.p.family, self.policy, green=green, stage=decision.stage
            )
        except Exception:  # advice is a courtesy; it must never cost the journal
            return []

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
        journal = self.analyse()
        if self.controls.enabled:
            # as in Chaos Toolkit, the control sees the finished journal (its changes are not written back)
            self.controls.apply("experiment", "after", self.p.dump(), journal.model_dump(mode="json"))
            self.controls.cleanup()
        return journal

    def _radius(self) -> dict[str, float | int] | None:
        radius = getattr(self.policy_decision, "radius", None)
        if radius is None and self.exp.blast_radius is not None:
            br = self.exp.blast_radius
            radius = {"percent": br.percent} if br.percent is not None else {"count": br.count}
        return radius if radius and None not in radius.values() else None

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
                    await self.inject()
                if scope.cancelled_caught:
                    self.state.interrupted = True
            except BaseException:
                self.state.interrupted = True
                self.state.error.append("the run was stopped by an unexpected error")
                raise
            finally:
                with anyio.CancelScope(shield=True):
                    await self.recover()
                    await self._stop_load(load)
                outer.cancel_scope.cancel()

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


def _decision_dict(decision: Any) -> dict[str, Any]:
    if hasattr(decision, "model_dump"):
        return decision.model_dump(mode="json")
    if hasattr(decision, "to_dict"):
        return jsonable(decision.to_dict())
    if dataclasses.is_dataclass(decision) and not isinstance(decision, type):
        return jsonable(dataclasses.asdict(decision))
    return {"decision": str(decision)}


def _verdict(status: str, st: _RunState, dry_run: bool) -> str:
    if dry_run:
        return "dry run: the plan is valid; nothing was executed"
    if status == "completed":
        return "steady state held: the hypothesis was not refuted"
    if status == "deviated":
        return "deviated: the steady state did not hold after the fault (a weakness found)"
    if status == "aborted":
        return f"aborted by a gate and rolled back: {st.abort_reason}"
    if status == "interrupted":
        return f"interrupted ({st.abort_reason or 'stopped'}); rollbacks ran"
    if st.before_met is False:
        return "failed: the system was not in its steady state before the method"
    return "failed: an action could not be carried out"


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


def _load_policy(policy_path: str | Path | None) -> Any | None:
    try:
        from faultplane.core.policy import PolicyError, load_policy
    except ImportError:
        return None
    try:
        return load_policy(policy_path)
    except PolicyError as exc:
        raise ExperimentError(
            [
                ValidationIssue(
                    field="policy", message=str(exc), fix="correct the policy file or pass --policy"
                )
            ]
        ) from None


def policy_document(p: Plan) -> dict[str, Any]:
    """The experiment as it will run (variables substituted), as the policy reads it and approvals bind it."""
    doc = dict(p.dump())
    # activities may read configuration without `${}`: the policy must see the final values
    doc["configuration"] = {**(doc.get("configuration") or {}), **p.configuration}
    return doc


def approval_hash(p: Plan) -> str:
    """The hash an approval of this plan is bound to: resolved content, secrets digested (never in clear).

    A plan with nothing to resolve (no `${}`, no configuration, no secrets) runs exactly what was written, so
    its content hash binds it as tightly, and costs no second serialisation of the experiment."""
    if not (p.substituted or p.configuration or p.secrets):
        return hashlib.sha256(f"approval of experiment as written:{p.content_hash}".encode()).hexdigest()
    from faultplane.core.policy import approval_hash as _hash

    return _hash(policy_document(p), p.secret_values)


def evaluate_document(
    doc: Mapping[str, Any],
    policy: Any,
    store: Store | None,
    approval_token: str | None,
    *,
    content_hash: str | None = None,
    family: str | None = None,
    secret_values: list[str] | None = None,
    approval_hash: str | None = None,
) -> Any:
    """The one policy evaluation every surface uses (engine, `guard check`, the agent hook): the driver
    catalog tells what each action injects and whether it selects targets, so none guesses differently.
    A planned experiment passes its `approval_hash(plan)`; without one the document's own is used."""
    from faultplane.core.policy import evaluate

    return evaluate(
        doc,
        policy=policy,
        store=store,
        approval_token=approval_token,
        content_hash=content_hash,
        family=family,
        approval_hash=approval_hash,
        fault_type_of=_fault_type_of,
        targets_of=_targets_of,
        secret_values=secret_values or (),
    )


def evaluate_plan(p: Plan, policy: Any, store: Store | None, approval_token: str | None) -> Any:
    return evaluate_document(
        policy_document(p),
        policy,
        store,
        approval_token,
        content_hash=p.content_hash,
        family=p.family,
        secret_values=p.secret_values,
        approval_hash=approval_hash(p),
    )


_evaluate = evaluate_plan


def evaluate_policy(
    p: Plan, store: Store | None, policy_path: str | Path | None, approval_token: str | None
) -> Any | None:
    """The policy's decision on a planned experiment (None while no policy module is installed)."""
    policy = _load_policy(policy_path)
    return None if policy is None else _evaluate(p, policy, store, approval_token)


def _fault_type_of(driver: str, name: str) -> str | None:
    try:
        return get_activity(driver, name).fault_type
    except Exception:  # an unknown activity is reported when it runs, not here
        return None


def _targets_of(driver: str, name: str) -> bool:
    """Does this driver action pick targets out of the matches (count/percentage, held to the blast radius)?"""
    from faultplane.drivers.blast import BlastRadius as DriverRadius

    try:
        spec = get_activity(driver, name)
    except Exception:
        return False
    return spec.kind == "action" and (
        issubclass(spec.params, DriverRadius) or "percentage" in spec.params.model_fields
    )


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
