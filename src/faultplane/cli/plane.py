"""`faultplane plane`: chaos for the MCP tool-call plane (simulator, stdio proxy, HTTP proxy, report).

Imports of the plane modules happen inside each command, so mounting this sub-app costs the CLI nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

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
    tasks: int = typer.Option(1000, min=1, max=100_000, help="tasks per scenario"),
    fanout: int = typer.Option(8, min=1, max=64, help="tool calls per task"),
    plan: Path | None = typer.Option(
        None, "--plan", "-p", help="use this plan instead of 2% per-call errors"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the numbers as JSON"),
) -> None:
    """Offline and deterministic: fan-out failure compounding, with and without resilience patterns."""
    from faultplane.plane.demo import PER_CALL_ERROR, run_demo

    custom = _load(plan) if plan else None
    report = run_demo(seed=seed, tasks=tasks, fanout=fanout, plan=custom)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    what = f"plan {plan}" if plan else f"{PER_CALL_ERROR:.0%} per-call error"
    t = Table(title=f"Fan-out compounding ({what}, {max(1, tasks // 2)} tasks per row, seed {seed})")
    t.add_column("tool calls / task", justify="right")
    t.add_column("expected 1-(1-p)^n", justify="right")
    t.add_column("tasks failed, no patterns", justify="right", style="red")
    t.add_column("tasks failed, all patterns", justify="right", style="green")
    t.add_column("TCAF, all patterns", justify="right")
    for r in report.fanout_rows:
        t.add_row(
            str(r.fanout), _pct(r.analytic), _pct(r.without), _pct(r.with_patterns, 2), _num(r.tcaf_with)
        )
    console.print(t)
    for title, rows in (
        (f"Resilience patterns at fan-out {fanout}: {what}", report.error_rows),
        (
            f"Resilience patterns at fan-out {fanout}: mixed plane faults "
            "(errors, timeouts, latency spikes, drift, truncation, a flaky listed-but-broken tool)",
            report.mixed_rows,
        ),
    ):
        t = Table(title=title)
        t.add_column("patterns (cumulative)", no_wrap=True)
        for col in (
            "tasks failed",
            "blast radius",
            "failed safely",
            "failed silently",
            "TCSR",
            "ETA",
            "TCAF",
        ):
            t.add_column(col, justify="right")
        for row in rows:
            m = row.metrics
            t.add_row(
                row.label,
                _pct(m.task_failure_rate, 2),
                _pct(m.blast_radius, 2),
                str(m.failed_safely),
                f"[bold red]{m.failed_silently}[/]" if m.failed_silently else "0",
                _pct(m.tcsr),
                _pct(m.eta),
                _num(m.tcaf),
            )
        console.print(t)
    console.print(
        "failed safely = noticed, degraded or escalated; failed silently = reported success with a wrong "
        "answer. Formulas: docs/plane.md",
        style="dim",
    )


@app.command()
def simulate(
    plan: Path = typer.Option(..., "--plan", "-p", help="fault plan file"),
    tasks: int = typer.Option(1000, min=1, max=1_000_000),
    fanout: int = typer.Option(8, min=1, max=256),
    patterns: str = typer.Option("none", help="comma list of retry,degradation,breaker,routing, or all/none"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Run a plan through the offline simulator and print the plane metrics."""
    from faultplane.plane.simulator import Patterns, Workload
    from faultplane.plane.simulator import simulate as run

    names = {p.strip() for p in patterns.split(",") if p.strip()}
    known = {"retry", "degradation", "breaker", "routing"}
    if names == {"all"}:
        names = known
    elif names == {"none"}:
        names = set()
    elif not names <= known:
        _fail(f"--patterns: unknown {sorted(names - known)}; use {sorted(known)}, all or none")
    result = run(_load(plan), Workload(tasks=tasks, fanout=fanout), Patterns(**{n: True for n in names}))
    _print_metrics(result.metrics.as_dict(), as_json, title=f"simulation: {result.patterns.label}")


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


