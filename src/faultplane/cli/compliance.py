"""`faultplane compliance`: the requirement catalog and the coverage report (HTML, Markdown, JSON)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from faultplane.cli.gameday import emit
from faultplane.cli.options import Command, FormatOpt, JsonOpt, StoreOpt, chosen
from faultplane.cli.term import Console, Table

app = typer.Typer(
    help="Compliance evidence: which framework requirements your experiments cover.", no_args_is_help=True
)
console = Console()
err_console = Console(stderr=True)


@app.command(cls=Command)
def requirements(
    framework: Annotated[list[str] | None, typer.Option("--framework", help="only these frameworks")] = None,
    output: Annotated[Literal["text", "json", "toon"], FormatOpt] = "text",
    as_json: JsonOpt = False,
) -> None:
    """The requirements an experiment can be tagged with (tags: [DORA-25] or compliance:DORA-25)."""
    output = chosen(output, as_json)
    from faultplane.services.compliance import ComplianceError, load_catalog

    try:
        cat = load_catalog()
        wanted = [cat.framework(f) for f in framework or []]
        if any(w is None for w in wanted):
            raise ComplianceError(
                f"--framework: unknown framework; fix: use {', '.join(f.id for f in cat.frameworks)}"
            )
    except ComplianceError as exc:
        err_console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    picked = [w for w in wanted if w is not None] or cat.frameworks
    if emit({"frameworks": [f.model_dump() for f in picked]}, output):
        return
    table = Table("id", "framework", "reference", "title", "every", "RTO")
    for fw in picked:
        for r in fw.requirements:
            table.add_row(r.id, fw.id, r.reference, r.title, f"{r.frequency_days}d", "yes" if r.rto else "")
    console.print(table)


@app.command(cls=Command)
def report(
    out: Annotated[
        Path | None, typer.Option("--output", "-o", help="write here; the format follows .html, .md or .json")
    ] = None,
    fmt: Annotated[
        str | None, typer.Option("--format", "-f", help="html | markdown | json (default: by --output)")
    ] = None,
    as_json: JsonOpt = False,
    framework: Annotated[list[str] | None, typer.Option("--framework", help="limit the scope")] = None,
    rto: Annotated[float | None, typer.Option("--rto", help="recovery time objective in seconds")] = None,
    store: StoreOpt = None,
) -> None:
    """Coverage from the evidence store: requirements with evidence, gaps, testing frequency, RTO met."""
    from faultplane.cli.stores import open_cli_store
    from faultplane.services.compliance import ComplianceError, coverage_report, render_markdown, write_report

    fmt = "json" if as_json else fmt
    if fmt not in (None, "html", "markdown", "json"):
        err_console.print(f"[red]--format: {fmt!r} is not a format[/]; fix: use html, markdown or json")
        raise typer.Exit(2)
    try:
        rep = coverage_report(open_cli_store(store, read=True), frameworks=framework or None, rto_seconds=rto)
        if out is not None:
            path = write_report(rep, out, fmt)  # type: ignore[arg-type]
            console.print(f"wrote {path} — coverage {rep.coverage:.0%}, {len(rep.gaps)} gap(s)")
            return
    except ComplianceError as exc:
        err_console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    if fmt == "json":
        typer.echo(rep.model_dump_json(indent=2))
    elif fmt == "html":
        from faultplane.services.compliance import render_html

        typer.echo(render_html(rep))
    else:
        typer.echo(render_markdown(rep))


@app.command(cls=Command)
def periodic(
    out_dir: Annotated[
        Path, typer.Option("--output", "-o", help="folder of the reports (kept between runs)")
    ],
    period: Annotated[str, typer.Option("--period", help="the reporting period: 30d, 4w, 12h")] = "30d",
    framework: Annotated[list[str] | None, typer.Option("--framework", help="limit the scope")] = None,
    rto: Annotated[float | None, typer.Option("--rto", help="recovery time objective in seconds")] = None,
    store: StoreOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the change as JSON")] = False,
    as_of: Annotated[
        str | None, typer.Option("--as-of", help="report as of this UTC date or time (ISO 8601; default now)")
    ] = None,
) -> None:
    """For cron or CI: write this period's coverage report and its change from the previous one.
    Exit 0 coverage held, 1 a requirement covered before is not now, 2 invalid input."""
    from datetime import UTC, datetime

    from faultplane.cli.stores import open_cli_store
    from faultplane.services.compliance import ComplianceError
    from faultplane.services.coverage_diff import parse_period, periodic_report

    try:
        now = None
        if as_of is not None:
            try:
                now = datetime.fromisoformat(as_of.replace("Z", "+00:00"))
            except ValueError:
                raise ComplianceError(
                    f"--as-of: {as_of!r} is not a date; fix: ISO 8601, e.g. 2026-12-31 or 2026-12-31T18:00Z"
                ) from None
            now = now.replace(tzinfo=UTC) if now.tzinfo is None else now
        change = periodic_report(
            out_dir,
            now=now,
            period_days=parse_period(period),
            store=open_cli_store(store, read=True),
            frameworks=framework or None,
            rto_seconds=rto,
        )
    except ComplianceError as exc:
        err_console.print(f"[red]{exc}[/]", highlight=False)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(change.model_dump_json(indent=2))
    else:
        verdict = "[red]coverage fell[/]" if change.fell else "[green]coverage held[/]"
        console.print(
            f"{verdict}: {change.previous_coverage:.0%} -> {change.coverage:.0%} (against the {change.baseline})",
            highlight=False,
        )
        console.print(f"new gaps: {', '.join(change.new_gaps) or 'none'}", highlight=False)
        console.print(f"closed gaps: {', '.join(change.closed_gaps) or 'none'}", highlight=False)
        for kind, path in change.files.items():
            console.print(f"wrote {kind}: {path}", highlight=False, markup=False)
    raise typer.Exit(1 if change.fell else 0)
