"""`faultplane analyze`: the evidence of past runs. Logic lives in faultplane.services.evidence and .analytics.

faultplane analyze                      scorecards + the last 10 runs (estimate vs actual, anomalies)
faultplane analyze --last 50 | --all    more runs
faultplane analyze --sql "SELECT ..."   read-only SQL
faultplane analyze ... -o x.parquet     write the rows (Parquet, CSV, JSON, Arrow)
faultplane analyze baseline --probe latency --experiment svc   a tolerance derived from past readings
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from faultplane.cli.options import Command, FormatOpt, Group, JsonOpt, StoreOpt, chosen
from faultplane.cli.term import Console, Table, timestamp

app = typer.Typer(
    cls=Group,
    help="The evidence of past runs: scorecards, trends, anomalies, estimate vs actual, SQL, exports, baselines.",
    invoke_without_command=True,
    no_args_is_help=False,
)
console = Console()
err_console = Console(stderr=True)

ExperimentOpt = Annotated[
    str | None, typer.Option("--experiment", "-e", help="one experiment (title or family)")
]


def _open(store: str | None) -> Any:
    from faultplane.cli.stores import open_cli_store

    return open_cli_store(store, read=True)


def _fail(message: str, code: int = 2) -> Any:
    err_console.print(f"[red]{message}[/]")
    raise typer.Exit(code)


# what -f/--format names: how the rows print, or how -o writes them when the file's suffix does not say
_SHOWN = ("text", "json", "toon")
_WRITTEN = ("parquet", "csv", "json", "arrow")


def _file_format(path: Path | None, fmt: str) -> str | None:
    """The format -f names for the file -o writes, when the file's suffix does not say one itself."""
    if path is None or fmt not in _WRITTEN:
        return None
    from faultplane.services.evidence import EvidenceError, export_format

    try:
        export_format(path)
    except EvidenceError:
        return fmt
    return None  # the suffix says: `-o runs.parquet -f json` writes Parquet and prints JSON


def _num(v: Any, fmt: str = "{:.3f}") -> str:
    return "" if v is None else fmt.format(v)


