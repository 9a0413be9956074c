"""`faultplane design`: a staged set of experiments for a target. Logic lives in faultplane.services.design."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from faultplane.cli.gameday import emit, print_issues
from faultplane.cli.options import Command, FormatOpt, JsonOpt, chosen
from faultplane.cli.term import Console, Table
from faultplane.core.errors import ExperimentError

console = Console()
err_console = Console(stderr=True)


def design(
    request: Annotated[
        Path | None, typer.Option("--from", help="design request YAML/JSON (the fields below, as a mapping)")
    ] = None,
    service: Annotated[str | None, typer.Option("--service", help="service name, e.g. orders")] = None,
    kind: Annotated[str | None, typer.Option("--kind", help="http | postgres | redis | process")] = None,
    url: Annotated[str | None, typer.Option("--url", help="http endpoint, or redis://host:port/0")] = None,
    dsn: Annotated[str | None, typer.Option("--dsn", help="postgres connection string")] = None,
    env: Annotated[str | None, typer.Option("--env", help="environment label (default staging)")] = None,
    fault_point: Annotated[
        str | None, typer.Option("--fault-point", help="http: in-process fault point")
    ] = None,
    proxy_route: Annotated[str | None, typer.Option("--proxy-route", help="http: netproxy route")] = None,
    process_name: Annotated[str | None, typer.Option("--process", help="process name to disturb")] = None,
    table: Annotated[str | None, typer.Option("--table", help="postgres: a table to lock")] = None,
    error_rate: Annotated[float | None, typer.Option("--error-rate", help="SLO: error rate bound")] = None,
    latency_p99_ms: Annotated[
        float | None, typer.Option("--latency-p99-ms", help="SLO: latency bound")
    ] = None,
    compliance: Annotated[
        list[str] | None, typer.Option("--compliance", help="requirement id to tag")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--output", "-o", help="write each experiment as YAML in this folder")
    ] = None,
    policy: Annotated[Path | None, typer.Option("--policy", help="policy file")] = None,
    output: Annotated[Literal["text", "json", "toon"], FormatOpt] = "text",
    as_json: JsonOpt = False,
) -> None:
    """Design escalating experiments (SLO gates, blast radius, rollbacks) that pass the policy; no LLM."""
    output = chosen(output, as_json)
    from faultplane.core.formats import load_document
    from faultplane.services.design import design_experiments, write_design

    data: dict[str, Any] = {}
    try:
        if request is not None:
            data = dict(load_document(request))
        flags = {
            "service": service,
            "kind": kind,
            "url": url,
            "dsn": dsn,
            "env": env,
            "fault_point": fault_point,
            "table": table,
        }
        data.update({k: v for k, v in flags.items() if v is not None})
        if proxy_route:
            data["proxy"] = {"route": proxy_route}
        if process_name:
            data["process"] = {"name": process_name}
        slo = {
            k: v for k, v in (("error_rate", error_rate), ("latency_p99_ms", latency_p99_ms)) if v is not None
        }
        if slo:
            data["slo"] = {**(data.get("slo") or {}), **slo}
        if compliance:
            data["compliance"] = [*(data.get("compliance") or []), *compliance]
        result = design_experiments(data, policy_path=policy)
    except ExperimentError as exc:
        print_issues(exc, "cannot design")
        raise typer.Exit(2) from None
    paths = write_design(result, out) if out is not None else []
    if emit(result, output):
        return
    t = Table(
        "stage",
        "experiment",
        "fault",
        "action",
        "parameters",
        "blast stage",
        title=f"{result.service} ({result.kind})",
    )
    for d in result.experiments:
        t.add_row(str(d.stage), d.title, d.fault_type, d.action, str(d.parameters), str(d.blast_stage))
    console.print(t)
    if result.held_back:
        console.print(
            "held back (need approval): " + ", ".join(f"{h.slug} ({h.action})" for h in result.held_back)
        )
    for n in result.notes:
        console.print(f"  • {n}")
    for p in paths:
        console.print(f"wrote {p}")


def register(app: typer.Typer) -> None:
    app.command(cls=Command)(design)
