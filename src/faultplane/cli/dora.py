"""`faultplane dora`: DORA's Four Keys from CI/CD beside chaos evidence. Logic lives in faultplane.services.dora."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from faultplane.cli.options import StoreOpt
from faultplane.cli.term import Console, Table

app = typer.Typer(
    help="DORA Four Keys from CI/CD (deployments, incidents) beside what chaos experiments showed.",
    no_args_is_help=True,
)
record_app = typer.Typer(help="Record one event: a pipeline step or a webhook handler.", no_args_is_help=True)
app.add_typer(record_app, name="record")
console = Console()
err_console = Console(stderr=True)

ServiceOpt = Annotated[
    str | None, typer.Option("--service", help="the service, when the export does not say")
]


def _store(store: str | None, *, read: bool = True) -> Any:
    from faultplane.cli.stores import open_cli_store

    return open_cli_store(store, read=read)


def _fail(exc: Exception) -> None:
    err_console.print(f"[red]{exc}[/]", highlight=False)
    raise typer.Exit(2) from None


@app.command("import")
def import_(
    path: Annotated[
        str, typer.Argument(help="CSV or JSON export (GitHub/GitLab deployments API), or - for stdin")
    ],
    kind: Annotated[str, typer.Option("--kind", "-k", help="deployments | incidents")] = "deployments",
    fmt: Annotated[str, typer.Option("--format", "-f", help="auto | csv | json")] = "auto",
    service: ServiceOpt = None,
    store: StoreOpt = None,
) -> None:
    """Import deployments or incidents; re-importing the same export replaces rows of the same id."""
    from faultplane.services.dora import DoraError, import_events, parse_events, read_input

    if kind not in ("deployments", "incidents"):
        _fail(ValueError(f"--kind: {kind!r}; fix: deployments or incidents"))
    if fmt not in ("auto", "csv", "json"):
        _fail(ValueError(f"--format: {fmt!r}; fix: auto, csv or json"))
    try:
        rows = parse_events(read_input(path), kind, fmt=fmt, service=service)  # type: ignore[arg-type]
        n = import_events(_store(store, read=False), rows, kind)  # type: ignore[arg-type]
    except DoraError as exc:
        _fail(exc)
    console.print(f"imported {n} {kind} from {path}", highlight=False)


def _record(kind: str, fields: dict[str, Any], store: str | None) -> None:
    from faultplane.services.dora import DoraError, record_event

    try:
        given = {k: v for k, v in fields.items() if v is not None}
        row = record_event(_store(store, read=False), kind, given)  # type: ignore[arg-type]
    except DoraError as exc:
        _fail(exc)
    typer.echo(json.dumps(row))


@record_app.command("deployment")
def record_deployment(
    service: Annotated[str, typer.Option("--service", help="the deployed service")],
    status: Annotated[str, typer.Option("--status", help="success | failure")] = "success",
    at: Annotated[str | None, typer.Option("--at", help="when it finished (ISO 8601; default now)")] = None,
    change_at: Annotated[
        str | None, typer.Option("--change-at", help="first commit of the change (ISO 8601), for lead time")
    ] = None,
    deployment_id: Annotated[str | None, typer.Option("--id", help="the pipeline's deployment id")] = None,
    environment: Annotated[str | None, typer.Option("--environment", help="e.g. production")] = None,
    store: StoreOpt = None,
) -> None:
    """Record one deployment (the last step of a deploy pipeline)."""
    from datetime import UTC, datetime

    fields = {
        "service": service,
        "status": status,
        "deployed_at": at or datetime.now(UTC).isoformat(),
        "change_at": change_at,
        "id": deployment_id,
        "environment": environment,
    }
    _record("deployments", fields, store)


@record_app.command("incident")
def record_incident(
    service: Annotated[str, typer.Option("--service", help="the affected service")],
    started: Annotated[str, typer.Option("--started", help="when it began (ISO 8601)")],
    restored: Annotated[str | None, typer.Option("--restored", help="when service was restored")] = None,
    incident_id: Annotated[str | None, typer.Option("--id", help="the incident's id")] = None,
    deployment_id: Annotated[
        str | None, typer.Option("--caused-by", help="the deployment that caused it")
    ] = None,
    store: StoreOpt = None,
) -> None:
    """Record one incident and its restoration (from an incident tool's webhook or by hand)."""
    fields = {
        "service": service,
        "started_at": started,
        "restored_at": restored,
        "id": incident_id,
        "deployment_id": deployment_id,
    }
    _record("incidents", fields, store)


def _h(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.3g}{unit}"


@app.command()
def report(
    service: Annotated[str | None, typer.Option("--service", help="one service")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for programs")] = False,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="also write an HTML report here")
    ] = None,
    store: StoreOpt = None,
) -> None:
    """The Four Keys per service, with the faults its experiments exercised and their recovery times."""
    from faultplane.services.dora import DoraError, four_keys

    try:
        keys = four_keys(_store(store), service)
    except DoraError as exc:
        _fail(exc)
    if output is not None:
        from faultplane.reports.dora import write_dora_report

        write_dora_report(keys, output)
    if as_json:
        typer.echo(json.dumps([k.model_dump() for k in keys], indent=2))
        return
    if not keys:
        console.print(
            "no deployments, incidents or service-labelled experiments yet: `faultplane dora import`"
        )
        return
    table = Table(
        "service",
        "deploys/day",
        "lead time h",
        "change fail",
        "restore h",
        "experiments",
        "exp. recovery s",
        "faults exercised",
    )
    for k in keys:
        table.add_row(
            k.service,
            _h(k.deployments_per_day),
            _h(k.lead_time_hours),
            "-" if k.change_failure_rate is None else f"{k.change_failure_rate:.0%}",
            _h(k.time_to_restore_hours),
            f"{k.experiments_passed}/{k.experiments}",
            _h(k.experiment_recovery_s),
            ", ".join(k.faults_exercised) or "none",
        )
    console.print(table)
    if output is not None:
        console.print(f"wrote {output}", highlight=False)
