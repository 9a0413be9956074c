"""Core commands: validate, run, journal, runs, schema, experiments, abort, demo."""

from __future__ import annotations

import enum
import json
import os
import re
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from faultplane.cli.options import Command, FormatOpt, JsonOpt, QuietOpt, StoreOpt, chosen
from faultplane.cli.progress import JsonlEvents, RunProgress, print_summary
from faultplane.cli.term import Console, Table, print_issues, timestamp

# Engine, store and formats are imported inside the commands that use them: `faultplane --help` and the
# commands that need none of them must not pay for pydantic, DuckDB and anyio at start-up.
if TYPE_CHECKING:
    from faultplane.core.formats import ExperimentError
    from faultplane.core.store import Store
    from faultplane.services.journal_import import ImportResult

console = Console()
err_console = Console(stderr=True)

VarOpt = Annotated[list[str] | None, typer.Option("--var", help="name=value; overrides configuration")]
VarFileOpt = Annotated[
    list[Path] | None, typer.Option("--var-file", help=".json/.yaml/.env file of variables (repeatable)")
]
PolicyOpt = Annotated[
    Path | None, typer.Option("--policy", help="policy file (default: ./faultplane.policy.yaml)")
]


# Choices as enums or Literals: typer rejects anything else with exit 2, naming the option and the choices.
class RollbackStrategy(enum.StrEnum):
    default = "default"
    always = "always"
    never = "never"
    deviated = "deviated"


class HypothesisStrategy(enum.StrEnum):
    default = "default"
    before = "before-method-only"
    after = "after-method-only"
    during = "during-method-only"
    continuously = "continuously"
    continously = "continously"  # Chaos Toolkit's older spelling, still accepted by `chaos run`


class JournalFormat(enum.StrEnum):
    faultplane = "faultplane"
    ctk = "ctk"


RollbackOpt = Annotated[RollbackStrategy | None, typer.Option("--rollback-strategy", help="as `chaos run`")]
HypothesisOpt = Annotated[
    HypothesisStrategy | None,
    typer.Option(
        "--hypothesis-strategy",
        metavar="<strategy>",  # the choices, listed whole, would not fit an 80-column terminal
        help="as `chaos run`: default, before-method-only, after-method-only, during-method-only, continuously",
    ),
]
FrequencyOpt = Annotated[
    float | None,
    typer.Option("--hypothesis-frequency", min=0.001, help="seconds between checks (during/continuously)"),
]
FailFastOpt = Annotated[
    bool, typer.Option("--fail-fast", help="a steady state refuted during the method ends it")
]
CtkCompatOpt = Annotated[
    bool,
    typer.Option(
        "--ctk-compat", help="Chaos Toolkit's outcomes where Faultplane differs (docs/chaostoolkit.md)"
    ),
]


class DryMode(enum.StrEnum):
    probes = "probes"
    actions = "actions"
    activities = "activities"
    pause = "pause"


DryOpt = Annotated[
    DryMode | None,
    typer.Option(
        "--dry",
        help="as `chaos run --dry`: probes, actions or activities succeed without running; pause skips pauses",
    ),
]
SettingsOpt = Annotated[
    Path | None,
    typer.Option(
        "--settings",
        help="Chaos Toolkit settings file whose `controls:` apply to the run (default ~/.chaostoolkit/settings.yaml)",
    ),
]
ControlFileOpt = Annotated[
    list[Path] | None,
    typer.Option("--control-file", help="YAML/JSON file of global Chaos Toolkit controls (repeatable)"),
]


def _runtime(
    rollback: RollbackStrategy | None,
    hypothesis: HypothesisStrategy | None,
    frequency: float | None,
    fail_fast: bool,
    dry: DryMode | None = None,
) -> dict[str, Any]:
    """The strategy flags as an override of the experiment's `runtime` block (flags win, as in `chaos run`)."""
    out: dict[str, Any] = {"dry": dry.value} if dry is not None else {}
    if rollback is not None:
        out["rollbacks"] = {"strategy": rollback.value}
    hypo: dict[str, Any] = {}
    if hypothesis is not None:
        hypo["strategy"] = hypothesis.value
    if frequency is not None:
        hypo["frequency"] = frequency
    if fail_fast:
        hypo["fail_fast"] = True
    if hypo:
        out["hypothesis"] = hypo
    return out


