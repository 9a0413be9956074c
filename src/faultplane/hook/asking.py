"""What the hook asks the policy and the engine, and how it says no.

Decides how a judgement reaches the heavy parts, loaded only when a command really involves chaos: the policy
in force (unreadable: nothing may run), the store for the blast-radius history (unavailable: stages start at
0, the strict reading), an experiment checked by the engine's own evaluation (`services.prepared`; one it
cannot read is refused), and values scanned for production names and, with a target inventory, for targets
the lab does not declare. `Refuse` carries the reason shown to the agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

TYPE_CHECKING = False  # typing itself costs the hook ~5 ms; annotations are strings here anyway
if TYPE_CHECKING:
    from typing import Any

    from faultplane.core.policy import Policy
    from faultplane.core.store import Store

__all__ = ["PolicyAsker", "Refuse"]


class Refuse(Exception):
    pass


class PolicyAsker:
    """The part of a judge that asks: the policy, the store, the engine's decision on an experiment."""

    def __init__(self, cwd: Path, policy: Policy | None = None, store: Store | None = None) -> None:
        self.cwd = cwd
        self._policy = policy
        self._store = store
        self.checked: list[str] = []

    def policy(self) -> Policy:
        if self._policy is None:
            from faultplane.core.policy import load_policy

            try:
                self._policy = load_policy(start=self.cwd)
            except ValueError as exc:
                raise Refuse(f"the policy cannot be read, so nothing may run: {exc}") from None
        return self._policy

    def store(self, path: str | None = None) -> Store | None:
        from faultplane.core.store import Store, open_store

        if path:
            return Store(path if Path(path).is_absolute() else self.cwd / path)
        if self._store is None:
            try:
                self._store = open_store()
            except Exception:
                return None  # history unavailable: stages start at 0, which is the strict reading
        return self._store

    def experiment(
        self,
        source: str | Path | Mapping[str, Any],
        label: str,
        *,
        variables: Mapping[str, Any] | None = None,
        approval_token: str | None = None,
        store_path: str | None = None,
        server_asks: bool = False,
    ) -> None:
        """`server_asks`: the Faultplane MCP server asks a person itself (elicitation) when only an approval is
        missing, and its engine verifies the answer, so the hook leaves that one refusal to it."""
        from faultplane.core.formats import ExperimentError
        from faultplane.services.prepared import decide, prepare

        try:
            prepared = prepare(source, variables)
        except (ExperimentError, LookupError, OSError, ValueError) as exc:
            raise Refuse(f"cannot read experiment {label} to check it against the policy: {exc}") from None
        self.checked.append(label)
        decision = decide(prepared, self.policy(), self.store(store_path), approval_token)
        if server_asks and all(v.rule == "approval.required" for v in decision.violations):
            return
        if not decision.allowed:
            lines = [f"Faultplane policy refuses experiment {label} ({decision.policy_source}):"]
            lines += [f"- [{v.rule}] {v.field}: {v.message} Fix: {v.fix}" for v in decision.violations]
            raise Refuse("\n".join(lines))

    def scan_values(self, values: Mapping[str, Any], label: str) -> None:
        from faultplane.hook.names import production_finding

        policy = self.policy()
        found = production_finding(values, policy)
        if found:
            raise Refuse(
                f"Faultplane policy refuses {label}: {found}. Instead: point it at a staging or local target."
            )
        if policy.inventory is not None:
            # the lab's declared targets, as the engine and the MCP server apply them: anything else is refused
            from faultplane.core.policy import undeclared

            missing = undeclared(dict(values), policy.inventory)
            if missing:
                v = missing[0]
                raise Refuse(
                    f"Faultplane policy refuses {label}: [{v.rule}] {v.message} (the policy's target inventory "
                    f"lists the lab; {policy.source}). Instead: {v.fix}."
                )
