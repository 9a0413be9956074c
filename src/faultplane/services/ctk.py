"""Chaos Toolkit compatibility: the documented differences, `chaos run`'s runtime flags, and the journal in
Chaos Toolkit's format (so `chaos report` and other Chaos Toolkit tooling read Faultplane runs)."""

from __future__ import annotations

import platform
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from faultplane.core.config import Variables

__all__ = [
    "DIFFERENCES",
    "apply_runtime",
    "cli_overrides",
    "render_differences",
    "render_table",
    "settings_runtime",
    "to_ctk_journal",
]

# name -> (what differs, why). Each is switched to Chaos Toolkit's behaviour by `--ctk-compat`
# (or `runtime: {ctk_compat: true}` in the experiment). docs/chaostoolkit.md lists them.
DIFFERENCES: dict[str, tuple[str, str]] = {
    "before-hypothesis-not-met": (
        "A steady state not met before the method ends the run as `failed`, and no rollback runs (nothing "
        "was changed). Chaos Toolkit ends it `completed` (exit 0) and, under the default rollback strategy, "
        "plays the rollbacks of a method that never ran.",
        "A run whose system was not in its steady state tested nothing: reporting it as a success hides "
        "the problem from CI, and rollbacks of changes never made can do harm.",
    ),
    "failed-action-fails-run": (
        "An action that fails (raises, times out) stops the method; the run is `failed` and the rollbacks "
        "run. Chaos Toolkit carries on with the next activity and the run can end `completed`.",
        "The rest of the method assumed the fault was in place; carrying on tests something else than what "
        "was written, and a `completed` run whose fault never applied is a false green.",
    ),
    "nonzero-process-action-fails": (
        "A process action exiting non-zero fails (its status, stdout and stderr are kept in the journal). "
        "Chaos Toolkit logs a warning and counts it as succeeded.",
        "By convention a non-zero exit is a failure: an injection that did not apply must not pass.",
    ),
    "string-tolerance-reads-stdout": (
        "A string tolerance on a process or HTTP probe compares the stripped stdout (or body). Chaos Toolkit "
        "compares the whole output mapping with the string, which is never equal.",
        "The comparison Chaos Toolkit makes cannot succeed; the one the author meant is the output's text.",
    ),
    "during-hypothesis-deviates": (
        "A steady state refuted during the method (during-method-only, continuously) makes the run "
        "`deviated`, and with `--fail-fast` stops the method at once. Chaos Toolkit records it, and "
        "`--fail-fast` marks the run `failed` and lets the running activity finish.",
        "A weakness seen while the fault is applied is the finding the experiment exists for.",
    ),
    "description-and-tolerance-optional": (
        "A missing `description` or `method`, a hypothesis without `title` or a hypothesis probe without "
        "`tolerance` is a warning. "
        "Chaos Toolkit refuses the experiment.",
        "Faultplane's own experiments need neither; the warning still names the field for a migration.",
    ),
    "undeclared-variable-is-an-error": (
        "A `${name}` that no configuration, secret or `--var` defines is an error naming it, and so is "
        "`--var name=value` for a name the experiment neither declares nor uses. Chaos Toolkit leaves the "
        "reference as literal text and ignores the variable. `--var x=1.5` gives a number (JSON), where "
        "Chaos Toolkit needs `x:float=1.5` (both spellings work).",
        "A misspelt variable silently ignored runs the experiment with its default, against the wrong target.",
    ),
    "tolerance-probe-value": (
        "A probe tolerance's function receives the probed `value` without declaring it under `arguments`. "
        "Chaos Toolkit checks the function's signature without it and refuses the experiment.",
        "The value is always passed in at run time; requiring a placeholder for it is a trap.",
    ),
    "control-ref-without-name": (
        "A control written `{ref: NAME}` (at the hypothesis or an activity) runs the experiment's control of "
        "that name. Chaos Toolkit documents the form but its validation requires a `name` on every control, "
        "so it refuses the experiment.",
        "The reference form is Chaos Toolkit's own documented syntax; refusing it is a validator bug, not a "
        "rule an experiment can follow.",
    ),
    "recovery-check": (
        "After a rollback or revert, the hypothesis is checked once more (`steady_states.recovery`: time to "
        "recover); it waits and repeats only when `runtime.recovery_timeout` or `recovery_window_s` asks. "
        "With nothing restored no probe runs again (a steady state that held records 0 s). Chaos Toolkit has "
        "no recovery phase.",
        "Time to recover is the measure resilience is judged by; unasked, it costs one pass of the probes.",
    ),
}

_FLAGS_WITH_VALUE = {
    "--control-file",
    "--dry",
    "--var",
    "--var-file",
    "--rollback-strategy",
    "--hypothesis-strategy",
    "--hypothesis-frequency",
}


