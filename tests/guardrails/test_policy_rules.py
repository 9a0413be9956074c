"""Gate, blast-radius, three-greens and approval rules, with run history read from a real DuckDB store."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from guard_helpers import (
    REDIS_TARGET,
    Approver,
    base_experiment,
    fault_experiment,
    record_exposure,
    record_run,
)

from faultplane.core import approval as approvals
from faultplane.core.policy import (
    BlastRadiusRules,
    Policy,
    PolicyError,
    approval_hash,
    content_hash,
    evaluate,
    experiment_family,
    green_streak,
    load_policy,
)
from faultplane.core.store import Store
from faultplane.engine.lifecycle import evaluate_document
from policy_helpers import use_lab_policy

FAMILY = "payment-db-latency"


def _rules(doc: dict[str, Any], store: Store | None = None, **kw: Any) -> list[str]:
    return [v.rule for v in evaluate(doc, policy=kw.pop("policy", Policy()), store=store, **kw).violations]


# ---- gates -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "gate",
    [
        {"name": "errors", "sli": "error_rate", "rollback_on": "error_rate > 0.01 for 30s"},
        {"name": "errors", "sli": "error_rate", "rollback_on": "error_rate > 1% for 30s"},
        {"name": "p99", "sli": "latency_p99", "rollback_on": "latency_p99 > 800ms for 10s"},
        {"name": "p95", "sli": "latency_p95", "rollback_on": "latency_p95 >= 1.5s for 1m"},
        {"name": "avail", "sli": "availability", "rollback_on": "availability < 0.99 for 30s"},
        {
            "name": "probe",
            "sli": "probe",
            "rollback_on": "probe > 800 for 5s",
            "probe": {
                "type": "probe",
                "name": "p99",
                "provider": {"type": "http", "url": "http://127.0.0.1:1/"},
            },
        },
        {
            "name": "prom",
            "sli": "prometheus",
            "rollback_on": "errors > 5 for 15s",
            "prometheus": {"url": "http://127.0.0.1:9090", "query": "sum(rate(errors[1m]))"},
        },
    ],
)
def test_numeric_gate_with_window_is_accepted(gate: dict[str, Any]) -> None:
    assert _rules(base_experiment(slo_gates=[gate])) == []


def _gate(rollback_on: str, sli: str = "error_rate", name: str = "e", **extra: Any) -> list[dict[str, Any]]:
    """A one-gate `slo_gates` list, so the refusal table below lists only what each case changes."""
    return [{"name": name, "sli": sli, "rollback_on": rollback_on, **extra}]


@pytest.mark.parametrize(
    ("gates", "rule", "field"),
    [
        (None, "gates.required", "slo_gates"),
        ([], "gates.required", "slo_gates"),
        (_gate("error_rate > high for 30s"), "gates.numeric", "slo_gates[0].rollback_on"),
        (_gate("error_rate is bad"), "gates.numeric", "slo_gates[0].rollback_on"),
        (_gate("error_rate > 0.01"), "gates.window", "slo_gates"),
        (_gate("error_rate > 0.01 for 0s"), "gates.window", "slo_gates"),
        (_gate("latency_p99 > 800 for 5s"), "gates.numeric", "slo_gates[0].rollback_on"),
        (_gate("error_rate > 5 for 30s"), "gates.numeric", "slo_gates[0].rollback_on"),
        (_gate("error_rate > 0.01 for 5s", interval_s=10), "gates.window", "slo_gates[0].interval_s"),
        (_gate("magic > 1 for 5s", sli="magic"), "gates.numeric", "slo_gates[0].sli"),
        (_gate("probe > 800 for 5s", sli="probe", name="p"), "gates.numeric", "slo_gates[0]"),
        ("error_rate > 0.01", "gates.required", "slo_gates"),
    ],
)
def test_gate_without_number_or_window_is_refused(gates: Any, rule: str, field: str) -> None:
    decision = evaluate(base_experiment(slo_gates=gates), policy=Policy(), store=None)
    assert not decision.allowed
    hits = [v for v in decision.violations if v.rule == rule]
    assert hits, [str(v) for v in decision.violations]
    assert hits[0].field == field
    assert hits[0].fix


def test_one_windowed_gate_is_enough() -> None:
    gates = [
        {"name": "e", "sli": "error_rate", "rollback_on": "error_rate > 0.5"},
        {"name": "p", "sli": "latency_p99", "rollback_on": "latency_p99 > 800ms for 10s"},
    ]
    assert _rules(base_experiment(slo_gates=gates)) == []


def test_lab_policy_can_drop_the_gate_requirement(tmp_path: Path) -> None:
    # the person's own policy relaxes; `--policy`/$FAULTPLANE_POLICY alone would only tighten
    use_lab_policy("gates: {required: false, require_window: false}\n")
    assert _rules(base_experiment(slo_gates=None), policy=load_policy()) == []


# ---- blast radius stages -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("radius", "stage"),
    [
        ({"percent": 5}, 0),
        ({"percent": 10}, 0),
        ({"percent": 11}, 1),
        ({"percent": 25}, 1),
        ({"percent": 50}, 2),
        ({"percent": 75}, 3),
        ({"percent": 100}, 3),
    ],
)
def test_declared_radius_maps_to_a_stage(radius: dict[str, Any], stage: int) -> None:
    decision = evaluate(base_experiment(blast_radius=radius), policy=Policy(), store=None)
    assert decision.stage == stage


def test_first_stage_runs_without_history(store: Store) -> None:
    decision = evaluate(base_experiment(), policy=Policy(), store=store)
    assert decision.allowed and decision.stage == 0 and decision.allowed_stage == 0
    assert decision.stage_size == {"percent": 10.0}


def test_skipping_a_stage_needs_approval(store: Store) -> None:
    doc = fault_experiment(blast_radius={"percent": 25})
    decision = evaluate_document(doc, Policy(), store, None)
    assert not decision.allowed
    (v,) = decision.violations
    assert v.rule == "approval.required" and v.field == "blast_radius"
    assert "skips a stage" in v.message and "faultplane approve" in v.fix and "stage 0" in v.fix
    assert f"target {REDIS_TARGET!r} / fault kind 'timeout' lacks 1 green run(s)" in v.message


def test_next_stage_opens_after_a_green_exposure(store: Store) -> None:
    record_exposure(store, REDIS_TARGET, "timeout", 0)
    decision = evaluate_document(fault_experiment(blast_radius={"percent": 25}), Policy(), store, None)
    assert decision.allowed, [str(v) for v in decision.violations]
    assert (decision.stage, decision.allowed_stage) == (1, 1)


@pytest.mark.parametrize(
    ("target", "kind", "green"),
    [
        (REDIS_TARGET, "timeout", False),  # red
        ("loopback:6380", "timeout", True),  # another port is another target
        ("10.0.0.7:6379", "timeout", True),  # another host
        (REDIS_TARGET, "latency", True),  # another fault kind on the same target
        (REDIS_TARGET, "Timeout", True),  # kinds are the catalog's exact names
    ],
)
def test_exposure_of_another_target_kind_or_a_red_run_opens_nothing(
    store: Store, target: str, kind: str, green: bool
) -> None:
    record_exposure(store, target, kind, 0, green=green)
    decision = evaluate_document(fault_experiment(blast_radius={"percent": 25}), Policy(), store, None)
    assert [v.rule for v in decision.violations] == ["approval.required"]
    assert "skips a stage" in decision.violations[0].message


@pytest.mark.parametrize(
    "row",
    [
        {"green": True},
        {"green": True, "status": "aborted"},
        {"green": True, "dry_run": True},
    ],
)
def test_green_runs_of_the_family_without_exposure_open_nothing(store: Store, row: dict[str, Any]) -> None:
    """The old ground (a green run of the same family) is a label: it earns nothing without an injection."""
    for _ in range(3):
        record_run(store, FAMILY, 0, **row)
    decision = evaluate_document(fault_experiment(blast_radius={"percent": 25}), Policy(), store, None)
    assert [v.rule for v in decision.violations] == ["approval.required"]


def test_a_method_that_injects_nothing_a_journal_can_show_earns_no_stage(store: Store) -> None:
    record_exposure(store, REDIS_TARGET, "timeout", 0)
    for method in (
        base_experiment()["method"],  # a shell command with a `--delay` argument: a label, not evidence
        [{"type": "action", "name": "noop", "provider": {"type": "process", "path": "true"}}],
    ):
        doc = base_experiment(method=method, blast_radius={"percent": 25})
        decision = evaluate_document(doc, Policy(), store, None)
        assert [v.rule for v in decision.violations] == ["approval.required"], method
        assert "earn" in decision.violations[0].message


def test_exposure_of_another_family_counts_for_the_same_target(store: Store) -> None:
    record_exposure(store, REDIS_TARGET, "timeout", 0, family="some-other-experiment")
    doc = fault_experiment(blast_radius={"percent": 25}, title="A new title, a new family")
    assert evaluate_document(doc, Policy(), store, None).allowed


def test_greens_to_advance_counts_green_exposures_at_the_stage(store: Store) -> None:
    policy = Policy(blast_radius=BlastRadiusRules(greens_to_advance=3))
    doc = fault_experiment(blast_radius={"percent": 25})
    record_exposure(store, REDIS_TARGET, "timeout", 0)
    record_exposure(store, REDIS_TARGET, "timeout", 0)
    v = evaluate_document(doc, policy, store, None).violations[0]
    assert "lacks 1 green run(s) that really injected it at stage 0" in v.message and "2 of 3" in v.message
    record_exposure(store, REDIS_TARGET, "timeout", 0)
    assert evaluate_document(doc, policy, store, None).allowed


def test_stage_needing_approval_by_policy(store: Store) -> None:
    record_exposure(store, REDIS_TARGET, "timeout", 0)
    record_exposure(store, REDIS_TARGET, "timeout", 1)
    decision = evaluate_document(fault_experiment(blast_radius={"percent": 50}), Policy(), store, None)
    assert decision.stage == 2 and decision.allowed_stage == 2
    assert [v.rule for v in decision.violations] == ["approval.required"]
    assert "needs approval by policy" in decision.violations[0].message


def test_family_is_stable_across_edits_and_explicit_family_wins() -> None:
    a = base_experiment()
    b = base_experiment(description="edited", blast_radius={"percent": 25})
    assert experiment_family(a) == experiment_family(b) == FAMILY
    assert content_hash(a) != content_hash(b)
    assert experiment_family(base_experiment(family="Payments: DB")) == "payments-db"


def test_targets_without_radius_are_refused() -> None:
    decision = evaluate(base_experiment(blast_radius=None), policy=Policy(), store=None)
    assert [v.rule for v in decision.violations] == ["blast_radius.required"]
    assert "percent: 10" in decision.violations[0].fix


def test_no_targets_no_radius_is_the_first_stage() -> None:
    decision = evaluate(base_experiment(blast_radius=None, targets=None), policy=Policy(), store=None)
    assert decision.allowed and decision.stage == 0


def test_count_stages(tmp_path: Path, store: Store) -> None:
    use_lab_policy("blast_radius: {stages: [{count: 1}, {count: 3}, {count: 10}]}\n")
    pol = load_policy()
    assert evaluate(base_experiment(blast_radius={"count": 1}), policy=pol, store=store).allowed
    d = evaluate(base_experiment(blast_radius={"count": 2}), policy=pol, store=store)
    assert d.stage == 1 and not d.allowed
    d = evaluate(base_experiment(blast_radius={"percent": 10}), policy=pol, store=store)
    assert [v.rule for v in d.violations] == ["blast_radius.unit"]


def test_declared_stage_must_fit_its_size() -> None:
    d = evaluate(base_experiment(blast_radius={"percent": 50, "stage": 0}), policy=Policy(), store=None)
    assert [v.rule for v in d.violations] == ["blast_radius.stage"]


# ---- three greens ------------------------------------------------------------------------------------------


def test_three_greens_proposes_widening_instead_of_resilience(store: Store) -> None:
    for _ in range(3):
        record_run(store, FAMILY, 0)
    assert green_streak(store, FAMILY) == (0, 3)
    decision = evaluate(base_experiment(), policy=Policy(), store=store)
    assert decision.allowed and decision.green_streak == 3
    (advice,) = decision.advice
    assert "3 consecutive green runs at stage 0" in advice
    assert "not that it is resilient" in advice
    assert "percent: 25" in advice and "new fault type" in advice


def test_two_greens_or_a_broken_streak_give_no_advice(store: Store) -> None:
    record_run(store, FAMILY, 0)
    record_run(store, FAMILY, 0, green=False)
    record_run(store, FAMILY, 0)
    record_run(store, FAMILY, 0)
    assert green_streak(store, FAMILY) == (0, 2)
    assert evaluate(base_experiment(), policy=Policy(), store=store).advice == []


def test_streak_counts_only_the_current_stage(store: Store) -> None:
    record_run(store, FAMILY, 0)
    record_run(store, FAMILY, 0)
    record_run(store, FAMILY, 1)
    assert green_streak(store, FAMILY) == (1, 1)


# ---- approvals ---------------------------------------------------------------------------------------------


def test_approval_allows_a_skip_and_a_change_invalidates_it(store: Store, approver: Approver) -> None:
    doc = base_experiment(blast_radius={"percent": 25})
    pol = approver.policy()
    granted = approver.sign(approval_hash(doc), family=FAMILY)
    decision = evaluate(doc, policy=pol, store=store)
    assert decision.allowed and decision.approved_by == "alice"
    changed = base_experiment(blast_radius={"percent": 25}, description="one more word")
    decision = evaluate(changed, policy=pol, store=store)
    assert not decision.allowed
    assert "changed since" in decision.violations[0].message
    decision = evaluate(changed, policy=pol, store=store, approval_token=granted.token)
    assert not decision.allowed and "different version" in decision.violations[0].message


def test_explicit_token_verifies(store: Store, approver: Approver) -> None:
    doc = base_experiment(blast_radius={"percent": 25})
    granted = approver.sign(approval_hash(doc), family=FAMILY)
    for f in approvals.approvals_dir().glob("*.json"):
        f.unlink()  # only the token itself now
    assert evaluate(doc, policy=approver.policy(), store=store, approval_token=granted.token).allowed
    # the same signed token under a policy that does not trust alice's key approves nothing
    refused = evaluate(doc, policy=Policy(), store=store, approval_token=granted.token)
    assert not refused.allowed and "trusts no approver key" in refused.violations[0].message


def test_altered_and_expired_tokens_are_rejected(approver: Approver) -> None:
    chash = "a" * 64
    granted = approver.sign(chash, ttl_s=60)
    head, payload, sig = granted.token.split(".")
    flipped = "B" if sig[10] == "A" else "A"  # a character that carries six signature bits, always changed
    with pytest.raises(approvals.ApprovalError, match="signature"):
        approvals.verify_token(
            f"{head}.{payload}.{sig[:10]}{flipped}{sig[11:]}", chash, trusted_keys=[approver.line]
        )
    # the last character carries only two bits; another spelling of the same bytes is refused, not verified
    last = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".index(sig[-1])
    respelled = sig[:-1] + "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[last ^ 1]
    with pytest.raises(approvals.ApprovalError, match="signature is unreadable"):
        approvals.verify_token(f"{head}.{payload}.{respelled}", chash, trusted_keys=[approver.line])
    with pytest.raises(approvals.ApprovalError, match="expired"):
        approvals.verify_token(granted.token, chash, trusted_keys=[approver.line], now=time.time() + 120)
    with pytest.raises(approvals.ApprovalError, match="not a Faultplane approval"):
        approvals.verify_token("hello", chash, trusted_keys=[approver.line])


def test_key_file_is_private_and_encrypted(approver: Approver) -> None:
    assert approver.key_path.stat().st_mode & 0o777 == 0o600
    assert b"ENCRYPTED PRIVATE KEY" in approver.key_path.read_bytes()


@pytest.mark.parametrize(
    ("provider", "why"),
    [
        ({"type": "driver", "driver": "netproxy", "name": "partition", "arguments": {}}, "network_partition"),
        (
            {"type": "driver", "driver": "process", "name": "cpu_stress", "arguments": {}},
            "resource_exhaustion",
        ),
        (
            {"type": "python", "module": "m", "func": "f", "arguments": {"fault_type": "network_partition"}},
            "network_partition",
        ),
        (
            {
                "type": "http",
                "url": "http://127.0.0.1:1/",
                "arguments": {"fault": {"type": "resource_exhaustion"}},
            },
            "resource_exhaustion",
        ),
    ],
)
def test_risky_fault_types_need_approval(provider: dict[str, Any], why: str, approver: Approver) -> None:
    doc = base_experiment(method=[{"type": "action", "name": "inject", "provider": provider}])
    decision = evaluate(doc, policy=approver.policy(), store=None)
    assert [v.rule for v in decision.violations] == ["approval.required"]
    assert why in decision.violations[0].message
    approver.sign(approval_hash(doc), family=FAMILY)
    assert evaluate(doc, policy=approver.policy(), store=None).allowed


def test_engine_can_name_fault_types_from_its_registry() -> None:
    doc = base_experiment(
        method=[
            {"type": "action", "name": "x", "provider": {"type": "driver", "driver": "k8s", "name": "drain"}}
        ]
    )
    assert evaluate(doc, policy=Policy(), store=None).allowed
    decision = evaluate(doc, policy=Policy(), store=None, fault_type_of=lambda d, n: "resource_exhaustion")
    assert [v.rule for v in decision.violations] == ["approval.required"]


def test_policy_action_globs_need_approval(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("approval: {actions: ['kubernetes.delete_*']}\n")
    doc = base_experiment(
        method=[
            {
                "type": "action",
                "name": "x",
                "provider": {"type": "driver", "driver": "kubernetes", "name": "delete_pods"},
            }
        ]
    )
    decision = evaluate(doc, policy=load_policy(path), store=None)
    assert "kubernetes.delete_pods" in decision.violations[0].message


def test_engine_hash_and_family_are_used_when_given(approver: Approver) -> None:
    doc = base_experiment(blast_radius={"percent": 25})
    pol = approver.policy()
    approver.sign("a" * 64, family="fam")
    d = evaluate(doc, policy=pol, store=None, content_hash="c" * 64, family="fam", approval_hash="a" * 64)
    assert d.allowed and d.content_hash == "c" * 64 and d.family == "fam" and d.approval_hash == "a" * 64
    # an approval of the content hash alone (the file as written) approves nothing
    approver.sign("c" * 64, family="fam")
    d = evaluate(doc, policy=pol, store=None, content_hash="c" * 64, family="fam")
    assert not d.allowed


# ---- the policy file ---------------------------------------------------------------------------------------


def test_strict_default_when_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    pol = load_policy()
    assert pol.source == "built-in strict default"
    assert pol.gates.required and [s.percent for s in pol.blast_radius.stages] == [10, 25, 50]


def test_found_in_project_dir_from_a_subfolder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "faultplane.policy.yaml").write_text("approval: {min_stage: 1}\n")
    sub = tmp_path / "experiments" / "db"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    pol = load_policy()
    assert pol.approval.min_stage == 1 and pol.source.endswith("faultplane.policy.yaml")


def test_not_picked_up_from_outside_the_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "faultplane.policy.yaml").write_text("gates: {required: false}\n")
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    monkeypatch.chdir(project)
    assert load_policy().gates.required


def test_env_and_argument_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("approval: {min_stage: 1}\n")
    b.write_text("approval: {min_stage: 0}\n")
    monkeypatch.setenv("FAULTPLANE_POLICY", str(a))
    assert load_policy().approval.min_stage == 1
    assert load_policy(b).approval.min_stage == 0
    monkeypatch.setenv("FAULTPLANE_POLICY", str(tmp_path / "missing.yaml"))
    with pytest.raises(PolicyError, match="does not exist"):
        load_policy()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("gates: {requird: false}\n", "gates.requird"),
        ("blast_radius: {stages: [{}]}\n", "blast_radius.stages.0"),
        ("blast_radius: {stages: []}\n", "blast_radius.stages"),
        ("approval: {ttl_hours: -1}\n", "approval.ttl_hours"),
        ("- a\n- b\n", "must be a mapping"),
        ("gates: [\n", "not valid YAML"),
        ("forbidden: {labels: {env: {keyz: [a]}}}\n", "forbidden.labels.env.keyz"),
    ],
)
def test_bad_policy_file_names_field_and_fix(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "faultplane.policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert needle in str(info.value) and str(path) in str(info.value)


def test_policy_file_extends_the_builtin_rules(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("forbidden:\n  words: [live]\n  labels: {env: {values: [live]}}\n  allow: [prod-like]\n")
    pol = load_policy(path)
    assert {"prod", "production", "live"} <= set(pol.forbidden.words)
    assert "prod" in pol.forbidden.labels["env"].values and "live" in pol.forbidden.labels["env"].values
    assert "cluster" in pol.forbidden.labels
    doc = base_experiment(targets=[{"name": "x", "labels": {"env": "live"}}])
    assert "forbidden.labels.env" in _rules(doc, policy=pol)


def test_a_policy_file_cannot_drop_the_builtin_floor(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("forbidden: {extend_defaults: false, words: [live], labels: {}}\n")
    pol = load_policy(path)
    assert {"live", "prod", "production"} <= set(pol.forbidden.words)
    assert "prod" in pol.forbidden.labels["env"].values


def test_example_policy_file_is_the_strict_default() -> None:
    example = Path(__file__).resolve().parents[2] / "faultplane.policy.example.yaml"
    pol = load_policy(example)
    default = Policy()
    assert pol.model_dump() == default.model_dump()


def test_one_approval_covers_every_hash_of_the_same_content(approver: Approver) -> None:
    written, resolved = "d" * 64, "e" * 64
    keys = [approver.line]
    granted = approver.sign(written, also=[resolved])
    assert approvals.verify_token(granted.token, written, trusted_keys=keys).content_hash == written
    assert approvals.verify_token(granted.token, resolved, trusted_keys=keys).content_hash == resolved
    assert approvals.find_approval(resolved, trusted_keys=keys) is not None
    with pytest.raises(approvals.ApprovalError, match="different version"):
        approvals.verify_token(granted.token, "f" * 64, trusted_keys=keys)


def test_advice_after_the_third_green_run(store: Store) -> None:
    from faultplane.core.policy import advice_after_run

    record_run(store, FAMILY, 0)
    record_run(store, FAMILY, 0)
    assert advice_after_run(store, FAMILY, Policy(), green=False, stage=0) == []
    assert advice_after_run(store, FAMILY, Policy(), green=True, stage=1) == []
    (advice,) = advice_after_run(store, FAMILY, Policy(), green=True, stage=0)
    assert "3 consecutive green runs at stage 0" in advice


# ---- a gate needs something to measure it ------------------------------------------------------------------


@pytest.mark.parametrize("sli", ["error_rate", "latency_p99", "availability", "throughput"])
def test_a_load_gate_without_load_is_refused_naming_gate_and_fix(sli: str) -> None:
    op_value = "< 0.99" if sli == "availability" else "> 0.01"
    gate = {"name": "users-see-it", "sli": sli, "rollback_on": f"{sli} {op_value} for 10s"}
    doc = base_experiment(slo_gates=[gate], load=None)
    (v,) = evaluate(doc, policy=Policy(), store=None).violations
    assert v.rule == "gates.source" and v.field == "slo_gates[0].sli"
    assert "'users-see-it'" in v.message and "load:" in v.fix and "sli: probe" in v.fix
    assert evaluate(base_experiment(slo_gates=[gate]), policy=Policy(), store=None).allowed  # BASE has load


def test_a_prometheus_gate_needs_a_server() -> None:
    gate = {
        "name": "p99",
        "sli": "prometheus",
        "rollback_on": "prometheus > 0.5 for 10s",
        "prometheus": {"query": "histogram_quantile(0.99, rate(x[1m]))"},
    }
    assert _rules(base_experiment(slo_gates=[gate])) == ["gates.source"]
    gate["prometheus"] = {**gate["prometheus"], "url": "http://127.0.0.1:9090"}
    assert _rules(base_experiment(slo_gates=[gate])) == []


def test_a_probe_gate_needs_no_load() -> None:
    gate = {
        "name": "health",
        "sli": "probe",
        "rollback_on": "probe > 499 for 5s",
        "probe": {"type": "probe", "name": "h", "provider": {"type": "http", "url": "http://127.0.0.1:1/"}},
    }
    assert _rules(base_experiment(slo_gates=[gate], load=None)) == []


@pytest.mark.anyio
async def test_the_engine_refuses_an_unmeasurable_gate_instead_of_aborting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faultplane.engine.lifecycle import execute

    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FAULTPLANE_POLICY", raising=False)
    marker = tmp_path / "ran"
    doc = base_experiment(
        load=None,
        **{"steady-state-hypothesis": None},
        method=[
            {
                "type": "action",
                "name": "t",
                "provider": {"type": "process", "path": "touch", "arguments": [str(marker)]},
            }
        ],
    )
    journal = await execute(doc, store=Store(tmp_path / "s.duckdb"))
    assert journal.status == "refused" and "gates.source" in (journal.error or "") and not marker.exists()
