"""Core commands: validate, run, journal, runs, schema, experiments, abort, demo."""

from __future__ import annotations

import enum
import json
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

# Engine, store and formats are imported inside the commands that use them: `faultplane --help` and the
# commands that need none of them must not pay for pydantic, DuckDB and anyio at start-up.
if TYPE_CHECKING:
    from faultplane.core.formats import ExperimentError
    from faultplane.core.store import Store

console = Console()
err_console = Console(stderr=True)

StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="DuckDB file, clickhouse://user:pass@host:8123/db or chdb:///dir "
        "(default: $FAULTPLANE_STORE or the XDG data dir)",
    ),
]
VarOpt = Annotated[list[str] | None, typer.Option("--var", help="name=value; overrides configuration")]
VarFileOpt = Annotated[Path | None, typer.Option("--var-file", help=".json/.yaml/.env file of variables")]
PolicyOpt = Annotated[
    Path | None, typer.Option("--policy", help="policy file (default: ./faultplane.policy.yaml)")
]


# Choices as enums: typer rejects anything else with exit 2, naming the option and the allowed values.
class RunOutput(enum.StrEnum):
    text = "text"
    json = "json"
    toon = "toon"


class ValidateOutput(enum.StrEnum):
    text = "text"
    json = "json"


class TableFormat(enum.StrEnum):
    table = "table"
    json = "json"
    toon = "toon"


def _use_store(store: str | None) -> Store:
    from faultplane.core.store import open_store

    if store is not None:
        os.environ["FAULTPLANE_STORE"] = str(store)
    return open_store()


def _variables(var: list[str] | None, var_file: Path | None) -> dict[str, Any]:
    from faultplane.core.config import load_var_file, parse_var

    values: dict[str, Any] = load_var_file(var_file) if var_file else {}
    for item in var or []:
        k, v = parse_var(item)
        values[k] = v
    return values


def _print_issues(exc: ExperimentError) -> None:
    err_console.print(f"[bold red]invalid experiment[/] — {len(exc.issues)} problem(s):")
    for issue in exc.issues:
        err_console.print(f"  [red]✗[/] [bold]{issue.field}[/]: {issue.message}\n      fix: {issue.fix}")


def validate(
    experiment: Annotated[str, typer.Argument(help="file path or listed experiment name")],
    var: VarOpt = None,
    var_file: VarFileOpt = None,
    policy: PolicyOpt = None,
    output: Annotated[ValidateOutput, typer.Option("--output", "-o")] = ValidateOutput.text,
) -> None:
    """Validate an experiment (schema, variables, policy) without running anything. Exit 0 valid, 2 invalid."""
    from faultplane.core.formats import ExperimentError
    from faultplane.services.experiments import validate_experiment

    try:
        variables = _variables(var, var_file)
    except ExperimentError as exc:
        _print_issues(exc)
        raise typer.Exit(2) from None
    report = validate_experiment(experiment, variables=variables, policy_path=policy)
    if output == "json":
        console.print_json(report.model_dump_json())
    elif report.valid:
        console.print(f"[green]✓ valid[/]: {report.title}")
    else:
        _print_issues(ExperimentError(report.errors))
    raise typer.Exit(0 if report.valid else 2)


