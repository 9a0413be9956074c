"""`faultplane plane`: chaos for the MCP tool-call plane (simulator, stdio proxy, HTTP proxy, report).

Imports of the plane modules happen inside each command, so mounting this sub-app costs the CLI nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal

import typer

from faultplane.cli.options import Command

_STORE_HELP = "store file (DuckDB) or URL: clickhouse://user:pass@host:8123/db, chdb:///dir (default: $FAULTPLANE_STORE)"

app = typer.Typer(
    help="Tool-call-plane chaos: inject MCP faults (offline or via a proxy) and measure what agents feel.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
proxy_app = typer.Typer(
    help="Run a fault-injecting proxy in front of a real MCP server.", no_args_is_help=True
)
app.add_typer(proxy_app, name="proxy")

PlanOpt = typer.Option(
    None, "--plan", "-p", help="fault plan file (.yaml, .json or .toon); none = pass-through"
)
# the options both proxies take
StrictOpt = typer.Option(False, "--strict", help="fail closed if the proxy's own logic fails")
SessionOpt = typer.Option(
    None, "--session", help="session id to record under (default: a new one; a repeated id appends)"
)
NoRecordOpt = typer.Option(False, "--no-record", help="do not write to the store")
PlaneStoreOpt = typer.Option(None, "--store", help=_STORE_HELP)


def _pct(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v * 100:.{digits}f}%"


def _num(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"faultplane plane: {message}", err=True)
    raise typer.Exit(code)


def _load(plan: Path | None) -> Any:
    from faultplane.plane.plan import PlanError, load_plan

    try:
        return load_plan(plan)
    except PlanError as exc:
        _fail(str(exc))


@app.command()
def demo(
    seed: int = typer.Option(7, help="seed for every random draw"),
    tasks: int = typer.Option(500, min=1, max=100_000, help="tasks per simulation"),
    fanout: int = typer.Option(8, min=1, max=64, help="tool calls per task"),
    plan: Path | None = typer.Option(
        None, "--plan", "-p", help="use this plan instead of 2% per-call errors in the fan-out table"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the numbers as JSON"),
) -> None:
    """Offline and deterministic: fan-out failure compounding, and what each resilience pattern is for."""
    from faultplane.plane.demo import PER_CALL_ERROR, run_demo

    custom = _load(plan) if plan else None
    report = run_demo(seed=seed, tasks=tasks, fanout=fanout, plan=custom)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2, default=str))
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()

    def table(title: str, first: str, *cols: str, wrap_first: bool = True) -> Table:
        # Narrow headers, numbers never wrapped or cut: the demo must read whole in an 80-column terminal.
        t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
        t.add_column(first, overflow="fold", no_wrap=not wrap_first)
        for col in cols:
            t.add_column(col, justify="right", no_wrap=True, min_width=len(col))
        return t

    what = f"plan {plan}" if plan else f"{PER_CALL_ERROR:.0%} per-call error"
    t = table(
        f"1. Per-task failure compounds with fan-out ({what}; {tasks} tasks per row, seed {seed})",
        "calls/task",
        "1-(1-p)^n",
        "failed",
        "failed w/ retry",
        "TCAF w/ retry",
    )
    for r in report.fanout_rows:
        t.add_row(str(r.fanout), _pct(r.analytic), _pct(r.without), _pct(r.with_retry), _num(r.tcaf_with))
    console.print(t)
    t = table(
        f"2. Each pattern against the fault it is for (fan-out {fanout})",
        "fault / patterns",
        "failed",
        "silently",
        "TCSR",
        "TCAF",
    )
    for i, sc in enumerate(report.scenarios):
        t.add_row(f"[bold]{sc.fault}[/]", "", "", "", "", end_section=False)
        for row in (sc.without, sc.with_pattern):
            m = row.metrics
            t.add_row(
                f"  {row.label}",
                _pct(m.task_failure_rate),
                f"[bold red]{m.failed_silently}[/]" if m.failed_silently else "0",
                _pct(m.tcsr),
                _num(m.tcaf),
                end_section=i < len(report.scenarios) - 1 and row is sc.with_pattern,
            )
    console.print(t)
    t = table(
        f"3. All patterns stacked against mixed plane faults (fan-out {fanout}): errors, timeouts, "
        "latency spikes, drift, truncation, a listed-but-broken tool failing 30% of calls",
        "patterns",
        "failed",
        "blast",
        "safely",
        "silently",
        "TCSR",
        "ETA",
        "TCAF",
        wrap_first=False,
    )
    for row in report.mixed_rows:
        m = row.metrics
        t.add_row(
            row.label,
            _pct(m.task_failure_rate),
            _pct(m.blast_radius),
            str(m.failed_safely),
            f"[bold red]{m.failed_silently}[/]" if m.failed_silently else "0",
            _pct(m.tcsr),
            _pct(m.eta),
            _num(m.tcaf),
        )
    console.print(t)
    console.print(
        "failed = tasks not succeeded; blast = failed with an injected fault on their own calls; safely = "
        "noticed, degraded or escalated; silently = reported success with a wrong answer. Formulas: "
        "docs/plane.md",
        style="dim",
    )


@app.command()
def simulate(
    plan: Path = typer.Option(..., "--plan", "-p", help="fault plan file"),
    tasks: int = typer.Option(1000, min=1, max=1_000_000),
    fanout: int = typer.Option(8, min=1, max=256),
    patterns: str = typer.Option(
        "none", help="comma list of retry,degradation,breaker,routing,idempotency, or all/none"
    ),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Run a plan through the offline simulator and print the plane metrics."""
    from faultplane.services.plane import simulate_plan

    loaded = _load(plan)
    try:
        out = simulate_plan(loaded, tasks=tasks, fanout=fanout, patterns=patterns)
    except ValueError as exc:
        _fail(str(exc))
        return
    _print_metrics(out["metrics"], as_json, title=f"simulation: {out['patterns']}")


