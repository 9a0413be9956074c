"""Runtime strategies: when the hypothesis is checked, when rollbacks run, and what a run's outcome is —
Faultplane's rules, and Chaos Toolkit's under `ctk_compat` (docs/chaostoolkit.md lists each difference)."""

from __future__ import annotations

from contextvars import ContextVar

__all__ = [
    "CTK_COMPAT",
    "ctk_outcome",
    "ctk_play_rollbacks",
    "runs_after",
    "runs_before",
    "runs_during",
]

# Set for the duration of a run in Chaos Toolkit mode; providers read it (a process action's non-zero exit).
CTK_COMPAT: ContextVar[bool] = ContextVar("faultplane_ctk_compat", default=False)


def runs_before(strategy: str) -> bool:
    return strategy in ("default", "before-method-only", "continuously")


def runs_after(strategy: str) -> bool:
    return strategy in ("default", "after-method-only", "continuously")


def runs_during(strategy: str) -> bool:
    return strategy in ("during-method-only", "continuously")


def ctk_play_rollbacks(strategy: str, status: str, deviated: bool) -> bool:
    """chaoslib's `run_rollback`: `default` plays them unless the run failed or was interrupted (so also when
    the hypothesis was not met before the method and the method never ran); `deviated` only on deviation."""
    if strategy == "always":
        return True
    if strategy == "never":
        return False
    if strategy == "deviated":
        return deviated
    return status not in ("failed", "interrupted")


def ctk_outcome(probes: list[dict[str, object]]) -> str:
    """A hypothesis that was not met: `failed` when one of its probes raised, else `completed` — Chaos
    Toolkit's status for a tolerance that was merely not met."""
    return "failed" if any(p.get("status") != "succeeded" for p in probes) else "completed"