class _Progress:
    """Live progress of a run: phases, activities, gate samples."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.status: Any = None

    def __call__(self, event: dict[str, Any]) -> None:
        if self.quiet:
            return
        kind = event.get("event")
        if kind == "phase":
            console.print(f"[bold cyan]▶ {event['phase']}[/]")
        elif kind == "activity_start" and self.status is not None:
            self.status.update(f"{event['section']}: {event['name']} …")
        elif kind == "activity":
            run = event["run"]
            mark = {"succeeded": "[green]✓[/]", "skipped": "[dim]-[/]"}.get(run["status"], "[red]✗[/]")
            err = f"  [red]{run['exception']}[/]" if run.get("exception") else ""
            console.print(
                f"  {mark} {event['section']:<18} {run['activity'].get('name')}"
                f"  [dim]{run['duration']:.3f}s[/]{err}"
            )
        elif kind == "hypothesis":
            met = event["state"]["steady_state_met"]
            label = {True: "[green]met[/]", False: "[red]NOT met[/]", None: "[dim]not checked[/]"}[met]
            console.print(f"  steady state ({event['when']}): {label}")
        elif kind == "gate_sample":
            s = event["sample"]
            if s.get("breaching"):
                console.print(f"  [yellow]gate {s.get('gate')}: {s.get('sli')}={s.get('value')} breaching[/]")
        elif kind == "gate_breach":
            console.print(f"  [bold red]gate breached[/]: {event['breach']}")
        elif kind == "revert":
            r = event["revert"]
            console.print(f"  {'[green]↺[/]' if r['ok'] else '[red]✗ revert failed[/]'} {r['label']}")


def run(
    experiment: Annotated[str, typer.Argument(help="file path or listed experiment name")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="walk all phases without touching the system")
    ] = False,
    var: VarOpt = None,
    var_file: VarFileOpt = None,
    store: StoreOpt = None,
    policy: PolicyOpt = None,
    approval: Annotated[str | None, typer.Option("--approval", envvar="FAULTPLANE_APPROVAL")] = None,
    journal: Annotated[
        Path | None, typer.Option("--journal", help="also write the journal JSON here")
    ] = None,
    output: Annotated[RunOutput, typer.Option("--output", "-o")] = RunOutput.text,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    """Run an experiment. Exit 0 steady state held, 1 deviated/failed, 2 invalid, 3 aborted/refused, 130 interrupted."""
    import anyio

    from faultplane.core.formats import ExperimentError
    from faultplane.services.experiments import run_experiment
    from faultplane.services.runs import get_journal, recover

    st = _use_store(store)
    for rec in recover(st):
        err_console.print(
            f"[yellow]found interrupted run {rec['run_id']} ({rec['title']}, started "
            f"{rec['started']}): marked interrupted[/]"
        )
    progress = _Progress(quiet or output != "text")
    try:
        variables = _variables(var, var_file)

        async def go() -> Any:
            if progress.quiet:
                return await run_experiment(
                    experiment,
                    dry_run=dry_run,
                    variables=variables,
                    store=st,
                    policy_path=policy,
                    approval_token=approval,
                    handle_signals=True,
                )
            with console.status("starting …") as status:
                progress.status = status
                return await run_experiment(
                    experiment,
                    dry_run=dry_run,
                    variables=variables,
                    store=st,
                    on_event=progress,
                    policy_path=policy,
                    approval_token=approval,
                    handle_signals=True,
                )

        result = anyio.run(go)
    except ExperimentError as exc:
        _print_issues(exc)
        raise typer.Exit(2) from None
    if journal is not None:
        journal.write_text(get_journal(result.run_id, "json", st), encoding="utf-8")
    if output == "json":
        console.print_json(result.model_dump_json())
    elif output == "toon":
        from faultplane.services.experiments import journal_toon

        console.print(journal_toon(result.run_id, st), markup=False, highlight=False)
    else:
        _print_summary(result)
    _exit(result.exit_code)


def _exit(code: int) -> None:
    """Exit now. An activity abandoned on timeout or Ctrl-C may still hold a worker thread (a stuck user
    function); the journal is written and rollbacks ran, so the process must not wait for that thread."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise typer.Exit(code)


def _print_summary(result: Any) -> None:
    colour = {
        "completed": "green",
        "deviated": "yellow",
        "failed": "red",
        "aborted": "red",
        "refused": "red",
        "interrupted": "yellow",
    }.get(result.status, "white")
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


journal_app = typer.Typer(help="Read run journals.", no_args_is_help=True)
runs_app = typer.Typer(help="List and manage runs.", no_args_is_help=True)
experiments_app = typer.Typer(
    help="Named experiments (./experiments, $FAULTPLANE_EXPERIMENTS, bundled).", no_args_is_help=True
)