class EventsFormat(enum.StrEnum):
    jsonl = "jsonl"


TableFormat = Literal["table", "json", "toon"]


def _use_store(store: str | None, *, read: bool = True) -> Store:
    from faultplane.cli.stores import open_cli_store

    st = open_cli_store(store, read=read)
    if store is not None:  # the engine's own store lookups (leases, queue) see the same store
        os.environ["FAULTPLANE_STORE"] = str(store)
    return st


def _var_names(var: list[str] | None) -> list[str]:
    from faultplane.core.config import parse_var

    return [parse_var(item)[0] for item in var or []]


def _variables(var: list[str] | None, var_file: list[Path] | Path | None) -> dict[str, Any]:
    from faultplane.core.config import Variables, load_var_file, parse_var

    files = [var_file] if isinstance(var_file, Path) else var_file or []
    values = Variables()
    for f in files:  # later files override earlier ones, and --var overrides them all
        loaded = load_var_file(f)
        if f.suffix == ".env":
            # as `chaos run` does: a .env file sets environment variables, which `type: env` entries read
            os.environ.update({k: str(v) for k, v in loaded.items()})
        values.merge(loaded)
    for item in var or []:
        k, v = parse_var(item)
        values[k] = v
    return values


def _global_controls(settings: Path | None, control_files: list[Path] | None) -> Any:
    """Chaos Toolkit's global controls: its settings file's `controls:` (the default file only when it is
    there) and `--control-file` files, as `chaos run` loads them."""
    from faultplane.engine.controls import load_global_controls

    return load_global_controls(settings, control_files or [], default_settings=True)


def _experiment_options(
    var: list[str] | None,
    var_file: list[Path] | None,
    policy: Path | None,
    runtime: dict[str, Any],
    ctk_compat: bool,
    settings: Path | None,
    control_file: list[Path] | None,
) -> dict[str, Any]:
    """The keyword arguments `validate_experiment` and `run_experiment` both take, from the options `validate`
    and `run` share, so that a run is checked exactly as `validate` checks it. Raises ExperimentError for
    unusable variables or controls."""
    return {
        "variables": _variables(var, var_file),
        "policy_path": policy,
        "runtime": runtime,
        "ctk_compat": ctk_compat or None,
        "strict_variables": _var_names(var),
        "global_controls": _global_controls(settings, control_file),
    }


def _print_issues(exc: ExperimentError) -> None:
    print_issues(exc, "invalid experiment")


def _print_warnings(warnings: list[Any]) -> None:
    for w in warnings:
        err_console.print(f"  [yellow]![/] [bold]{w.field}[/]: {w.message}\n      {w.fix}", highlight=False)