def cli_overrides(args: Sequence[str]) -> tuple[Variables, dict[str, Any]]:
    """`chaos run`'s flags (`--var`, `--var-file`, `--rollback-strategy`, `--hypothesis-strategy`,
    `--hypothesis-frequency`, `--fail-fast`, `--dry`) as (variables, runtime overrides). `--control-file` is read by
    `engine.controls.load_global_controls`, not here."""
    from faultplane.core.config import load_var_file, parse_var

    variables = Variables()
    runtime: dict[str, Any] = {}
    it = iter(args)
    for flag in it:
        value = next(it, None) if flag in _FLAGS_WITH_VALUE else None
        if flag == "--var" and value is not None:
            k, v = parse_var(value)
            variables[k] = v
        elif flag == "--var-file" and value is not None:
            variables.merge(load_var_file(value))
        elif flag == "--control-file":
            continue
        elif flag == "--fail-fast":
            runtime.setdefault("hypothesis", {})["fail_fast"] = True
        elif value is not None:
            section, key = {
                "--rollback-strategy": ("rollbacks", "strategy"),
                "--hypothesis-strategy": ("hypothesis", "strategy"),
                "--hypothesis-frequency": ("hypothesis", "frequency"),
                "--dry": ("", "dry"),
            }[flag]
            if not section:
                runtime[key] = value
                continue
            runtime.setdefault(section, {})[key] = float(value) if key == "frequency" else value
    return variables, runtime


def apply_runtime(raw: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """The document with the command line's runtime settings over its `runtime` block (flags win, as in
    `chaos run`)."""
    doc = dict(raw)
    if not overrides:
        return doc
    runtime = dict(doc.get("runtime") or {}) if isinstance(doc.get("runtime"), dict) else {}
    for key, value in overrides.items():
        if isinstance(value, Mapping):
            inner = runtime.get(key)
            runtime[key] = {**(inner if isinstance(inner, dict) else {}), **value}
        else:
            runtime[key] = value
    doc["runtime"] = runtime
    return doc


def settings_runtime(raw: Mapping[str, Any], global_controls: Any | None) -> Mapping[str, Any]:
    """The rollback and hypothesis strategies of Chaos Toolkit's settings file (`runtime:`), as `chaos run`
    takes them: only when the experiment has no `runtime` block of its own (one that has it uses its own
    strategies or the defaults), and under the command line's flags."""
    settings = getattr(global_controls, "settings", None)
    block = settings.get("runtime") if isinstance(settings, dict) else None
    if not isinstance(block, dict) or raw.get("runtime"):
        return raw
    picked: dict[str, Any] = {}
    for section in ("rollbacks", "hypothesis"):
        entry = block.get(section)
        if isinstance(entry, dict) and entry.get("strategy"):
            picked[section] = {"strategy": entry["strategy"]}
    return {**raw, "runtime": picked} if picked else raw


def render_differences() -> str:
    parts = []
    for name, (what, why) in DIFFERENCES.items():
        parts.append(f'<a id="{name}"></a>\n**{name}** — {what}\n\n*Why:* {why}\n')
    return "\n".join(parts).rstrip()


def render_table(rows: Iterable[tuple[str, str, str, str, str, list[str]]]) -> str:
    lines = [
        "| experiment | from | `chaos run` | Faultplane | Faultplane `--ctk-compat` | difference |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, source, ctk, default, compat, diffs in rows:
        cell = ", ".join(f"[{d}](#{d})" for d in diffs) or "same"
        lines.append(f"| `{name}` | {source} | {ctk} | {default} | {compat} | {cell} |")
    return "\n".join(lines)


def _ctk_run(run: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "activity": run.get("activity") or {},
        "output": run.get("output"),
        "start": str(run.get("start")),
        "status": "succeeded" if run.get("status") in ("succeeded", "skipped") else "failed",
        "end": str(run.get("end")),
        "duration": run.get("duration") or 0.0,
    }
    if run.get("exception"):
        out["exception"] = [str(run["exception"])]
    if run.get("tolerance_met") is not None:
        out["tolerance_met"] = run["tolerance_met"]
    return out


def _ctk_state(state: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not state:
        return None
    return {
        "steady_state_met": state.get("steady_state_met"),
        "probes": [_ctk_run(p) for p in state.get("probes") or []],
    }


def to_ctk_journal(journal: Mapping[str, Any]) -> dict[str, Any]:
    """A Faultplane journal in Chaos Toolkit's journal format (chaoslib's `Journal`): statuses mapped to the
    four Chaos Toolkit knows, with `deviated` as a flag; Faultplane's own figures under `extensions`."""
    status = str(journal.get("status"))
    ctk_status = {"deviated": "completed", "refused": "failed", "running": "interrupted"}.get(status, status)
    states = journal.get("steady_states") or {}
    return {
        "chaoslib-version": None,
        "platform": platform.platform(),
        "node": journal.get("node") or platform.node(),
        "experiment": journal.get("experiment") or {},
        "start": str(journal.get("start")),
        "status": ctk_status,
        "deviated": bool(journal.get("deviated")) or status == "deviated",
        "steady_states": {
            "before": _ctk_state(states.get("before")),
            "after": _ctk_state(states.get("after")),
            "during": [s for s in (_ctk_state(d) for d in states.get("during") or []) if s],
        },
        "run": [_ctk_run(r) for r in journal.get("run") or []],
        "rollbacks": [_ctk_run(r) for r in journal.get("rollbacks") or []],
        "end": str(journal.get("end")),
        "duration": journal.get("duration") or 0.0,
        "extensions": [
            {
                "name": "faultplane",
                "run_id": journal.get("run_id"),
                "status": status,
                "verdict": journal.get("verdict"),
                "error": journal.get("error"),
                "recovery": states.get("recovery"),
                "warnings": journal.get("warnings") or [],
            }
        ],
    }


def write_ctk_journal(journal: Mapping[str, Any], path: Path) -> None:
    import json

    path.write_text(json.dumps(to_ctk_journal(journal), indent=2, ensure_ascii=False, default=str), "utf-8")
