"""`faultplane demo`: a real service on loopback, a real fault, a journal — no setup needed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

EXPERIMENT = Path(__file__).with_name("demo-latency.yaml")


@contextmanager
def demo_service(port: int = 0) -> Iterator[str]:
    """Start the demo service as a subprocess; yield its base URL; always stop it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultplane.examples.demo_service", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError(
                f"demo service did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}"
            )
        yield f"http://127.0.0.1:{int(line.split()[-1])}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_demo(console: Console, port: int = 0) -> int:
    from faultplane.cli.progress import RunProgress, print_summary
    from faultplane.services.experiments import compact_journal, run_experiment
    from faultplane.services.runs import load_journal

    console.print(f"[bold]Faultplane demo[/]: {EXPERIMENT.name}")
    with demo_service(port) as url:
        console.print(f"demo service listening on {url} (a real HTTP server on loopback)")
        progress = RunProgress(quiet=False)

        async def go() -> Any:
            with console.status("running …") as status:
                progress.status = status
                return await run_experiment(
                    EXPERIMENT, variables={"service_url": url}, on_event=progress, handle_signals=True
                )

        result = anyio.run(go)
    print_summary(result)
    journal = compact_journal(load_journal(result.run_id))
    outputs = _probe_outputs(load_journal(result.run_id))
    table = Table(
        "section", "activity", "status", "seconds", "output", title="journal summary", title_justify="left"
    )
    for a in journal["activities"]:
        out = outputs.get((a["section"], a["name"]))
        table.add_row(
            a["section"],
            a["name"],
            a["status"],
            f"{a['seconds']:.3f}",
            f"{out} ms" if isinstance(out, float) else "",
        )
    console.print(table)
    console.print(
        f"gate samples recorded: {journal['gate_samples']}; breach: {journal['gate_breach'] or 'none'}"
    )
    return int(result.exit_code)


def _probe_outputs(journal: dict) -> dict[tuple[str, str], object]:
    """(section, activity name) -> output, for showing measured latencies next to each probe."""
    out: dict[tuple[str, str], object] = {}
    for key in ("before", "after"):
        for p in (journal["steady_states"].get(key) or {}).get("probes", []):
            out[(f"hypothesis_{key}", p["activity"]["name"])] = p.get("output")
    for r in journal.get("run", []):
        out[("method", r["activity"]["name"])] = r.get("output")
    return out