def validate(
    experiment: Annotated[str, typer.Argument(help="file path or listed experiment name")],
    var: VarOpt = None,
    var_file: VarFileOpt = None,
    policy: PolicyOpt = None,
    fmt: Annotated[Literal["text", "json"], FormatOpt] = "text",
    as_json: JsonOpt = False,
    rollback_strategy: RollbackOpt = None,
    hypothesis_strategy: HypothesisOpt = None,
    hypothesis_frequency: FrequencyOpt = None,
    fail_fast: FailFastOpt = False,
    ctk_compat: CtkCompatOpt = False,
    settings: SettingsOpt = None,
    control_file: ControlFileOpt = None,
) -> None:
    """Validate an experiment (schema, variables, policy) without running anything. Exit 0 valid, 2 invalid."""
    from faultplane.core.formats import ExperimentError

    output = chosen(fmt, as_json)
    from faultplane.services.experiments import validate_experiment

    runtime = _runtime(rollback_strategy, hypothesis_strategy, hypothesis_frequency, fail_fast)
    try:
        options = _experiment_options(var, var_file, policy, runtime, ctk_compat, settings, control_file)
        report = validate_experiment(experiment, **options)
    except ExperimentError as exc:  # unusable variables, controls or policy file: nothing could be judged
        _print_issues(exc)
        raise typer.Exit(2) from None
    if output == "json":
        typer.echo(report.model_dump_json(indent=2))
    elif report.valid:
        console.print(f"[green]✓ valid[/]: {report.title}")
    else:
        _print_issues(ExperimentError(report.errors))
    if output != "json":
        _print_warnings(report.warnings)
    raise typer.Exit(0 if report.valid else 2)


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
    fmt: Annotated[Literal["text", "json", "toon"], FormatOpt] = "text",
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    events: Annotated[
        EventsFormat | None,
        typer.Option("--events", help="stream every event on stdout, one JSON object per line, for tools"),
    ] = None,
    rollback_strategy: RollbackOpt = None,
    hypothesis_strategy: HypothesisOpt = None,
    hypothesis_frequency: FrequencyOpt = None,
    fail_fast: FailFastOpt = False,
    ctk_compat: CtkCompatOpt = False,
    settings: SettingsOpt = None,
    control_file: ControlFileOpt = None,
    dry: DryOpt = None,
    journal_format: Annotated[
        JournalFormat, typer.Option("--journal-format", help="format of --journal: faultplane or ctk")
    ] = JournalFormat.faultplane,
) -> None:
    """Run an experiment. Exit 0 steady state held, 1 deviated/failed, 2 invalid, 3 aborted/refused, 130 interrupted."""
    import anyio

    from faultplane.core.formats import ExperimentError
    from faultplane.services.experiments import run_experiment

    output = chosen(fmt, as_json)
    from faultplane.services.runs import get_journal, recover

    st = _use_store(store, read=False)
    from faultplane.core.store import write_queue_after_exit

    write_queue_after_exit()
    for rec in recover(st):
        err_console.print(
            f"[yellow]found interrupted run {rec['run_id']} ({rec['title']}, started "
            f"{timestamp(rec['started'])}): marked interrupted[/]"
        )
    progress: RunProgress | JsonlEvents = (
        JsonlEvents() if events is not None else RunProgress(quiet or output != "text")
    )
    runtime = _runtime(rollback_strategy, hypothesis_strategy, hypothesis_frequency, fail_fast, dry)
    try:
        options = _experiment_options(var, var_file, policy, runtime, ctk_compat, settings, control_file)
        options.update(dry_run=dry_run, store=st, approval_token=approval, handle_signals=True)

        async def go() -> Any:
            if progress.quiet:
                return await run_experiment(
                    experiment, on_event=progress if events is not None else None, **options
                )
            assert isinstance(progress, RunProgress)  # the JSON-lines stream is quiet: handled above
            with console.status("starting …") as status:
                progress.status = status
                return await run_experiment(experiment, on_event=progress, **options)

        result = anyio.run(go)
    except ExperimentError as exc:
        _print_issues(exc)
        raise typer.Exit(2) from None
    if journal is not None and journal_format == JournalFormat.ctk:
        from faultplane.services.ctk import write_ctk_journal
        from faultplane.services.runs import load_journal

        write_ctk_journal(load_journal(result.run_id, st), journal)
    elif journal is not None:
        journal.write_text(get_journal(result.run_id, "json", st), encoding="utf-8")
    if events is not None:
        progress({"event": "result", "result": result.model_dump(mode="json")})
    elif output == "json":
        typer.echo(result.model_dump_json(indent=2))
    elif output == "toon":
        from faultplane.services.experiments import journal_toon

        console.print(journal_toon(result.run_id, st), markup=False, highlight=False)
    else:
        print_summary(result)
        for w in result.warnings:
            err_console.print(f"  [yellow]![/] {w}", highlight=False, markup=False)
    _exit(result.exit_code)