@journal_app.command("show")
def journal_show(
    run_id: str,
    fmt: Annotated[TableFormat, typer.Option("--format", "-f")] = TableFormat.table,
    store: StoreOpt = None,
) -> None:
    """Show one run's journal."""
    from faultplane.core.formats import dumps
    from faultplane.services.experiments import compact_journal
    from faultplane.services.runs import load_journal

    st = _use_store(store)
    try:
        j = load_journal(run_id, st)
    except LookupError as exc:
        err_console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    if fmt != TableFormat.table:
        print(dumps(j, "json" if fmt == TableFormat.json else "toon"))
        return
    c = compact_journal(j)
    console.print(
        f"[bold]{c['title']}[/]  run {c['run_id']}  status [bold]{c['status']}[/]  "
        f"{c['duration_seconds']}s  seed {c['seed']}"
    )
    console.print(c["verdict"] or "")
    table = Table("section", "activity", "type", "status", "seconds", "error")
    for a in c["activities"]:
        table.add_row(a["section"], a["name"], a["type"], a["status"], f"{a['seconds']:.3f}", a["error"])
    console.print(table)
    if c["gate_breach"]:
        console.print(f"[red]gate breach[/]: {c['gate_breach']}")


@runs_app.command("list")
def runs_list(
    experiment: Annotated[str | None, typer.Option("--experiment", "-e")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n")] = 20,
    fmt: Annotated[TableFormat, typer.Option("--format", "-f")] = TableFormat.table,
    store: StoreOpt = None,
) -> None:
    """List recent runs, newest first."""
    from faultplane.core.formats import dumps
    from faultplane.services.runs import list_runs, recover

    st = _use_store(store)
    recover(st)
    rows = list_runs(st, experiment, limit)
    if fmt != TableFormat.table:
        print(dumps(rows, "json" if fmt == TableFormat.json else "toon"))
        return
    table = Table("run", "experiment", "status", "before", "after", "started", "seconds")
    for r in rows:
        table.add_row(
            r["run_id"],
            r["experiment_title"],
            r["status"],
            str(r["steady_state_before"]),
            str(r["steady_state_after"]),
            str(r["started_at"])[:19],
            f"{r['duration_s']:.2f}" if r["duration_s"] is not None else "",
        )
    console.print(table)


@experiments_app.command("list")
def experiments_list() -> None:
    """List the experiments that can be run by name."""
    from faultplane.services.experiments import list_experiments

    table = Table("name", "title", "tags", "path")
    for e in list_experiments():
        table.add_row(e.name, e.title or "", ", ".join(e.tags), e.path)
    console.print(table)


def schema(
    which: Annotated[str, typer.Argument(help="experiment | journal")] = "experiment",
) -> None:
    """Print the JSON Schema of experiments or journals."""
    from faultplane.services.experiments import experiment_schema, journal_schema

    if which not in ("experiment", "journal"):
        err_console.print("[red]which must be `experiment` or `journal`[/]")
        raise typer.Exit(2)
    print(json.dumps(experiment_schema() if which == "experiment" else journal_schema(), indent=2))


def abort(
    run_id: Annotated[str | None, typer.Argument(help="run to stop (omit with --all)")] = None,
    all_: Annotated[bool, typer.Option("--all", help="kill switch: every run, every active fault")] = False,
    store: StoreOpt = None,
) -> None:
    """Stop running experiments (they roll back) and, with --all, revert every active fault."""
    from faultplane.services.kill_switch import kill_all
    from faultplane.services.runs import abort_runs

    st = _use_store(store)
    if not all_ and not run_id:
        err_console.print("[red]give a RUN_ID, or --all to stop everything[/]")
        raise typer.Exit(2)
    if all_:
        report = kill_all(st)
        for line in report:
            console.print(line)
        return
    stopped = abort_runs(run_id, st)
    console.print(f"stopped: {', '.join(stopped) if stopped else 'no running experiment matched'}")


def demo(
    port: Annotated[int, typer.Option(help="port of the demo service (0 = any free port)")] = 0,
) -> None:
    """Start a small HTTP service on loopback, run the bundled latency experiment against it, stop it."""
    from faultplane.examples.demo import run_demo

    raise typer.Exit(run_demo(console, port))


def register(app: typer.Typer) -> None:
    from faultplane.cli.guard import approve

    app.command("approve", help="Approve one exact version of an experiment (alias of `guard approve`).")(
        approve
    )
    app.command()(validate)
    app.command()(run)
    app.command()(schema)
    app.command()(abort)
    app.command()(demo)
    app.add_typer(journal_app, name="journal")
    app.add_typer(runs_app, name="runs")
    app.add_typer(experiments_app, name="experiments")