@app.command()
def report(
    session: str | None = typer.Option(None, "--session", "-s", help="proxy session id (default: latest)"),
    store: Path | None = typer.Option(None, "--store", help="store file (default: $FAULTPLANE_STORE)"),
    list_sessions: bool = typer.Option(False, "--list", help="list recorded proxy sessions"),
    as_json: bool = typer.Option(False, "--json"),
    as_toon: bool = typer.Option(False, "--toon", help="print the metrics as TOON (compact, for agents)"),
) -> None:
    """Metrics of a recorded proxy session."""
    from faultplane.plane.metrics import compute_metrics
    from faultplane.plane.recorder import load_session, plane_store

    st = plane_store(store)
    if list_sessions:
        rows = st.query(
            "SELECT s.session_id, s.driver, s.target, s.seed, s.started_at, "
            "(SELECT count(*) FROM plane_calls c WHERE c.session_id = s.session_id) AS calls, "
            "(SELECT count(*) FROM plane_fault_events f WHERE f.session_id = s.session_id) AS faults "
            "FROM plane_sessions s ORDER BY s.started_at DESC"
        )
        if as_json:
            typer.echo(json.dumps(rows, indent=2, default=str))
        else:
            for r in rows:
                typer.echo(
                    f"{r['session_id']}  {r['driver']:5s}  calls={r['calls']:<6} faults={r['faults']:<6} "
                    f"seed={r['seed']}  {r['target']}"
                )
        return
    found = load_session(st, session)
    if found is None:
        _fail(
            f"no proxy session {session!r} in {st.path}" if session else f"no proxy sessions in {st.path}", 1
        )
        return
    sess, calls, n_events = found
    m = compute_metrics(calls, fault_events=n_events).as_dict()
    by_type = st.query(
        "SELECT fault_name, count(*) AS n FROM plane_fault_events WHERE session_id = ? "
        "GROUP BY fault_name ORDER BY n DESC",
        [sess["session_id"]],
    )
    m["faults_by_name"] = {r["fault_name"]: int(r["n"]) for r in by_type}
    if as_toon:
        import toon_format

        typer.echo(toon_format.encode(json.loads(json.dumps({"session": sess, "metrics": m}, default=str))))
        return
    if as_json:
        typer.echo(json.dumps({"session": sess, "metrics": m}, indent=2, default=str))
        return
    _print_metrics(
        m, False, title=f"plane session {sess['session_id']} ({sess['driver']} -> {sess['target']})"
    )


@proxy_app.command("stdio", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def proxy_stdio(
    ctx: typer.Context,
    plan: Path | None = PlanOpt,
    strict: bool = typer.Option(False, "--strict", help="fail closed if the proxy's own logic fails"),
    session: str | None = typer.Option(None, "--session", help="session id to record under"),
    store: Path | None = typer.Option(None, "--store", help="store file (default: $FAULTPLANE_STORE)"),
    no_record: bool = typer.Option(False, "--no-record", help="do not write to the store"),
) -> None:
    """Wrap a stdio MCP server: faultplane plane proxy stdio --plan P -- CMD ARGS..."""
    from faultplane.plane.proxy_stdio import serve

    command = list(ctx.args)
    if command[:1] == ["--"]:
        command = command[1:]
    code = serve(
        command,
        plan_path=plan,
        strict=strict,
        session_id=session,
        store=str(store) if store else None,
        record=not no_record,
    )
    raise typer.Exit(code)


@proxy_app.command("http")
def proxy_http(
    upstream: str = typer.Option(..., "--upstream", help="the MCP endpoint, e.g. http://127.0.0.1:8000/mcp"),
    plan: Path | None = PlanOpt,
    port: int = typer.Option(0, "--port", min=0, max=65535, help="0 picks a free port (printed on stderr)"),
    host: str = typer.Option("127.0.0.1", "--host"),
    path: str = typer.Option("/mcp", "--path", help="the path the proxy serves"),
    strict: bool = typer.Option(False, "--strict", help="fail closed if the proxy's own logic fails"),
    session: str | None = typer.Option(None, "--session"),
    store: Path | None = typer.Option(None, "--store"),
    no_record: bool = typer.Option(False, "--no-record"),
    allow_host: list[str] = typer.Option([], "--allow-host", help="extra Host values (host:port or host:*)"),
    allow_origin: list[str] = typer.Option([], "--allow-origin", help="extra allowed Origin values"),
) -> None:
    """Front a streamable-HTTP MCP server."""
    from faultplane.plane.proxy_http import serve

    code = serve(
        upstream=upstream,
        plan_path=plan,
        host=host,
        port=port,
        path=path,
        strict=strict,
        session_id=session,
        store=str(store) if store else None,
        record=not no_record,
        allowed_hosts=allow_host,
        allowed_origins=allow_origin,
    )
    raise typer.Exit(code)


if __name__ == "__main__":  # pragma: no cover
    app(sys.argv[1:])