def _exit(code: int) -> None:
    """Exit now. An activity abandoned on timeout or Ctrl-C may still hold a worker thread (a stuck user
    function); the journal is written and rollbacks ran, so the process must not wait for that thread."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise typer.Exit(code)


journal_app = typer.Typer(help="Read, export and import run journals.", no_args_is_help=True)
runs_app = typer.Typer(help="List and manage runs.", no_args_is_help=True)
experiments_app = typer.Typer(
    help="Named experiments (./experiments, $FAULTPLANE_EXPERIMENTS, bundled).", no_args_is_help=True
)


def _stored_journal(run_id: str, store: str | None) -> dict[str, Any]:
    """The journal of `run_id` (a unique prefix will do), or exit 2 with why none is found."""
    from faultplane.services.runs import load_journal

    try:
        return load_journal(run_id, _use_store(store))
    except LookupError as exc:
        err_console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None


@journal_app.command("show")
def journal_show(
    run_id: str,
    fmt: Annotated[TableFormat, FormatOpt] = "table",
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Show one run's journal."""
    fmt = chosen(fmt, as_json)
    from faultplane.core.formats import dumps
    from faultplane.services.experiments import compact_journal

    j = _stored_journal(run_id, store)
    if fmt != "table":
        print(dumps(j, fmt))
        return
    c = compact_journal(j)
    console.print(
        f"[bold]{c['title']}[/]  run {c['run_id']}  status [bold]{c['status']}[/]  "
        f"{c['duration_seconds']}s  seed {c['seed']}"
    )
    console.print(c["verdict"] or "")
    table = Table("at s", "section", "activity", "type", "status", "seconds", "error")
    for a in c["activities"]:
        at = "" if a.get("at_s") is None else f"{a['at_s']:.3f}"
        table.add_row(at, a["section"], a["name"], a["type"], a["status"], f"{a['seconds']:.3f}", a["error"])
    console.print(table)
    if c["gate_breach"]:
        console.print(f"[red]gate breach[/]: {c['gate_breach']}")


@journal_app.command("export")
def journal_export(
    run_id: str,
    fmt: Annotated[JournalFormat, typer.Option("--format", "-f", help="journal format")] = JournalFormat.ctk,
    out: Annotated[
        Path | None, typer.Option("--output", "-o", help="file to write (default: stdout)")
    ] = None,
    store: StoreOpt = None,
) -> None:
    """Export a stored run's journal, in Chaos Toolkit's format by default (for `chaos report`)."""
    import json as _json

    from faultplane.services.ctk import to_ctk_journal

    j = _stored_journal(run_id, store)
    data = to_ctk_journal(j) if fmt == JournalFormat.ctk else j
    text = _json.dumps(data, indent=2, ensure_ascii=False, default=str)
    if out is None:
        print(text)
    else:
        out.write_text(text + "\n", encoding="utf-8")


@journal_app.command("import")
def journal_import(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="journal files (.json: one journal or a list; .ndjson/.jsonl: one per line), folders of them, "
            "or - for NDJSON on standard input",
            show_default=False,
        ),
    ],
    store: StoreOpt = None,
    fmt: Annotated[Literal["text", "json"], FormatOpt] = "text",
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Import journals (from other machines, CI, a backup) into the store, replacing earlier rows of the same runs.
    On DuckDB, NDJSON is read by DuckDB itself (tens of thousands of journals a second). Exit 0, 2 bad input."""
    import tempfile

    from faultplane.services.evidence import EvidenceError
    from faultplane.services.journal_import import journal_files, spool_stdin

    output = chosen(fmt, as_json)
    with tempfile.TemporaryDirectory(prefix="faultplane-stdin-") as scratch:
        try:
            if [str(p) for p in paths].count("-") > 1:
                raise EvidenceError("-: standard input named twice; fix: name - once")
            named = [spool_stdin(sys.stdin.buffer, Path(scratch)) if str(p) == "-" else p for p in paths]
            # the files before the store: a typo in a path is told without creating a store
            result = _import_files(journal_files(named), store, show=output == "text" and not quiet)
        except EvidenceError as exc:
            # what came on standard input is `-` to the user, not the scratch file it was copied to
            message = re.sub(re.escape(scratch) + r"/stdin\.ndjson(\.gz)?", "-", str(exc))
            err_console.print(f"[red]error:[/] {message}", highlight=False)
            raise typer.Exit(2) from None
    if output == "json":
        typer.echo(json.dumps(result.to_dict()))
    elif not quiet:
        plural = "" if result.journals == 1 else "s"
        # one line, never folded at the terminal's width: the store's path stays whole for a reader and grep
        typer.echo(
            f"imported {result.journals:,} journal{plural} from {result.files:,} file(s) into {result.store} "
            f"in {result.seconds:.2f} s ({result.per_second:,.0f} journals/s)"
        )


def _import_files(files: list[Path], store: str | None, *, show: bool) -> ImportResult:
    """The import with a progress bar when `show` and stderr is a terminal (in a log or a pipe the bar would
    leave its last frame as a stray line before the result); its ImportResult."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    from faultplane.services.journal_import import import_journal_files

    st = _use_store(store, read=False)
    progress = Progress(
        TextColumn("[bold]import[/] {task.fields[journals]:,} journals"),
        BarColumn(),
        DownloadColumn(),
        TimeElapsedColumn(),
        console=err_console.real(),  # type: ignore[attr-defined]  # rich needs the console itself, not its lazy stand-in
        disable=not (show and err_console.is_terminal),
    )
    task = progress.add_task("import", total=sum(f.stat().st_size for f in files), journals=0)

    def advance(journals: int, size: int) -> None:
        done = progress.tasks[0].fields["journals"] + journals
        progress.update(task, advance=size, journals=done)

    with progress:
        return import_journal_files(st, files, on_progress=advance)


