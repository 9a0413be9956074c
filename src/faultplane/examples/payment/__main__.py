"""python -m faultplane.examples.payment: start the payment system, run the retry-storm scenario, print it.

Exit status 0 when every run ended as the known case predicts (1-3 green, 4 stopped by its gate, 4 with the fix
green), 1 otherwise. `--report-dir DIR` also writes an HTML report per run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

import anyio
from rich.console import Console

from faultplane.examples.payment import SYSTEM
from faultplane.examples.payment.scenario import (
    Outcome,
    matches_expectation,
    outcome_table,
    run_scenario,
)
from faultplane.examples.payment.system import payment_system


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faultplane.examples.payment", description=__doc__)
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PAYMENT_DSN") or None,
        help="PostgreSQL for the connection pools (default: $PAYMENT_DSN, else the embedded pool)",
    )
    parser.add_argument("--report-dir", type=Path, default=None, help="write one HTML report per run here")
    parser.add_argument("--no-fix", action="store_true", help="stop after experiment 4")
    parser.add_argument(
        "--serve",
        action="store_true",
        help="only start the system, print the --var options its experiments need, and serve until Ctrl-C",
    )
    args = parser.parse_args(argv)
    console = Console()
    if args.serve:
        return _serve(args.dsn, console)

    def shown(o: Outcome) -> None:
        mark = "[green]as expected[/]" if o.as_expected else f"[red]expected {o.expected}[/]"
        console.print(f"[bold]{o.step}[/] {o.title}: [bold]{o.status}[/] ({mark}) run {o.run_id}")
        console.print(f"  {o.postmortem}", highlight=False)
        if args.report_dir:
            from faultplane.reports.html import write_report

            path = write_report(o.journal, args.report_dir / f"payment-{o.step}-{o.run_id}.html")
            console.print(f"  report: {path}")

    with payment_system(dsn=args.dsn, **SYSTEM) as system:
        console.print(
            f"payment system up: caller {system.caller_url}, payment-service {', '.join(system.payment_urls)} "
            f"({system.pool_kind} pools of {system.pool_size})"
        )

        async def go() -> list[Outcome]:
            return await run_scenario(system, on_outcome=shown, include_fix=not args.no_fix)

        outcomes = anyio.run(go)
    console.print(outcome_table(outcomes))
    ok = matches_expectation(outcomes) if not args.no_fix else all(o.as_expected for o in outcomes)
    console.print(
        "[green]outcomes match the known case[/]" if ok else "[red]outcomes differ from the known case[/]"
    )
    return 0 if ok else 1


def _serve(dsn: str | None, console: Console) -> int:
    import signal
    import threading

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with payment_system(dsn=dsn, **SYSTEM) as system:
        options = " ".join(f"--var {k}={v}" for k, v in system.variables().items())
        print(f"payment system up; run its experiments with: {options}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
