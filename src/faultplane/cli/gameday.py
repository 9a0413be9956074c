"""`faultplane gameday`: run a GameDay file, analyse a stored one. Logic lives in faultplane.services.gameday."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from faultplane.cli.options import Command, FormatOpt, JsonOpt, QuietOpt, StoreOpt, chosen, variables
from faultplane.cli.term import Console, Table, print_issues, timestamp
from faultplane.core.errors import ExperimentError

app = typer.Typer(
    help="GameDays: campaigns of experiments in lanes (ordered or parallel), under one shared load, scored "
    "by pass rate, recovery, load impact and compliance coverage (formula: docs/gamedays.md).\n\n"
    "faultplane gameday run orders.yaml --var service_url=http://127.0.0.1:8080; "
    "faultplane gameday analyze (the newest); faultplane gameday list.",
    no_args_is_help=True,
)
console = Console()
err_console = Console(stderr=True)

VarOpt = Annotated[list[str] | None, typer.Option("--var", help="name=value for every experiment")]
VarFileOpt = Annotated[Path | None, typer.Option("--var-file", help=".json/.yaml/.env file of variables")]
OutputOpt = Annotated[Literal["text", "json", "toon"], FormatOpt]


@contextlib.contextmanager
def bad_input_exits(what: str) -> Iterator[None]:
    """Bad input met inside ends the command with exit 2 and what is wrong, never a traceback: an
    ExperimentError's issues under `what`, or a ValueError's own message (a variable that does not parse,
    a broken policy file: the message names it)."""
    try:
        yield
    except ExperimentError as exc:
        print_issues(exc, what)
        raise typer.Exit(2) from None
    except ValueError as exc:
        err_console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None


def emit(data: Any, output: str) -> bool:
    """Print `data` as json/toon and return True, or return False for the text rendering."""
    if output not in ("text", "json", "toon"):
        err_console.print(f"[red]--format: {output!r} is not a format[/]; fix: use text, json or toon")
        raise typer.Exit(2)
    if output == "text":
        return False
    from faultplane.core.formats import dumps

    payload = data.model_dump(mode="json") if hasattr(data, "model_dump") else data
    typer.echo(json.dumps(payload, indent=2, default=str) if output == "json" else dumps(payload, "toon"))
    return True


def _store(path: str | None, *, read: bool = True) -> Any:
    from faultplane.cli.stores import open_cli_store

    return open_cli_store(path, read=read)


def _print_analysis(a: Any) -> None:
    score = f"{a.score:.1f}" if a.score is not None else "n/a"
    console.print(f"[bold]{a.name}[/] ({a.gameday_id}) — score [bold]{score}[/] grade [bold]{a.grade}[/]")
    comps = ", ".join(f"{k} {v:.0%}" if v is not None else f"{k} n/a" for k, v in a.components.items())
    console.print(f"components: {comps}; passed {a.passed}/{a.planned}")
    table = Table("lane[#]", "experiment", "recover s", "load err", "p99 ms")
    table.add_column("status", no_wrap=True)
    for r in a.runs:
        table.add_row(
            f"{r.lane}[{r.position}]",
            Path(r.experiment).name,
            f"{r.time_to_recover_s:.2f}" if r.time_to_recover_s is not None else "",
            f"{r.load_error_rate:.2%}" if r.load_error_rate is not None else "",
            f"{r.load_p99_ms:.0f}" if r.load_p99_ms is not None else "",
            r.status,
        )
    console.print(table)
    if a.baseline:
        console.print(
            f"baseline: error rate {a.baseline.get('error_rate') or 0:.2%}, "
            f"p99 {a.baseline.get('latency_p99') or 0:.0f} ms"
        )
    if a.compliance:
        console.print(
            f"compliance ({', '.join(a.compliance['frameworks'])}): {a.compliance['coverage']:.0%} covered; "
            f"gaps: {', '.join(a.compliance['gaps']) or 'none'}"
        )
    for f in a.findings:
        console.print(f"  • {f}")


@app.command(cls=Command)
def run(
    file: Annotated[
        Path,
        typer.Argument(help="GameDay YAML/JSON file: name, lanes, optional load and slo", show_default=False),
    ],
    var: VarOpt = None,
    var_file: VarFileOpt = None,
    policy: Annotated[
        Path | None, typer.Option("--policy", help="policy file (default: the one in force)")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="walk every run without touching anything")
    ] = False,
    store: StoreOpt = None,
    output: OutputOpt = "text",
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Run every lane of a GameDay; exit 0 when every planned run passed, 1 otherwise, 2 on bad input.

    Everything is checked before the first run (file, experiments, variables); every run then goes through the
    policy, its SLO gates and rollbacks like a single `faultplane run`. The GameDay and its runs are stored."""
    output = chosen(output, as_json)
    from faultplane.services.gameday import run_gameday

    if not file.is_file():
        err_console.print(f"[red]file: {file} does not exist[/]; fix: pass a GameDay YAML file")
        raise typer.Exit(2)
    quiet = quiet or output != "text"

    def progress(r: Any) -> None:
        if not quiet:
            console.print(f"  {r.lane}[{r.position}] {Path(r.experiment).name}: {r.status}")

    import anyio

    with bad_input_exits("invalid GameDay"):
        values = variables(var, var_file)
        analysis = anyio.run(
            lambda: run_gameday(
                file,
                variables=values,
                store=_store(store, read=False),
                policy_path=policy,
                dry_run=dry_run,
                on_run=progress,
            )
        )
    if not emit(analysis, output):
        _print_analysis(analysis)
    raise typer.Exit(0 if analysis.passed == analysis.planned else 1)