@runs_app.command("list")
def runs_list(
    experiment: Annotated[str | None, typer.Option("--experiment", "-e")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="runs shown at most")] = 20,
    fmt: Annotated[TableFormat, FormatOpt] = "table",
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """List recent runs, newest first."""
    fmt = chosen(fmt, as_json)
    from faultplane.core.formats import dumps
    from faultplane.services.runs import list_runs, recover

    st = _use_store(store)
    recover(st)
    rows = list_runs(st, experiment, limit)
    if fmt != "table":
        print(dumps(rows, fmt))
        return
    table = Table("run", "experiment", "status", "before", "after", "started", "seconds")
    table.columns[0].min_width = 16  # a run id is only useful whole
    for r in rows:
        table.add_row(
            r["run_id"],
            r["experiment_title"],
            r["status"],
            str(r["steady_state_before"]),
            str(r["steady_state_after"]),
            timestamp(r["started_at"]),
            f"{r['duration_s']:.2f}" if r["duration_s"] is not None else "",
        )
    console.print(table)


@experiments_app.command("list")
def experiments_list(as_json: JsonOpt = False) -> None:
    """List the experiments that can be run by name."""
    from faultplane.services.experiments import list_experiments

    if as_json:
        rows = [
            {"name": e.name, "title": e.title, "tags": list(e.tags), "path": str(e.path)}
            for e in list_experiments()
        ]
        print(json.dumps(rows, indent=2))
        return
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
    """Stop running experiments (they roll back) and, with --all, revert every active fault.

    Exit 0 stopped, 1 no running experiment has that id, 2 the id prefix names several of them."""
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
    from faultplane.engine.journal import live_runs
    from faultplane.engine.lifecycle import active_runs

    assert run_id is not None
    running = {*active_runs(), *(j.run_id for j in live_runs())}
    target = running_match(run_id, running)
    stopped = abort_runs(target, st)
    console.print(f"stopped: {', '.join(stopped) if stopped else 'no running experiment matched'}")
    if not stopped:
        raise typer.Exit(1)


def running_match(prefix: str, running: set[str]) -> str:
    """The one running experiment a run-id prefix names; a prefix naming several, or none, stops nothing
    (an abort of "3" must not stop every run whose id starts with 3)."""
    matches = sorted(r for r in running if r.startswith(prefix))
    if len(matches) > 1:
        err_console.print(
            f"run id {prefix!r} is ambiguous: it starts {len(matches)} running experiments "
            f"({', '.join(matches)}); fix: give more characters of the run id",
            highlight=False,
        )
        raise typer.Exit(2)
    if not matches:
        err_console.print(
            f"no running experiment has a run id starting {prefix!r}; `faultplane runs list` shows the runs",
            highlight=False,
        )
        raise typer.Exit(1)
    return matches[0]


def demo(
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="port of the demo service (0 = any free port)")
    ] = 0,
) -> None:
    """Start a small HTTP service on loopback, run the bundled latency experiment against it, stop it."""
    from faultplane.examples.demo import run_demo

    raise typer.Exit(run_demo(console, port))


def register(app: typer.Typer) -> None:
    from faultplane.cli.guard import approve

    app.command(
        "approve", help="Approve one exact version of an experiment (alias of `guard approve`).", cls=Command
    )(approve)
    app.command(cls=Command)(validate)
    app.command(cls=Command)(run)
    app.command()(schema)
    app.command()(abort)
    app.command()(demo)
    app.add_typer(journal_app, name="journal")
    app.add_typer(runs_app, name="runs")
    app.add_typer(experiments_app, name="experiments")
