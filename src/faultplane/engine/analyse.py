"""Phase 4, analyse: the run's status (completed, deviated, failed, aborted, interrupted), its verdict in
words, the three-greens advice, and the exit code a command returns for it. A rollback or revert that failed
outranks everything: the system may still be under the fault."""

from __future__ import annotations

from faultplane.core.model import Journal
from faultplane.engine.journal import now
from faultplane.engine.runner import RunnerBase, _RunState

__all__ = ["EXIT_CODES", "EXIT_ROLLBACK_FAILED", "Analyse", "exit_code", "rollback_failed"]

EXIT_CODES = {"completed": 0, "deviated": 1, "failed": 1, "aborted": 3, "refused": 3, "interrupted": 130}


# a rollback or a driver's revert failed: the system may still be under the fault, whatever else happened
EXIT_ROLLBACK_FAILED = 5


def rollback_failed(journal: Journal) -> bool:
    """Did a rollback activity or a registered revert fail in this run?"""
    return any(r.status in ("failed", "timeout") for r in journal.rollbacks) or any(
        not r.get("ok", True) for r in journal.reverts
    )


def exit_code(journal: Journal) -> int:
    if journal.status != "refused" and rollback_failed(journal):
        return EXIT_ROLLBACK_FAILED
    if journal.status == "completed":
        after = (journal.steady_states.get("after") or {}).get("steady_state_met")
        return 0 if after in (None, True) else 1
    return EXIT_CODES.get(journal.status, 1)


class Analyse(RunnerBase):
    def analyse(self) -> Journal:
        """Phase 4: the run's outcome into the journal, which it finishes and returns."""
        st = self.state
        self.enter_phase("analyse")
        if st.interrupted:
            status = "interrupted"
        elif st.status in ("failed", "aborted"):
            status = st.status
        elif st.after_met is False or st.during_failed:
            status = "deviated"
        else:
            status = "completed"
        deviated = st.after_met is False or st.during_failed
        rolled_back_badly = any(e.startswith(("rollback ", "revert ")) for e in st.error)
        before_rollback = status
        if rolled_back_badly and status in ("completed", "deviated"):
            status = "failed"  # a run that may have left its fault behind did not complete
        if st.abort_reason and status == "aborted":
            st.error.insert(0, f"aborted: {st.abort_reason}")
        elif st.abort_reason and status == "interrupted":
            st.error.insert(0, f"interrupted: {st.abort_reason}")
        verdict = _verdict(before_rollback, st, self.dry_run)
        if rolled_back_badly:
            verdict = (
                "rollback failed: the system may still be under the fault; check it and revert by hand "
                f"(`faultplane drivers leases list` shows what is held). Before that: {verdict}"
            )
        advice = self._advice(status)
        if advice:
            verdict += ". " + " ".join(advice)  # two sentences, not one run-on
        end = now()
        self.writer.emit(
            {
                "event": "end",
                "status": status,
                "deviated": deviated,
                "end": end.isoformat(),
                "duration": (end - self.writer.journal.start).total_seconds(),
                "verdict": verdict,
                "error": "; ".join(st.error) or None,
            }
        )
        return self.writer.finish(blast_stage=getattr(self.policy_decision, "stage", None))

    def _advice(self, status: str) -> list[str]:
        """The three-greens advice, counting the run that just ended."""
        decision = self.policy_decision
        if decision is None or self.dry_run or self.policy is None:
            return []
        from faultplane.core.policy import advice_after_run

        green = (
            status == "completed" and self.state.before_met is not False and self.state.after_met is not False
        )
        try:
            return advice_after_run(
                self.writer.store, self.p.family, self.policy, green=green, stage=decision.stage
            )
        except Exception:  # advice is a courtesy; it must never cost the journal
            return []


def _verdict(status: str, st: _RunState, dry_run: bool) -> str:
    if dry_run:
        return "dry run: the plan is valid; nothing was executed"
    if status == "completed":
        return "steady state held: the hypothesis was not refuted"
    if status == "deviated":
        return "deviated: the steady state did not hold after the fault (a weakness found)"
    if status == "aborted":
        return f"aborted by a gate and rolled back: {st.abort_reason}"
    if status == "interrupted":
        return f"interrupted ({st.abort_reason or 'stopped'}); rollbacks ran"
    if st.before_met is False:
        return "failed: the system was not in its steady state before the method"
    return "failed: an action could not be carried out"
