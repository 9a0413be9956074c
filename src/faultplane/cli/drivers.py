"""`faultplane drivers ...`: list activities and their schemas, run a standalone fault proxy, manage leases."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import Annotated

import typer

from faultplane.cli.term import Console, Table

app = typer.Typer(
    help="Fault drivers: activities, the standalone TCP fault proxy, fault leases.", no_args_is_help=True
)
leases_app = typer.Typer(help="Fault leases: list them, reap the stale ones.", no_args_is_help=True)
app.add_typer(leases_app, name="leases")

_out = Console()


@app.command("list")
def list_cmd(
    driver: Annotated[str | None, typer.Option(help="only this driver")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="full descriptions with parameter schemas")] = False,
) -> None:
    """Every action and probe, with its fault type (and, with --json, its parameter schema)."""
    from faultplane.drivers.base import list_activities

    specs = list_activities(driver)
    if as_json:
        typer.echo(json.dumps([s.describe() for s in specs], indent=1, default=str))
        return
    table = Table()
    # Names and kinds never shrink; the description gets what is left of the terminal, cut with an ellipsis.
    width = max((len(s.qualified_name) for s in specs), default=8)
    table.add_column("activity", no_wrap=True, min_width=width)
    table.add_column("kind", no_wrap=True, min_width=6)
    table.add_column(
        "fault type", no_wrap=True, min_width=max((len(s.fault_type or "") for s in specs), default=4)
    )
    wide = _out.width >= 100  # on a narrow terminal the description is left to `drivers show`
    if wide:
        table.add_column("description", no_wrap=True, overflow="ellipsis")
    for s in specs:
        row = [s.qualified_name, s.kind, s.fault_type or ""]
        if wide:
            row.append((s.description.splitlines() or [""])[0])
        table.add_row(*row)
    _out.print(table)
    try:
        from faultplane.drivers.script import PLUGIN_ERRORS
    except ImportError:
        return
    for manifest, err in PLUGIN_ERRORS.items():
        _out.print(f"[yellow]plugin {manifest} not loaded:[/] {err}")


@app.command("show")
def show_cmd(driver: str, name: str) -> None:
    """One activity's description and JSON parameter schema."""
    from faultplane.drivers.base import DriverError, get_activity

    try:
        spec = get_activity(driver, name)
    except DriverError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(spec.describe(), indent=1, default=str))


@app.command("proxy")
def proxy_cmd(
    upstream: Annotated[
        str | None, typer.Option(help="host:port to forward to (omit: start with no route)")
    ] = None,
    listen: Annotated[
        str, typer.Option(help="host:port to listen on (port 0 = any free port)")
    ] = "127.0.0.1:0",
    name: Annotated[str, typer.Option(help="route name; registry faults target netproxy:<name>")] = "default",
    control: Annotated[str, typer.Option(help="loopback control API address, or 'none'")] = "127.0.0.1:8474",
    toxic: Annotated[
        list[str] | None, typer.Option(help='JSON toxic, e.g. {"type":"latency","latency_ms":50}')
    ] = None,
    no_registry: Annotated[bool, typer.Option("--no-registry", help="ignore fault-registry faults")] = False,
    seed: Annotated[int | None, typer.Option(help="seed for toxicity rolls and jitter")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the TCP fault proxy as a long-lived process (prints one JSON line with its addresses)."""
    from faultplane.drivers.base import DriverError
    from faultplane.drivers.netproxy.__main__ import run_standalone

    try:
        toxics = [json.loads(t) for t in toxic or []]
    except json.JSONDecodeError as exc:
        typer.echo(f"error: --toxic is not JSON: {exc}", err=True)
        raise typer.Exit(2) from None
    import asyncio

    try:
        asyncio.run(
            run_standalone(
                name=name,
                listen=listen,
                upstream=upstream,
                control=None if control == "none" else control,
                toxics=toxics,
                registry=not no_registry,
                seed=seed,
                verbose=verbose,
            )
        )
    except KeyboardInterrupt:
        pass
    except (DriverError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@leases_app.command("list")
def leases_list(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Leases held now: the fault, its controller, when it expires, and whether it is stale."""
    from faultplane.drivers.leases import list_leases

    rows = list_leases()
    if as_json:
        typer.echo(json.dumps([asdict(r) | {"stale": r.stale_reason()} for r in rows], indent=1))
        return
    table = Table("lease", "fault", "controller", "expires in", "stale")
    now = time.time()
    for r in rows:
        table.add_row(
            r.lease_id, r.label, str(r.controller_pid), f"{r.expires_at - now:.1f}s", r.stale_reason() or ""
        )
    _out.print(table)


@leases_app.command("reap")
def leases_reap(
    force: Annotated[bool, typer.Option("--force", help="revert every lease, even live ones")] = False,
) -> None:
    """Revert every lease whose controller is dead or whose expiry passed."""
    from faultplane.drivers.leases import reap

    results = reap(force=force)
    for r in results:
        status = "reverted" if r.ok else f"FAILED: {r.error}"
        typer.echo(f"{r.lease_id} ({r.label}): {r.reason}; {status}")
    if not results:
        typer.echo("no stale lease")
    if any(not r.ok for r in results):
        raise typer.Exit(1)


@leases_app.command("watch")
def leases_watch(
    idle_exit: Annotated[
        float, typer.Option(min=0.0, help="exit after this many seconds with no lease (inf: never)")
    ] = 10.0,
) -> None:
    """Run the lease watchdog in the foreground."""
    from faultplane.drivers.leases import lease_dir, watch

    raise typer.Exit(watch(lease_dir(), idle_exit_s=idle_exit))
