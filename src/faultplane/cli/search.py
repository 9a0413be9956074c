"""`faultplane search`: the barely-breaching fault parameters. Logic lives in faultplane.services.search."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from faultplane.cli.gameday import bad_input_exits, emit, variables
from faultplane.cli.options import Command, FormatOpt, JsonOpt, QuietOpt, StoreOpt, chosen
from faultplane.cli.term import Console, Table

console = Console()


def search(
    spec: Annotated[
        str,
        typer.Argument(
            help="search spec: a YAML/JSON file (experiment, parameters, objective, budget), or the name of a "
            "bundled one, e.g. search-payment",
            show_default=False,
        ),
    ],
    var: Annotated[list[str] | None, typer.Option("--var", help="name=value for the experiment")] = None,
    var_file: Annotated[Path | None, typer.Option("--var-file", help="file of variables")] = None,
    budget: Annotated[int | None, typer.Option("--budget", help="most trials (each a real run)")] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="sampler seed (same seed, same proposals)")
    ] = None,
    sampler: Annotated[str | None, typer.Option("--sampler", help="nsga2 (genetic) | tpe | random")] = None,
    policy: Annotated[
        Path | None, typer.Option("--policy", help="policy file (default: the one in force)")
    ] = None,
    store: StoreOpt = None,
    output: Annotated[Literal["text", "json", "toon"], FormatOpt] = "text",
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Search fault parameters for the combination that takes an SLO just past its bound.

    Every trial is a real run of the experiment (policy, gates and rollbacks as always); an optuna sampler
    proposes the next parameters from the measured ones. See docs/gamedays.md, "Boundary search".

    Exit 0 when a breaching configuration was found, 1 when none was within the budget, 3 when the policy
    refused a trial, 2 on bad input."""
    output = chosen(output, as_json)
    from faultplane.core.store import open_store
    from faultplane.services.search import load_search_spec, run_search, with_overrides

    quiet = quiet or output != "text"

    def progress(t: Any) -> None:
        if not quiet:
            mark = "BREACH" if t.breached else "holds"
            console.print(f"  trial {t.trial}: {t.params} -> {t.measured} {mark} ({t.run_status})")

    import anyio

    with bad_input_exits("invalid search"):
        s = with_overrides(
            load_search_spec(spec),
            budget=budget,
            seed=seed,
            sampler=sampler,
            variables=variables(var, var_file),
        )
        result = anyio.run(
            lambda: run_search(
                s, store=open_store(store) if store else None, on_trial=progress, policy_path=policy
            )
        )
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
    app.command(cls=Command)(search)
