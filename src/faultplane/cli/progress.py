"""What a person sees while a run goes: the phase, the activity running and for how long, a countdown for
pauses and for faults held for a duration, the live value of every gate against its threshold, and why a steady-state probe failed. Tools read
the same events as JSON lines (`--events jsonl`)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

from faultplane.cli.term import Console, Table

__all__ = ["JsonlEvents", "RunProgress", "print_summary"]

console = Console()

_STATUS_COLOURS = {
    "completed": "green",
    "deviated": "yellow",
    "failed": "red",
    "aborted": "red",
    "refused": "red",
    "interrupted": "yellow",
}


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


class _LiveLine:
    """The status line under the spinner, rendered anew at every refresh so clocks tick by themselves."""

    def __init__(self) -> None:
        self.phase = "plan"
        self.activity: str | None = None
        self.activity_since = 0.0
        self.countdown: tuple[str, float] | None = None  # (what, monotonic deadline)
        self.gates: dict[str, dict[str, Any]] = {}

    def __rich__(self) -> str:
        parts = [f"[bold]{self.phase}[/]"]
        now = time.monotonic()
        if self.countdown is not None and self.countdown[1] > now:
            parts.append(f"{self.countdown[0]}: [cyan]{self.countdown[1] - now:.1f}s left[/]")
        elif self.activity:
            parts.append(f"{self.activity} [dim]{now - self.activity_since:.1f}s[/]")
        for name, s in self.gates.items():
            colour = "red" if s.get("breaching") else "green"
            window = f" for {s['window_s']:g}s" if s.get("window_s") else ""
            parts.append(
                f"gate {name} [{colour}]{s.get('sli')}={_number(s.get('value'))}[/]"
                f" [dim](rolls back at {s.get('op')} {_number(s.get('threshold'))}{window})[/]"
            )
        return "  ".join(parts)


class RunProgress:
    """An `on_event` listener that prints a run's progress for a person."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.status: Any = None
        self.line = _LiveLine()

    def _show(self) -> None:
        if self.status is not None:
            self.status.update(self.line)

    def __call__(self, event: dict[str, Any]) -> None:
        if self.quiet:
            return
        kind = event.get("event")
        line = self.line
        if kind == "phase":
            line.phase, line.activity, line.countdown = event["phase"], None, None
            console.print(f"[bold cyan]▶ {event['phase']}[/]")
        elif kind == "activity_start":
            line.activity = f"{event['section']}: {event['name']}"
            line.activity_since = time.monotonic()
            before = (event.get("pauses") or {}).get("before")
            if before:
                line.countdown = (f"pause before {event['name']}", time.monotonic() + float(before))
        elif kind == "fault_held":
            seconds = float(event["seconds"])
            line.countdown = (f"fault held: {event['label']}", time.monotonic() + seconds)
            console.print(
                f"  [cyan]⏳ holding {event['label']} for {seconds:g}s, then undoing it[/]", highlight=False
            )
        elif kind == "activity":
            self._activity(event)
        elif kind == "hypothesis":
            self._hypothesis(event)
        elif kind == "gate_sample":
            s = event["sample"]
            line.gates[str(s.get("gate"))] = s
            if s.get("breaching"):
                held = f", held {s['held_s']:g}s of {s['window_s']:g}s" if s.get("window_s") else ""
                console.print(
                    f"  [yellow]gate {s.get('gate')}: {s.get('sli')}={_number(s.get('value'))} breaching "
                    f"({s.get('op')} {_number(s.get('threshold'))}{held})[/]"
                )
        elif kind == "gate_breach":
            b = event["breach"]
            what = b.get("predicate") or b.get("reason") or b
            console.print(
                f"  [bold red]gate breached[/]: {b.get('gate', '')} {what} (value {_number(b.get('value'))})"
            )
        elif kind == "revert":
            r = event["revert"]
            console.print(f"  {'[green]↺[/]' if r['ok'] else '[red]✗ revert failed[/]'} {r['label']}")
        self._show()

    def _activity(self, event: dict[str, Any]) -> None:
        run = event["run"]
        activity = run.get("activity") or {}
        mark = {"succeeded": "[green]✓[/]", "skipped": "[dim]-[/]"}.get(run["status"], "[red]✗[/]")
        err = f"  [red]{run['exception']}[/]" if run.get("exception") else ""
        console.print(
            f"  {mark} {event['section']:<18} {activity.get('name')}  [dim]{run['duration']:.3f}s[/]{err}",
            highlight=False,
        )
        self.line.activity = None
        after = (activity.get("pauses") or {}).get("after")
        if after and run["status"] != "skipped":
            self.line.countdown = (f"pause after {activity.get('name')}", time.monotonic() + float(after))

    def _hypothesis(self, event: dict[str, Any]) -> None:
        met = event["state"]["steady_state_met"]
        label = {True: "[green]met[/]", False: "[red]NOT met[/]", None: "[dim]not checked[/]"}[met]
        console.print(f"  steady state ({event['when']}): {label}")
        if met is not False:
            return
        for probe in event["state"].get("probes") or []:
            if probe.get("tolerance_met") is not False:
                continue
            activity = probe.get("activity") or {}
            if probe.get("exception"):
                why = f"the probe failed: {probe['exception']}"
            else:
                why = f"value {_short(probe.get('output'))} is outside tolerance {_short(activity.get('tolerance'))}"
            console.print(f"    [red]✗ {activity.get('name')}[/]: {why}", highlight=False)


class JsonlEvents:
    """`--events jsonl`: every event of the run as one JSON object per line, flushed as it happens."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.quiet = True  # nothing for a person: the stream is the output

    def __call__(self, event: dict[str, Any]) -> None:
        self.stream.write(json.dumps(event, default=str, ensure_ascii=False) + "\n")
        self.stream.flush()


def print_summary(result: Any) -> None:
    """The closing table of a run."""
    colour = _STATUS_COLOURS.get(result.status, "white")
    table = Table(title=f"run {result.run_id}", show_header=False, title_justify="left")
    table.add_row("experiment", result.experiment_title)
    table.add_row("status", f"[{colour}]{result.status}[/]")
    table.add_row(
        "steady state before / after", f"{result.steady_state_before} / {result.steady_state_after}"
    )
    table.add_row("duration", f"{result.duration_seconds:.2f}s")
    table.add_row("verdict", result.verdict or "")
    if result.error:
        table.add_row("error", f"[red]{result.error}[/]")
    table.add_row("journal", f"faultplane journal show {result.run_id}")
    console.print(table)
