"""Run the payment retry-storm scenario: experiments 1-4, then experiment 4 again with the fix.

Every outcome comes from the run itself (gates reading the load generator, the caller's and the pools'
counters): nothing here decides a verdict. `EXPECTED` is what the known case predicts; `matches_expectation`
compares the measurements with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from faultplane.examples.payment import EXPERIMENTS, FIX_VARIABLES
from faultplane.examples.payment.system import PaymentSystem

__all__ = ["EXPECTED", "Outcome", "matches_expectation", "outcome_table", "run_scenario"]

EXPECTED = {"1": "completed", "2": "completed", "3": "completed", "4": "aborted", "4+fix": "completed"}


@dataclass
class Outcome:
    step: str
    title: str
    run_id: str
    status: str
    verdict: str | None
    error_rate: float | None  # load errors / answers inside the fault window
    worst_p99_ms: float | None  # worst per-second p99 inside the fault window
    amplification: float | None
    limiter_rejections: int | None
    pool_timeouts: int | None
    breach: str | None
    postmortem: str
    journal: dict[str, Any]

    @property
    def expected(self) -> str:
        return EXPECTED[self.step]

    @property
    def as_expected(self) -> bool:
        return self.status == self.expected


def matches_expectation(outcomes: list[Outcome]) -> bool:
    return len(outcomes) == len(EXPECTED) and all(o.as_expected for o in outcomes)


def _outcome(step: str, journal: dict[str, Any]) -> Outcome:
    from faultplane.reports.evidence import evidence
    from faultplane.reports.postmortem import postmortem, window_figures

    ev = evidence(journal)
    win = window_figures(ev)
    caller = ev.caller or {}
    breach = (journal.get("gates") or {}).get("breach") or {}
    return Outcome(
        step=step,
        title=str(journal["experiment"].get("title")),
        run_id=journal["run_id"],
        status=journal["status"],
        verdict=journal.get("verdict"),
        error_rate=win["error_rate"],
        worst_p99_ms=win["worst_p99"],
        amplification=caller.get("retry_amplification"),
        limiter_rejections=caller.get("limiter_rejections"),
        pool_timeouts=sum(int(p.get("pool_timeouts") or 0) for p in ev.pools) if ev.pools else None,
        breach=breach.get("gate"),
        postmortem=postmortem(journal),
        journal=journal,
    )


async def run_scenario(
    system: PaymentSystem,
    *,
    store: Any | None = None,
    journal_dir: Path | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
    include_fix: bool = True,
    pause_s: float = 2.0,
) -> list[Outcome]:
    """Run the four experiments and the fix against a running `system`; one Outcome per run."""
    from faultplane.core.store import Store
    from faultplane.services.experiments import run_experiment
    from faultplane.services.runs import load_journal

    store = store if store is not None else Store()
    steps: list[tuple[str, Path, dict[str, Any]]] = [
        (str(i + 1), path, {}) for i, path in enumerate(EXPERIMENTS)
    ]
    if include_fix:
        steps.append(("4+fix", EXPERIMENTS[3], dict(FIX_VARIABLES)))
    outcomes = []
    for n, (step, path, extra) in enumerate(steps):
        if n:
            # let the previous run's last retries reach their deadline before the next baseline
            await anyio.sleep(pause_s)
        result = await run_experiment(
            path,
            variables={**system.variables(), **extra},
            store=store,
            on_event=on_event,
            journal_dir=journal_dir,
        )
        outcome = _outcome(step, load_journal(result.run_id, store))
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    return outcomes


def outcome_table(outcomes: list[Outcome]) -> Any:
    from rich.table import Table

    table = Table(title="payment retry storm: what each run measured", title_justify="left")
    for col in (
        "step",
        "status",
        "expected",
        "errors in fault",
        "worst p99",
        "retry amplification",
        "limiter refusals",
        "pool timeouts",
        "gate breached",
    ):
        table.add_column(col)
    for o in outcomes:
        mark = "[green]" if o.as_expected else "[red]"
        table.add_row(
            o.step,
            f"{mark}{o.status}[/]",
            o.expected,
            "-" if o.error_rate is None else f"{o.error_rate * 100:.2f}%",
            "-" if o.worst_p99_ms is None else f"{o.worst_p99_ms:.0f} ms",
            "-" if o.amplification is None else f"{o.amplification:.2f}x",
            "-" if o.limiter_rejections is None else str(o.limiter_rejections),
            "-" if o.pool_timeouts is None else str(o.pool_timeouts),
            o.breach or "-",
        )
    return table
