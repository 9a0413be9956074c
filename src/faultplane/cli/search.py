"""`faultplane search`: the barely-breaching fault parameters. Logic lives in faultplane.services.search."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from rich.console import Console
from rich.table import Table

from faultplane.cli.gameday import emit, print_issues, variables
from faultplane.core.formats import ExperimentError

console = Console()


def search(
    spec: Annotated[Path, typer.Argument(help="search spec YAML: experiment, parameters, objective, budget")],
    var: Annotated[list[str] | None, typer.Option("--var", help="name=value for the experiment")] = None,
    var_file: Annotated[Path | None, typer.Option("--var-file", help="file of variables")] = None,
    budget: Annotated[int | None, typer.Option("--budget", help="most trials (real runs)")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="sampler seed")] = None,
    sampler: Annotated[str | None, typer.Option("--sampler", help="nsga2 | tpe | random")] = None,
    store: Annotated[Path | None, typer.Option("--store", help="DuckDB store file")] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="text | json | toon")] = "text",
) -> None:
    """Search fault parameters for the combination that takes an SLO just past its bound.

    Exit 0 when a breaching configuration was found, 1 when none was within the budget, 3 when the policy
    refused a trial, 2 on bad input."""
    from faultplane.core.store import Store
    from faultplane.services.search import SearchSpec, load_search_spec, run_search

    if not spec.is_file():
        console.print(f"[red]spec: {spec} does not exist[/]; fix: pass a search spec YAML file")
        raise typer.Exit(2)
    quiet = output != "text"

    def progress(t: Any) -> None:
        if not quiet:
            mark = "BREACH" if t.breached else "holds"
            console.print(f"  trial {t.trial}: {t.params} -> {t.measured} {mark} ({t.run_status})")

    try:
        s = load_search_spec(spec)
        overrides = {
            k: v for k, v in (("budget", budget), ("seed", seed), ("sampler", sampler)) if v is not None
        }
        s = SearchSpec.model_validate(
            {**s.model_dump(), **overrides, "variables": {**s.variables, **variables(var, var_file)}}
        )
        result = anyio.run(lambda: run_search(s, store=Store(store) if store else None, on_trial=progress))
    except ExperimentError as exc:
        print_issues(exc, "invalid search")
        raise typer.Exit(2) from None
    except ValueError as exc:  # a pydantic error from the CLI overrides
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    if not emit(result, output):
        t = Table("trial", "params", "measured", "breached", "fitness", "run", title=result.objective)
        for tr in result.trials:
            t.add_row(
                str(tr.trial),
                str(tr.params),
                str(tr.measured),
                str(tr.breached),
                str(tr.fitness),
                tr.run_status,
            )
        console.print(t)
        console.print(f"[bold]{result.message}[/]")
        if result.boundary:
            console.print(
                f"boundary: holds at {result.boundary['holds']}, breaches at {result.boundary['breaches']}"
            )
        console.print(
            f"search {result.search_id} stored ({len(result.trials)} trials, {result.elapsed_s:.1f}s)"
        )
    raise typer.Exit(3 if result.status == "refused" else 0 if result.found_breach else 1)


def register(app: typer.Typer) -> None:
    app.command()(search)
