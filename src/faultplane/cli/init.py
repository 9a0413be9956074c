"""`faultplane init`: scaffold a project, or convert a Chaos Toolkit experiment (`--from-ctk`).
Logic lives in faultplane.services.scaffold."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from faultplane.cli.term import Console
from faultplane.core.errors import ExperimentError

console = Console()
err_console = Console(stderr=True)


def init(
    directory: Annotated[Path, typer.Argument(help="project directory")] = Path("."),
    from_ctk: Annotated[
        Path | None,
        typer.Option("--from-ctk", help="convert this Chaos Toolkit experiment instead of scaffolding"),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="with --from-ctk: write here (default: print to stdout)"),
    ] = None,
    force: Annotated[bool, typer.Option(help="replace an existing policy and first experiment")] = False,
) -> None:
    """Start a project: policy with a lab inventory, a first experiment, the coding-agent hook, chaos rules."""
    from faultplane.services.scaffold import convert_ctk, init_project

    try:
        if from_ctk is not None:
            from faultplane.core.formats import dumps

            converted = convert_ctk(from_ctk)
            text = dumps(converted.experiment, "yaml")
            if output is None:
                typer.echo(text, nl=False)
            else:
                if output.exists() and not force:
                    err_console.print(
                        f"[red]--output: {output} exists[/]; fix: choose another path or --force"
                    )
                    raise typer.Exit(2)
                output.write_text(text, encoding="utf-8")
            err_console.print(f"[bold]converted[/] {from_ctk}" + (f" -> {output}" if output else "") + ":")
            for note in converted.notes:
                err_console.print(f"  + {note}", highlight=False, markup=False)
            err_console.print(
                f"next: faultplane validate {output or '<the file>'}", highlight=False, markup=False
            )
            return
        written = init_project(directory, force=force)
    except ExperimentError as exc:
        for issue in exc.issues:
            err_console.print(f"[red]{issue.field}: {issue.message}[/]; fix: {issue.fix}", highlight=False)
        raise typer.Exit(2) from None
    except OSError as exc:
        err_console.print(f"[red]{exc.filename or directory}: {exc.strerror or exc}[/]", highlight=False)
        raise typer.Exit(2) from None
    for w in written:
        mark = {"created": "[green]created[/]", "updated": "[yellow]updated[/]", "kept": "[dim]kept[/]"}[
            w.action
        ]
        shown = w.path.relative_to(directory) if w.path.is_relative_to(directory) else w.path
        console.print(f"{mark} {shown}", highlight=False)
        console.print(f"    {w.what}", style="dim", highlight=False, markup=False)
    console.print("next:", style="bold")
    for step in (
        "python -m faultplane.examples.demo_service --port 8080 &",
        "faultplane validate experiments/first-experiment.yaml",
        "faultplane run experiments/first-experiment.yaml",
    ):
        console.print(f"  {step}", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    app.command()(init)
