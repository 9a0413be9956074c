"""The policy in force is the strictest combination of the floor, the user's, the project's and --policy/env."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from guard_helpers import APPROVER_PASSPHRASE, Approver, base_experiment

from faultplane.core.policy import Policy, evaluate, find_forbidden, load_policy
from faultplane.core.policy.combine import combine
from faultplane.core.policy.layers import loosening_approved, policy_file_hash, signature_path

LAX = "gates: {required: false, min_gates: 0, require_window: false}\napproval: {min_stage: null}\n"


STRICT_PROJECT = "forbidden: {words: [live]}\napproval: {min_stage: 1, fault_types: [latency]}\n"


@pytest.mark.parametrize("via", ["argument", "env"])
def test_explicit_policy_tightens_but_cannot_loosen_the_project(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    (project / "faultplane.policy.yaml").write_text(STRICT_PROJECT)
    lax = tmp_path / "lax.yaml"
    lax.write_text(
        LAX + "forbidden: {extend_defaults: false, words: [], labels: {}, negations: [non, pre, staging]}\n"
    )
    if via == "env":
        monkeypatch.setenv("FAULTPLANE_POLICY", str(lax))
        pol = load_policy()
    else:
        pol = load_policy(lax)
    assert pol.gates.required and pol.approval.min_stage == 1
    assert "live" in pol.forbidden.words and "prod" in pol.forbidden.words
    assert "latency" in pol.approval.fault_types and "network_partition" in pol.approval.fault_types
    assert "staging" not in pol.forbidden.negations
    assert str(lax) in pol.source


def test_user_policy_applies_with_the_project(project: Path, tmp_path: Path) -> None:
    user = Path(__import__("os").environ["XDG_CONFIG_HOME"]) / "faultplane"
    user.mkdir(parents=True)
    (user / "policy.yaml").write_text("forbidden: {words: [corpnet]}\n")
    (project / "faultplane.policy.yaml").write_text(LAX)
    pol = load_policy()
    assert "corpnet" in pol.forbidden.words
    assert pol.gates.required  # the user's file leaves gates at the strict default, so they stay required
    assert find_forbidden(base_experiment(configuration={"h": "corpnet-db"}), pol.forbidden)


def test_a_nested_git_does_not_escape_the_project_policy(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "faultplane.policy.yaml").write_text("forbidden: {words: [live]}\n")
    nested = project / "scratch" / "sub"
    (nested / ".git").mkdir(parents=True)
    (nested / "faultplane.policy.yaml").write_text(LAX)
    monkeypatch.chdir(nested)
    pol = load_policy()
    assert "live" in pol.forbidden.words
    assert pol.gates.required  # the lax file inside the nested repo cannot undo the project's strictness


def test_a_lax_file_above_the_project_loosens_nothing(project: Path, tmp_path: Path) -> None:
    (tmp_path / "faultplane.policy.yaml").write_text(LAX)
    pol = load_policy()
    assert pol.gates.required and pol.approval.min_stage == 2


@pytest.mark.parametrize(
    "text",
    [
        "forbidden: {extend_defaults: false, words: [], labels: {}}\n",
        "forbidden: {allow: ['*', 'prod*', 'prod1']}\n",
        "forbidden: {negations: [non, pre, not, 'no', prod]}\n",
        "approval: {fault_types: []}\n",
        "forbidden: {labels: {env: {unless: ['*']}}}\n",
    ],
)
def test_no_policy_file_disables_the_production_floor(project: Path, text: str) -> None:
    (project / "faultplane.policy.yaml").write_text(text)
    pol = load_policy()
    doc = base_experiment(targets=[{"name": "x", "labels": {"env": "prod1"}}], configuration={"h": "proddb"})
    decision = evaluate(doc, policy=pol, store=None)
    assert not decision.allowed and any(v.rule.startswith("forbidden") for v in decision.violations)
    assert "network_partition" in pol.approval.fault_types


def test_combine_takes_the_stricter_value_of_every_field() -> None:
    a = Policy.model_validate({"gates": {"required": False}, "blast_radius": {"stages": [{"percent": 5}]}})
    b = Policy.model_validate({"approval": {"min_stage": 3, "ttl_hours": 2}})
    c = combine([a, b])
    assert c.gates.required and [s.percent for s in c.blast_radius.stages] == [5]
    assert c.approval.min_stage == 2 and c.approval.ttl_hours == 2  # a (default) asks approval from stage 2


def test_a_file_without_a_signature_approves_nothing(tmp_path: Path) -> None:
    assert loosening_approved(tmp_path / "x.yaml", ["ssh-ed25519 AAAA x"]) == (None, None)


# ---- signed loosening --------------------------------------------------------------------------------------------

LAB = LAX + "forbidden: {extend_defaults: false, words: [], labels: {}, allow: ['*prod*', '*']}\n"


def _user_policy(text: str) -> Path:
    folder = Path(os.environ["XDG_CONFIG_HOME"]) / "faultplane"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "policy.yaml"
    path.write_text(text)
    return path


def _sign(approver: Approver, policy_file: Path, *, data: bytes | None = None, **kw: Any) -> Path:
    """What a person does: sign the sha256 of the file's bytes for purpose `policy`, token beside the file."""
    from faultplane.core import approval as approvals

    digest = policy_file_hash(policy_file.read_bytes() if data is None else data)
    key = approvals.load_signing_key(approver.key_path, APPROVER_PASSPHRASE)
    token = approvals.sign_approval(
        digest, key=key, trusted_keys=[approver.line], purpose=kw.pop("purpose", "policy"), record=False, **kw
    ).token
    sig = signature_path(policy_file)
    sig.write_text(token + "\n")
    return sig