@app.command(cls=Command)
def analyze(
    gameday: Annotated[
        str | None, typer.Argument(help="GameDay id, id prefix or name (default: newest)")
    ] = None,
    store: StoreOpt = None,
    output: OutputOpt = "text",
    as_json: JsonOpt = False,
) -> None:
    """Score a stored GameDay again and list its findings and compliance coverage."""
    output = chosen(output, as_json)
    from faultplane.services.gameday import analyze_gameday

    try:
        analysis = analyze_gameday(gameday, _store(store))
    except LookupError as exc:
        err_console.print(f"[red]gameday: {exc}[/]")
        raise typer.Exit(2) from None
    if not emit(analysis, output):
        _print_analysis(analysis)


@app.command("list", cls=Command)
def list_(store: StoreOpt = None, output: OutputOpt = "text", as_json: JsonOpt = False) -> None:
    """GameDays recorded in the store, newest first."""
    output = chosen(output, as_json)
    from faultplane.services.gameday import list_gamedays

    rows = list_gamedays(_store(store))
    if emit({"gamedays": rows}, output):
        return
    table = Table("id", "name", "started", "score", "grade")
    for r in rows:
        table.add_row(
            r["gameday_id"],
            r["name"],
            timestamp(r["started_at"]),
            f"{r['score']:.1f}" if r["score"] is not None else "",
            r["grade"] or "",
        )
    console.print(table)


@app.command(cls=Command)
def templates(output: OutputOpt = "text", as_json: JsonOpt = False) -> None:
    """The GameDay templates Faultplane ships, with the compliance requirements each evidences."""
    output = chosen(output, as_json)
    from faultplane.services.gameday_templates import list_templates

    found = list_templates()
    rows = [
        {"name": t.name, "title": t.title, "requirements": t.requirements, "description": t.description}
        for t in found
    ]
    if emit({"templates": rows}, output):
        return
    table = Table("template", "gameday", "requirements")
    for t in found:
        table.add_row(t.name, t.title, ", ".join(t.requirements))
    console.print(table)
    console.print("copy one with: faultplane gameday new --template NAME [DIRECTORY]", highlight=False)


@app.command()
def new(
    template: Annotated[str, typer.Option("--template", "-t", help="a template name (`gameday templates`)")],
    directory: Annotated[
        Path | None, typer.Argument(help="where to write it (default: ./gameday-TEMPLATE)")
    ] = None,
    force: Annotated[bool, typer.Option(help="overwrite files of the same name")] = False,
) -> None:
    """Start a GameDay from a shipped template: the GameDay file and its experiments, ready to run."""
    from faultplane.services.gameday_templates import new_from_template

    try:
        written = new_from_template(template, directory, force=force)
    except (LookupError, FileExistsError) as exc:
        err_console.print(f"[red]{exc.args[0]}[/]", highlight=False)
        raise typer.Exit(2) from None
    for path in written:
        console.print(f"[green]created[/] {path}", highlight=False)
    console.print(
        f"next: faultplane gameday run {written[0].parent / 'gameday.yaml'}", highlight=False, markup=False
    )
    console.print("      (its header says which service to start and which --var to pass)", highlight=False)
