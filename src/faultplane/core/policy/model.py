"""The policy's schema: which rules a policy file may set, their defaults, and what a valid file is.

The defaults are the strict built-in policy (in force when no file exists); `faultplane.policy.example.yaml`
shows every field. How files are found and combined is `layers` and `combine`; what each rule decides lives
with its concern (`forbidden`, `gate_checks`, `stages`, `approvals`, `inventory`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from faultplane.core import approval as approvals
from faultplane.core.policy.inventory import Inventory

__all__ = [
    "KNOWN_FAULT_TYPES",
    "POLICY_FILENAMES",
    "ApprovalRules",
    "BlastRadiusRules",
    "ForbiddenRules",
    "GateRules",
    "LabelRule",
    "Policy",
    "PolicyError",
    "Stage",
]

POLICY_FILENAMES = ("faultplane.policy.yaml", "faultplane.policy.yml")
KNOWN_FAULT_TYPES = ("latency", "error", "timeout", "resource_exhaustion", "network_partition")


class PolicyError(ValueError):
    """The policy file cannot be used; the message names the file, the field and the fix."""


# ---- the policy model ------------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LabelRule(_Strict):
    """A key/value pair that marks production: a key matching `keys` whose value matches `values`."""

    keys: list[str] = Field(default_factory=list, description="globs on the normalised key (lower, `-`→`_`)")
    values: list[str] = Field(default_factory=list, description="globs on the normalised value")
    unless: list[str] = Field(default_factory=list, description="value globs that never match (real words)")


def _default_label_rules() -> dict[str, LabelRule]:
    prod_values = ["prod", "prod[-_.0-9]*", "production", "production[-_.0-9]*", "prd", "prd[-_.0-9]*"]
    return {
        "env": LabelRule(
            keys=[
                "env",
                "environment",
                "*_env",
                "*_environment",
                "env_name",
                "environment_name",
                "stage",
                "tier",
            ],
            values=prod_values,
        ),
        "cluster": LabelRule(
            keys=[
                "cluster",
                "*_cluster",
                "cluster_name",
                "context",
                "kube_context",
                "kubecontext",
                "*_context",
            ],
            values=["prod*", "production*", "prd*"],
            unless=[
                "product",
                "products",
                "product[-_.0-9]*",
                "products[-_.0-9]*",
                "productivity*",
                "produce*",
                "producer*",
                "prodig*",
                "product[!i]*",  # productcatalog, productsvc; never production*
            ],
        ),
        "namespace": LabelRule(
            keys=["namespace", "ns", "*_namespace", "kube_namespace"],
            values=prod_values,
        ),
        "production": LabelRule(
            keys=["production", "prod", "is_production", "is_prod", "*_production"],
            values=["true", "yes", "y", "1", "on"],
        ),
    }


class ForbiddenRules(_Strict):
    extend_defaults: bool = Field(
        default=True, description="add these rules to the built-in ones (false: replace them; use with care)"
    )
    words: list[str] = Field(
        default_factory=lambda: ["prod", "production", "prod[0-9]*", "prd", "prd[0-9]*"],
        description="sub-word globs that mark production anywhere in the experiment",
    )
    negations: list[str] = Field(
        default_factory=lambda: ["non", "not", "no", "pre"],
        description="a sub-word right before a forbidden word that negates it (`non-prod`, `pre-prod`)",
    )
    labels: dict[str, LabelRule] = Field(default_factory=_default_label_rules)
    allow: list[str] = Field(
        default_factory=list, description="globs of normalised values/hosts/words that are NOT production"
    )


class GateRules(_Strict):
    required: bool = Field(
        default=True, description="every experiment declares at least `min_gates` numeric gates"
    )
    min_gates: int = Field(default=1, ge=0)
    require_window: bool = Field(default=True, description="at least one gate has `for <N>s` with N > 0")


class Stage(_Strict):
    percent: float | None = Field(default=None, gt=0, le=100)
    count: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _some(self) -> Stage:
        if self.percent is None and self.count is None:
            raise ValueError("a stage needs `percent` or `count` (or both)")
        return self

    def describe(self) -> str:
        parts = []
        if self.percent is not None:
            parts.append(f"{self.percent:g}%")
        if self.count is not None:
            parts.append(f"{self.count} target{'s' if self.count != 1 else ''}")
        return " / ".join(parts)


class BlastRadiusRules(_Strict):
    stages: list[Stage] = Field(
        default_factory=lambda: [Stage(percent=10), Stage(percent=25), Stage(percent=50)], min_length=1
    )
    require_declared: bool = Field(
        default=True, description="an experiment with `targets:` must declare blast_radius"
    )
    greens_before_advice: int = Field(default=3, ge=1, description="the 'three greens' rule")
    greens_to_advance: int = Field(
        default=1,
        ge=1,
        le=1000,
        description="green runs that really injected a fault kind into a target at a stage before the next "
        "stage is earned for that target and kind",
    )


class ApprovalRules(_Strict):
    min_stage: int | None = Field(
        default=2, ge=0, description="runs at this stage index or above need an approval"
    )
    fault_types: list[str] = Field(
        default_factory=lambda: ["network_partition", "resource_exhaustion", "process_kill"],
        description="fault kinds, recognised by effect wherever they appear, that need a person's approval",
    )
    actions: list[str] = Field(
        default_factory=list, description="globs on `driver.action` that need approval"
    )
    ttl_hours: float = Field(default=24.0, gt=0)
    trusted_keys: list[str] = Field(
        default_factory=list,
        description="approver public keys, `ssh-ed25519 AAAA… name` (printed by `faultplane approvals keygen`)",
    )
    elicitation: list[str] = Field(
        default_factory=lambda: ["url", "form"],
        description="MCP elicitation modes a person may approve through: url (a local page), form (in-client)",
    )

    @model_validator(mode="after")
    def _keys_parse(self) -> ApprovalRules:
        if self.trusted_keys:
            try:
                approvals.parse_trusted_keys(self.trusted_keys)
            except approvals.ApprovalError as exc:
                raise ValueError(str(exc).removeprefix("approval.")) from None
        unknown = sorted(set(self.elicitation) - {"url", "form"})
        if unknown:
            raise ValueError(f"elicitation: unknown mode {unknown[0]!r}; use url and/or form")
        return self


class Policy(_Strict):
    version: int = 1
    forbidden: ForbiddenRules = Field(default_factory=lambda: ForbiddenRules())
    gates: GateRules = Field(default_factory=lambda: GateRules())
    blast_radius: BlastRadiusRules = Field(default_factory=lambda: BlastRadiusRules())
    approval: ApprovalRules = Field(default_factory=lambda: ApprovalRules())
    inventory: Inventory | None = Field(
        default=None, description="the lab's declared targets; when present, anything undeclared is refused"
    )
    source: str = Field(default="built-in strict default", exclude=True)

    @classmethod
    def strict_default(cls) -> Policy:
        return cls()