def _is_strict(pol: Policy) -> bool:
    return pol.gates.required and pol.approval.min_stage == 2


def _production_refused(pol: Policy) -> bool:
    doc = base_experiment(targets=[{"name": "x", "labels": {"env": "prod1"}}], configuration={"h": "proddb"})
    return any(v.rule.startswith("forbidden") for v in evaluate(doc, policy=pol, store=None).violations)


@pytest.fixture
def alice(tmp_path: Path) -> Approver:
    return Approver(tmp_path / "keys", "alice")


@pytest.fixture
def mallory(tmp_path: Path) -> Approver:
    return Approver(tmp_path / "agent-keys", "mallory")


@pytest.mark.parametrize("via", ["argument", "env"])
def test_an_explicit_file_alone_cannot_loosen_the_strict_default(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    lax = tmp_path / "lax.yaml"
    lax.write_text(LAB)
    if via == "env":
        monkeypatch.setenv("FAULTPLANE_POLICY", str(lax))
    pol = load_policy(lax if via == "argument" else None)
    assert _is_strict(pol) and _production_refused(pol)
    assert str(lax) in pol.source


@pytest.mark.parametrize("via", ["argument", "env"])
def test_an_explicit_file_cannot_loosen_the_users_policy(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    _user_policy("approval: {min_stage: 1}\nblast_radius: {greens_to_advance: 3}\n")
    lax = tmp_path / "lax.yaml"
    lax.write_text(LAB + "blast_radius: {greens_to_advance: 1}\n")
    if via == "env":
        monkeypatch.setenv("FAULTPLANE_POLICY", str(lax))
    pol = load_policy(lax if via == "argument" else None)
    assert pol.approval.min_stage == 1 and pol.gates.required
    assert pol.blast_radius.greens_to_advance == 3


@pytest.mark.parametrize("where", ["project", "argument", "env"])
def test_a_loosening_signed_by_a_key_the_user_trusts_applies(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, alice: Approver, where: str
) -> None:
    _user_policy(alice.policy_yaml())
    lab = project / "faultplane.policy.yaml" if where == "project" else tmp_path / "lab.yaml"
    lab.write_text(LAB)
    _sign(alice, lab)
    if where == "env":
        monkeypatch.setenv("FAULTPLANE_POLICY", str(lab))
    pol = load_policy(lab if where == "argument" else None)
    assert not pol.gates.required and pol.approval.min_stage is None
    assert "loosening signed by alice" in pol.source
    assert _production_refused(pol)  # a signed file still cannot switch the production floor off


def test_a_signed_loosening_is_still_tightened_by_unsigned_files(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, alice: Approver
) -> None:
    _user_policy(alice.policy_yaml())
    lab = project / "faultplane.policy.yaml"
    lab.write_text(LAB)
    _sign(alice, lab)
    strict = tmp_path / "strict.yaml"
    strict.write_text("approval: {min_stage: 1}\nforbidden: {words: [live]}\n")
    monkeypatch.setenv("FAULTPLANE_POLICY", str(strict))
    pol = load_policy()
    assert pol.approval.min_stage == 1 and "live" in pol.forbidden.words
    # a field the unsigned file leaves out is the strict default there, so it tightens that too
    assert pol.gates.required


def _forgeries(alice: Approver, mallory: Approver, lab: Path) -> dict[str, Any]:
    """Each way an agent might fake the approval of `lab` (the user's policy trusts alice)."""

    def other_key() -> None:
        _sign(mallory, lab)

    def self_vouching() -> None:
        # the file names the agent's key as trusted and is signed by it: a file cannot vouch for itself
        lab.write_text(LAB + f"approval:\n  min_stage: null\n  trusted_keys: [{json.dumps(mallory.line)}]\n")
        _sign(mallory, lab)

    def other_bytes() -> None:
        _sign(alice, lab, data=b"gates: {required: false}\n")  # alice approved a different file

    def edited_after_signing() -> None:
        _sign(alice, lab)
        lab.write_text(lab.read_text() + "# one more line\n")

    def whitespace_after_signing() -> None:
        _sign(alice, lab)
        lab.write_bytes(lab.read_bytes() + b" ")

    def experiment_purpose() -> None:
        _sign(alice, lab, purpose="experiment")  # an experiment approval of the same hash

    def expired() -> None:
        _sign(alice, lab, ttl_s=60, now=time.time() - 3600)

    def garbage() -> None:
        signature_path(lab).write_text("fpa2.not-a-token.x")

    def huge() -> None:
        signature_path(lab).write_text("A" * 100_000)

    return {
        f.__name__: f
        for f in (
            other_key,
            self_vouching,
            other_bytes,
            edited_after_signing,
            whitespace_after_signing,
            experiment_purpose,
            expired,
            garbage,
            huge,
        )
    }


FORGERIES = [
    "other_key",
    "self_vouching",
    "other_bytes",
    "edited_after_signing",
    "whitespace_after_signing",
    "experiment_purpose",
    "expired",
    "garbage",
    "huge",
]


@pytest.mark.parametrize("forgery", FORGERIES)
@pytest.mark.parametrize("where", ["project", "env"])
def test_a_forged_loosening_approves_nothing(
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    alice: Approver,
    mallory: Approver,
    forgery: str,
    where: str,
) -> None:
    _user_policy(alice.policy_yaml("  min_stage: 2\n"))
    lab = project / "faultplane.policy.yaml" if where == "project" else tmp_path / "lab.yaml"
    lab.write_text(LAB)
    if where == "env":
        monkeypatch.setenv("FAULTPLANE_POLICY", str(lab))
    _forgeries(alice, mallory, lab)[forgery]()
    pol = load_policy()
    assert pol.gates.required and pol.approval.min_stage == 2, pol.source
    assert "loosening signed by" not in pol.source and "not accepted" in pol.source
    assert _production_refused(pol)


def test_without_a_user_policy_no_key_can_approve_a_loosening(
    project: Path, alice: Approver, mallory: Approver
) -> None:
    lab = project / "faultplane.policy.yaml"
    lab.write_text(LAB + f"approval:\n  trusted_keys: [{json.dumps(alice.line)}]\n")
    _sign(alice, lab)
    pol = load_policy()
    assert "loosening signed by" not in pol.source and "trusts no approver key" in pol.source


def test_an_mcp_session_key_never_approves_a_loosening(
    project: Path, alice: Approver, mallory: Approver
) -> None:
    from faultplane.core import approval as approvals

    _user_policy(alice.policy_yaml())
    lab = project / "faultplane.policy.yaml"
    lab.write_text(LAB)
    _sign(mallory, lab)
    with approvals.session_trust(*approvals.parse_trusted_keys([mallory.line])):
        pol = load_policy()
    assert "loosening signed by" not in pol.source and pol.gates.required


def test_a_project_file_cannot_add_an_approver_the_user_does_not_trust(
    project: Path, alice: Approver, mallory: Approver
) -> None:
    _user_policy(alice.policy_yaml())
    (project / "faultplane.policy.yaml").write_text(mallory.policy_yaml())
    pol = load_policy()
    assert pol.approval.trusted_keys == []  # only keys every layer that names keys names
    (project / "faultplane.policy.yaml").write_text(alice.policy_yaml())
    assert load_policy().approval.trusted_keys == [alice.line]


@pytest.mark.parametrize(
    "allow",
    [
        ["*prod*"],
        ["*"],
        ["prod*", "*prod"],
        ["prod1", "proddb", "prod"],
        ["*p*r*o*d*"],
        ["?rod*", "*production*"],
    ],
)
@pytest.mark.parametrize(
    "doc",
    [
        {"targets": [{"name": "x", "labels": {"env": "prod"}}]},
        {"targets": [{"name": "x", "labels": {"environment": "production"}}]},
        {"configuration": {"h": "prod-db.internal"}},
        {"configuration": {"u": "postgres://u@prod1.db:5432/x"}},
        {"configuration": {"ns": "kubectl -nprod delete pod x"}},
    ],
)
def test_no_allow_pattern_disables_the_production_rules(
    project: Path, allow: list[str], doc: dict[str, Any]
) -> None:
    (project / "faultplane.policy.yaml").write_text(f"forbidden: {{allow: {json.dumps(allow)}}}\n")
    pol = load_policy()
    decision = evaluate(base_experiment(**doc), policy=pol, store=None)
    assert any(v.rule.startswith("forbidden") for v in decision.violations), (allow, doc)


@pytest.mark.parametrize("git_kind", ["dir", "file"])  # a worktree or submodule has a `.git` file
@pytest.mark.parametrize("depth", [1, 3])
def test_a_nested_repository_with_its_own_lax_files_does_not_escape(
    project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, git_kind: str, depth: int
) -> None:
    (project / "faultplane.policy.yaml").write_text(STRICT_PROJECT)
    nested = project.joinpath(*[f"n{i}" for i in range(depth)])
    nested.mkdir(parents=True)
    if git_kind == "dir":
        (nested / ".git").mkdir()
    else:
        (nested / ".git").write_text("gitdir: /elsewhere\n")
    (nested / "faultplane.policy.yaml").write_text(LAB)
    lax = tmp_path / "lax.yaml"
    lax.write_text(LAB)
    monkeypatch.setenv("FAULTPLANE_POLICY", str(lax))
    monkeypatch.chdir(nested)
    pol = load_policy()
    assert pol.approval.min_stage == 1 and "live" in pol.forbidden.words and pol.gates.required
    assert _production_refused(pol)


@pytest.mark.parametrize(
    "rollback_on",
    [
        "error_rate < 0 for 30s",
        "error_rate <= -0.5 for 30s",
        "error_rate > 1 for 30s",
        "availability > 1 for 30s",
        "availability < 0 for 30s",
        "latency_p99 < 0 for 30s",
        "throughput <= -1 for 30s",
        "error_rate > 100% for 30s",
    ],
)
def test_gates_that_cannot_trip_are_refused_at_phase_0(rollback_on: str) -> None:
    sli = rollback_on.split()[0]
    doc = base_experiment(slo_gates=[{"name": "g", "sli": sli, "rollback_on": rollback_on}])
    decision = evaluate(doc, policy=Policy(), store=None)
    assert not decision.allowed
    assert any("never" in v.message for v in decision.violations if v.rule.startswith("gates")), (
        decision.violations
    )


@pytest.mark.parametrize(
    "rollback_on", ["error_rate > 0 for 30s", "availability < 1 for 30s", "error_rate >= 1 for 5s"]
)
def test_gates_that_can_trip_pass(rollback_on: str) -> None:
    sli = rollback_on.split()[0]
    doc = base_experiment(slo_gates=[{"name": "g", "sli": sli, "rollback_on": rollback_on}])
    assert evaluate(doc, policy=Policy(), store=None).allowed


def test_combining_layers_keeps_every_stage_and_takes_the_smaller_sizes(project: Path) -> None:
    _user_policy("blast_radius: {stages: [{percent: 5}, {percent: 20}, {percent: 40}, {percent: 80}]}\n")
    (project / "faultplane.policy.yaml").write_text("approval: {min_stage: 1}\n")
    pol = load_policy()
    assert [s.percent for s in pol.blast_radius.stages] == [5, 20, 40]  # the fewer stages, each the smaller
    assert all(s.count is None for s in pol.blast_radius.stages)


@pytest.mark.parametrize("command", [["validate"], ["guard", "check"], ["run", "--dry-run"], ["run"]])
@pytest.mark.parametrize("elsewhere", ["outside", "nested-git"])
def test_running_from_outside_the_project_does_not_shed_its_policy(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], elsewhere: str
) -> None:
    from typer.testing import CliRunner

    from faultplane.cli.main import app

    # the project forbids a word of its own; the experiment inside it names that word
    (project / "faultplane.policy.yaml").write_text("forbidden: {words: [livecluster]}\n")
    exp = project / "experiments" / "exp.yaml"
    exp.parent.mkdir()
    exp.write_text(
        yaml.safe_dump(base_experiment(slo_gates=None, configuration={"h": "livecluster-db.internal"}))
    )
    # the agent runs it from a folder with a lax policy of its own, outside the project or in a nested repo
    other = tmp_path / "scratch" if elsewhere == "outside" else project / "experiments" / "sub"
    other.mkdir(parents=True)
    if elsewhere == "nested-git":
        (other / ".git").mkdir()
    (other / "faultplane.policy.yaml").write_text(LAB)
    monkeypatch.chdir(other)
    res = CliRunner().invoke(app, [*command, str(exp)])
    assert res.exit_code in (2, 3), res.output
    assert "livecluster" in res.output, res.output