@app.callback()
def analyze(
    ctx: typer.Context,
    last: Annotated[int, typer.Option("--last", "-n", help="show the last N runs")] = 10,
    all_runs: Annotated[bool, typer.Option("--all", help="show every run")] = False,
    experiment: ExperimentOpt = None,
    sql: Annotated[
        str | None,
        typer.Option("--sql", help="read-only SQL over runs, activities, journals, audit, run_metrics"),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="rows shown for --sql")] = 200,
    export: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="write the rows to this file: .parquet, .csv, .json or .arrow"),
    ] = None,
    fmt: Annotated[
        Literal["text", "json", "toon", "parquet", "csv", "arrow"],
        typer.Option(
            "--format", "-f", help="what to print; with -o, the file's format when its suffix does not say"
        ),
    ] = "text",
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Scorecards (grade A-D, trend over the trailing 10 runs, anomalies) and recent runs with estimate vs actual."""
    if ctx.invoked_subcommand is not None:
        return
    fmt = chosen(fmt, as_json)
    if fmt not in _SHOWN and export is None:
        _fail(f"--format {fmt} is a file format; fix: add -o FILE, or print with --format text, json or toon")
    output = fmt if fmt in _SHOWN else "text"
    export_format = _file_format(export, fmt)
    st = _open(store)
    if sql is not None:
        _sql(st, sql, limit, export, export_format, output)
        return
    from faultplane.core.formats import dumps
    from faultplane.services.evidence import EvidenceError, summarize

    try:
        summary = summarize(st, last=None if all_runs else last, experiment=experiment)
    except EvidenceError as exc:
        _fail(str(exc))
    if export is not None:
        _export_summary(summary, export, export_format)
    if output != "text":
        print(dumps(summary.model_dump(mode="json"), output))  # type: ignore[arg-type]
        return
    _print_summary(summary)


def _sql(st: Any, sql: str, limit: int, export: Path | None, fmt: str | None, output: str) -> None:
    from faultplane.core.formats import dumps
    from faultplane.services.analytics import QueryError, analyze, export_query

    try:
        if export is not None:
            res = export_query(sql, export, fmt, store=st)
            err_console.print(f"wrote {res.rows} row(s) to {res.path} ({res.format})")
            if output == "text":
                return
        result = analyze(sql, store=st, limit=limit)
    except QueryError as exc:
        _fail(str(exc))
    if output != "text":
        print(dumps(result.model_dump(mode="json"), output))  # type: ignore[arg-type]
        return
    table = Table(*result.columns)
    for row in result.rows:
        table.add_row(*["" if v is None else str(v) for v in row])
    console.print(table)
    more = " (truncated: raise --limit or add a LIMIT)" if result.truncated else ""
    console.print(f"{result.row_count} row(s){more}")


def _flat_runs(summary: Any) -> tuple[list[str], list[list[Any]]]:
    columns = [
        "run_id", "experiment", "title", "status", "passed", "started_at", "duration_s", "score", "recovery_met",
        "time_to_recover_s", "recovery_window_s", "fault_types", "gate_breached", "anomaly",
        "est_error_rate", "actual_error_rate", "est_latency_p99_ms", "actual_latency_p99_ms",
        "est_recovery_s", "actual_recovery_s",
    ]  # fmt: skip
    rows = []
    for r in summary.runs:
        est = {c.metric: c for c in r.estimate}
        row = [r.run_id, r.experiment, r.title, r.status, r.passed, r.started_at, r.duration_s, r.score]
        row += [r.recovery_met, r.time_to_recover_s, r.recovery_window_s, r.fault_types, r.gate_breached]
        row.append(r.anomaly)
        for metric in ("error_rate", "latency_p99_ms", "recovery_seconds"):
            row += [est[metric].estimate, est[metric].actual]
        rows.append(row)
    return columns, rows


def _export_summary(summary: Any, path: Path, fmt: str | None) -> None:
    from faultplane.services.evidence import EvidenceError, export_rows

    columns, rows = _flat_runs(summary)
    try:
        written = export_rows(columns, rows, path, fmt)
    except EvidenceError as exc:
        _fail(str(exc))
    err_console.print(f"wrote {len(rows)} run(s) to {written}")


def _print_summary(summary: Any) -> None:
    if not summary.runs_total:
        console.print(
            f"no finished runs in {summary.store}: run an experiment with `faultplane run <experiment>`"
        )
        return
    cards = Table(
        "experiment", "runs", "grade", "score", "pass rate", "trend", "recovery p50 s", "anomalies",
        title="Experiments (trailing 10 runs)",
    )  # fmt: skip
    colours = {"A": "green", "B": "cyan", "C": "yellow", "D": "red"}
    for c in summary.experiments:
        trend = {"improving": "[green]improving[/]", "degrading": "[red]degrading[/]"}.get(c.trend, c.trend)
        cards.add_row(
            c.experiment, str(c.runs), f"[{colours[c.grade]}]{c.grade}[/]", f"{c.score:.1f}",
            f"{c.pass_rate:.0%}", trend, _num(c.recovery_median_s), str(len(c.anomalies)) if c.anomalies else "",
        )  # fmt: skip
    console.print(cards)
    runs = Table(
        "run", "experiment", "status", "started", "recover s", "est s", "p99 ms est/act",
        "err est/act", "score", "",
        title=f"Runs (last {summary.runs_shown} of {summary.runs_total})",
    )  # fmt: skip
    for r in summary.runs:
        est = {c.metric: c for c in r.estimate}
        flag = "[red]anomaly[/]" if r.anomaly else ""
        runs.add_row(
            r.run_id, r.experiment, r.status or "", timestamp(r.started_at),
            _num(r.time_to_recover_s), _num(est["recovery_seconds"].estimate),
            f"{_num(est['latency_p99_ms'].estimate, '{:g}')}/{_num(est['latency_p99_ms'].actual, '{:g}')}",
            f"{_num(est['error_rate'].estimate, '{:g}')}/{_num(est['error_rate'].actual, '{:g}')}",
            f"{r.score:.0f}", flag,
        )  # fmt: skip
    console.print(runs)
    for c in summary.experiments:
        if c.trend in ("improving", "degrading"):
            console.print(f"[bold]{c.experiment}[/] {c.trend}: {c.trend_reason}")
        for a in c.anomalies:
            console.print(f"[red]anomaly[/] {a.run_id} ({a.experiment}): {a.reason}")


@app.command("baseline", cls=Command)
def baseline_cmd(
    probe: Annotated[str, typer.Option("--probe", "-p", help="the steady-state probe's name")],
    experiment: ExperimentOpt = None,
    method: Annotated[
        str, typer.Option("--method", "-m", help="mean_ksigma | percentile | mad")
    ] = "mean_ksigma",
    k: Annotated[float, typer.Option("-k", help="deviations for mean_ksigma and mad")] = 3.0,
    percentiles: Annotated[
        str, typer.Option("--percentiles", help="low,high for --method percentile")
    ] = "1,99",
    phase: Annotated[
        str, typer.Option("--phase", help="hypothesis_before (baseline readings) | hypothesis_after | any")
    ] = "hypothesis_before",
    value_path: Annotated[
        str | None, typer.Option("--value-path", help="dotted path to the number in a structured output")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="newest readings used")] = 1000,
    output: Annotated[Literal["text", "json", "yaml"], FormatOpt] = "text",
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Derive a `range` tolerance for a probe from its readings in past runs."""
    output = chosen(output, as_json)
    from faultplane.core.formats import dumps
    from faultplane.services.evidence import EvidenceError, probe_baseline

    try:
        lo, hi = (float(x) for x in percentiles.split(","))
    except ValueError:
        _fail(f"--percentiles: {percentiles!r}; fix: two numbers, e.g. 1,99")
    st = _open(store)
    try:
        b = probe_baseline(
            st, probe, experiment, method=method, k=k, percentiles=(lo, hi),
            phase=None if phase == "any" else phase, value_path=value_path, limit=limit,
        )  # fmt: skip
    except EvidenceError as exc:
        _fail(str(exc))
    if output != "text":
        print(dumps(b.model_dump(mode="json"), output))
        return
    console.print(
        f"[bold]{probe}[/]: {b.n} reading(s)  mean {b.mean:.6g}  sd {b.std:.6g}  median {b.median:.6g}  "
        f"MAD {b.mad:.6g}"
    )
    console.print(f"{b.method} tolerance: [bold]{{type: range, range: [{b.low:.6g}, {b.high:.6g}]}}[/]")


def register(parent: typer.Typer) -> None:
    """Mount as `faultplane analyze` (for faultplane.cli.main's `_COMMAND_MODULES`)."""
    parent.add_typer(app, name="analyze")