def _print_metrics(m: dict[str, Any], as_json: bool, title: str) -> None:
    if as_json:
        typer.echo(json.dumps(m, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, show_header=False)
    rows = [
        ("calls (all methods)", str(m["calls"])),
        ("tool calls", str(m["tool_calls"])),
        ("availability A", _pct(m["availability"], 2)),
        ("correctness C", _pct(m["correctness"], 2)),
        ("ETA (mean over tools of A_t x C_t)", _pct(m["eta"], 2)),
        ("TCSR (correct / tool calls)", _pct(m["tcsr"], 2)),
        ("apparent success (non-error / tool calls)", _pct(m["apparent_success"], 2)),
        ("faults injected / calls faulted", f"{m['faults_injected']} / {m['faulted_calls']}"),
        ("latency p50 / p99 ms", f"{_num(m['latency_p50_ms'])} / {_num(m['latency_p99_ms'])}"),
        ("tasks", str(m["tasks"])),
        ("TCAF (tool calls / task)", _num(m["tcaf"])),
        ("task failure rate", _pct(m["task_failure_rate"], 2)),
        ("blast radius", _pct(m["blast_radius"], 2)),
        ("failed safely / silently", f"{m['failed_safely']} / {m['failed_silently']}"),
    ]
    for tool, eta in m["eta_by_tool"].items():
        rows.append((f"  ETA {tool}", _pct(eta, 2)))
    for name, n in m.get("faults_by_name", {}).items():
        rows.append((f"  injected {name}", str(n)))
    for k, v in rows:
        t.add_row(k, v)
    Console().print(t)


@app.command()
def validate(plan: Path = typer.Argument(..., help="fault plan file")) -> None:
    """Check a fault plan; errors name the field."""
    p = _load(plan)
    typer.echo(
        f"ok: seed {p.seed}, {len(p.faults)} fault(s): {', '.join(f.label for f in p.faults) or 'none'}"
    )


@app.command(cls=Command)
def report(
    session: str | None = typer.Option(None, "--session", "-s", help="proxy session id (default: latest)"),
    store: str | None = PlaneStoreOpt,
    list_sessions_: bool = typer.Option(False, "--list", help="list recorded proxy sessions"),
    fmt: Literal["text", "json", "toon"] = typer.Option(
        "text", "--format", "-f", help="toon: compact, for agents"
    ),
    as_json: bool = typer.Option(False, "--json", help="print JSON for programs (= --format json)"),
) -> None:
    """Metrics of a recorded proxy session."""
    as_json, as_toon = fmt == "json" or as_json, fmt == "toon" and not as_json
    from faultplane.services.plane import NoSuchSessionError, NoSuchStoreError, list_sessions, session_report

    try:
        if list_sessions_:
            rows = list_sessions(store)
            if as_json:
                typer.echo(json.dumps(rows, indent=2, default=str))
            else:
                for r in rows:
                    typer.echo(
                        f"{r['session_id']}  {r['driver']:5s}  calls={r['calls']:<6} faults={r['faults']:<6} "
                        f"seed={r['seed']}  {r['target']}"
                    )
            return
        out = session_report(session, store)
    except (NoSuchStoreError, NoSuchSessionError) as exc:
        _fail(str(exc), 1)
        return
    sess, m = out["session"], out["metrics"]
    if as_toon:
        import toon_format

        typer.echo(toon_format.encode(json.loads(json.dumps(out, default=str))))
        return
    if as_json:
        typer.echo(json.dumps(out, indent=2, default=str))
        return
    _print_metrics(
        m, False, title=f"plane session {sess['session_id']} ({sess['driver']} -> {sess['target']})"
    )
    if out.get("advice"):
        typer.echo("\nWhat to do about each failure mode met:")
        for a in out["advice"]:
            typer.echo(f"  - {a['sentence']}")
    for note in out.get("notes", []):
        typer.echo(f"\n{note}")


@proxy_app.command(
    "stdio",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    options_metavar="[OPTIONS] -- CMD ARGS...",
)
def proxy_stdio(
    ctx: typer.Context,
    plan: Path | None = PlanOpt,
    strict: bool = StrictOpt,
    session: str | None = SessionOpt,
    store: str | None = PlaneStoreOpt,
    no_record: bool = NoRecordOpt,
    max_frame_bytes: int = typer.Option(
        64 * 1024 * 1024, "--max-frame-bytes", min=1, help="largest JSON-RPC line relayed either way"
    ),
) -> None:
    """Wrap a stdio MCP server: faultplane plane proxy stdio --plan P -- CMD ARGS..."""
    from faultplane.plane.proxy_cli import session_keywords
    from faultplane.plane.proxy_stdio import serve

    command = list(ctx.args)
    if command[:1] == ["--"]:
        command = command[1:]
    code = serve(
        command, **session_keywords(plan, strict, session, store, no_record), max_frame_bytes=max_frame_bytes
    )
    raise typer.Exit(code)


@proxy_app.command("http")
def proxy_http(
    upstream: str = typer.Option(..., "--upstream", help="the MCP endpoint, e.g. http://127.0.0.1:8000/mcp"),
    plan: Path | None = PlanOpt,
    port: int = typer.Option(0, "--port", min=0, max=65535, help="0 picks a free port (printed on stderr)"),
    host: str = typer.Option("127.0.0.1", "--host"),
    path: str = typer.Option("/mcp", "--path", help="the path the proxy serves"),
    strict: bool = StrictOpt,
    session: str | None = SessionOpt,
    store: str | None = PlaneStoreOpt,
    no_record: bool = NoRecordOpt,
    allow_host: list[str] = typer.Option([], "--allow-host", help="extra Host values (host:port or host:*)"),
    allow_origin: list[str] = typer.Option([], "--allow-origin", help="extra allowed Origin values"),
    max_body_bytes: int = typer.Option(
        4 * 1024 * 1024, "--max-body-bytes", min=1, help="largest request body and JSON response relayed"
    ),
) -> None:
    """Front a streamable-HTTP MCP server."""
    from faultplane.plane.proxy_cli import session_keywords
    from faultplane.plane.proxy_http import serve

    code = serve(
        upstream=upstream,
        host=host,
        port=port,
        path=path,
        **session_keywords(plan, strict, session, store, no_record),
        allowed_hosts=allow_host,
        allowed_origins=allow_origin,
        max_body_bytes=max_body_bytes,
    )
    raise typer.Exit(code)


if __name__ == "__main__":  # pragma: no cover
    app(sys.argv[1:])
