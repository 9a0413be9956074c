"""`faultplane report RUN_ID`: a self-contained HTML report of one run (timeline, gates, post-mortem)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from faultplane.cli.term import Console

console = Console()
err_console = Console(stderr=True)


def report(
    run_id: Annotated[str, typer.Argument(help="the run's id (a unique prefix will do)")],
    store: Annotated[
        str | None,
        typer.Option(
            "--store", help="store file or clickhouse:// URL (default: $FAULTPLANE_STORE or the XDG data dir)"
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="HTML file to write (default: report-RUN_ID.html)")
    ] = None,
    postmortem_only: Annotated[
        bool, typer.Option("--postmortem", help="print the post-mortem paragraph instead of writing HTML")
    ] = False,
) -> None:
    """Write an HTML report of a run: timeline (latency percentiles, error rate, fault window, gate thresholds),
    the post-mortem paragraph, gates, load figures and activities. Exit 2 when the run is unknown."""
    from faultplane.core.store import StoreBusyError, open_store
    from faultplane.reports.html import write_report
    from faultplane.reports.postmortem import postmortem
    from faultplane.services.runs import load_journal

    if store is not None and "://" not in store and not Path(store).is_file():
        err_console.print(
            f"[red]--store: {store} does not exist[/]; fix: pass the store file the runs were kept in"
        )
        raise typer.Exit(2)
    try:
        journal = load_journal(run_id, open_store(store))
    except LookupError as exc:
        err_console.print(f"[red]{exc.args[0]}[/]")
        raise typer.Exit(2) from None
    except StoreBusyError as exc:
        err_console.print(f"[red]{exc}[/]; fix: retry when the running experiment has finished writing")
        raise typer.Exit(2) from None
    if postmortem_only:
        console.print(postmortem(journal), highlight=False, soft_wrap=True)
        return
    path = write_report(journal, output or Path(f"report-{journal['run_id']}.html"))
    console.print(f"report of run {journal['run_id']} ({journal.get('status')}): {path}")


def register(app: typer.Typer) -> None:
    app.command()(report)
