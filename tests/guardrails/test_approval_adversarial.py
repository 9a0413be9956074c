"""An agent running shell commands and Python as the same OS user tries to approve its own experiment.

Each class of attempt has several variants; every one must leave the experiment refused, with a one-line
reason, and (where the experiment would run) nothing executed."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from guard_helpers import APPROVER_PASSPHRASE, Approver, base_experiment, write_experiment

from faultplane.core import approval as approvals
from faultplane.core.policy import PolicyError, approval_hash, evaluate, load_policy
from faultplane.engine.lifecycle import execute
from faultplane.services.guard import approve_experiment, check_experiment, prepare

pytestmark = pytest.mark.anyio

FAMILY = "payment-db-latency"


@pytest.fixture
def project(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("FAULTPLANE_APPROVAL", approvals.PASSPHRASE_ENV, "FAULTPLANE_APPROVER_KEY"):
        monkeypatch.delenv(var, raising=False)
    return project


def wide() -> dict[str, Any]:
    """Stage 1 with no green run yet: needs a person."""
    return base_experiment(blast_radius={"percent": 25})


def marking(marker: Path, text: str = "ran") -> dict[str, Any]:
    """An experiment that really runs (a python action writes `marker`) and needs approval (stage 2)."""
    return base_experiment(
        targets=None,
        load=None,
        slo_gates=None,
        blast_radius={"percent": 50},
        **{"steady-state-hypothesis": None},
        method=[
            {
                "type": "action",
                "name": "mark",
                "provider": {
                    "type": "process",
                    "path": "/bin/sh",
                    "arguments": ["-c", f"printf {text} > {marker}"],
                },
            }
        ],
    )


LAB = "gates: {required: false}\n"


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None, stdin: Any = subprocess.DEVNULL) -> Any:
    base = {k: v for k, v in os.environ.items() if k not in (approvals.PASSPHRASE_ENV, "FAULTPLANE_POLICY")}
    return subprocess.run(
        [sys.executable, "-m", "faultplane.cli.main", *args],
        cwd=cwd,
        env={**base, **(env or {})},
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def one_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def legacy_token(content_hash: str, key: bytes, **extra: Any) -> str:
    """What the old `faultplane approve` minted: HMAC-SHA256 with a key file any local process can read."""
    now = time.time()
    body = {"h": content_hash, "f": FAMILY, "by": "alice", "iat": now, "exp": now + 3600, "why": "", **extra}
    payload = _b64(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    return f"fpa1.{payload}.{_b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())}"


def own_key_token(content_hash: str, principal: str = "alice", **body: Any) -> tuple[str, str]:
    """A key the agent made itself, signing a well-formed fpa2 token: (token, its public line)."""
    key = Ed25519PrivateKey.generate()
    kid = approvals.key_id(key.public_key())
    now = time.time()
    fields = {"v": 2, "for": "experiment", "h": content_hash, "f": FAMILY, "by": principal, "kid": kid}
    fields |= {"iat": now, "exp": now + 3600, "why": "", **body}
    payload = _b64(json.dumps(fields, sort_keys=True).encode())
    sig = key.sign(b"faultplane approval v2\x00" + payload.encode())
    return f"fpa2.{payload}.{_b64(sig)}", approvals.public_line(key.public_key(), principal)


# ---- 1. the old mechanism ------------------------------------------------------------------------------------


def test_a_token_minted_the_old_way_is_refused_with_the_migration(project: Path, approver: Approver) -> None:
    doc = wide()
    ahash = approval_hash(doc)
    key = secrets.token_bytes(32)
    approvals.legacy_key_path().parent.mkdir(parents=True, exist_ok=True)
    approvals.legacy_key_path().write_text(key.hex())  # the old key file, readable by the agent
    token = legacy_token(ahash, key)
    for pol in (approver.policy(), load_policy()):
        d = evaluate(doc, policy=pol, store=None, approval_token=token)
        assert not d.allowed and "approvals keygen" in d.violations[0].message
        assert "fpa1" in d.violations[0].message
    # written where the engine looks, as the old CLI did
    approvals.approvals_dir().mkdir(parents=True)
    (approvals.approvals_dir() / f"{ahash}.json").write_text(json.dumps({"token": token, "family": FAMILY}))
    d = evaluate(doc, policy=approver.policy(), store=None)
    assert not d.allowed and "fpa1" in d.violations[0].message


def test_old_tokens_through_every_surface(project: Path, approver: Approver) -> None:
    approver.write_policy(project)
    path = write_experiment(project, wide(), "wide.yaml")
    key = secrets.token_bytes(32)
    token = legacy_token(prepare(path).approval_hash, key)
    res = cli("guard", "check", "wide.yaml", "--approval", token, cwd=project)
    assert res.returncode == 3 and "fpa1" in res.stdout
    res = cli("guard", "check", "wide.yaml", cwd=project, env={"FAULTPLANE_APPROVAL": token})
    assert res.returncode == 3
    # an fpa1 header on an otherwise well-formed fpa2 body, and an fpa2 header on an HMAC
    _, payload, mac = token.split(".")
    for forged in (f"fpa2.{payload}.{mac}", f"FPA2.{payload}.{mac}", f"fpa2.{payload}.{mac}.extra"):
        d = check_experiment(path, approval_token=forged)
        assert not d.allowed, forged


# ---- 2. the CLI without the person's secret ----------------------------------------------------------------------


def test_guard_approve_without_a_terminal_or_passphrase_refuses(project: Path, approver: Approver) -> None:
    approver.write_policy(project)
    write_experiment(project, wide(), "wide.yaml")
    key = ["--key", str(approver.key_path)]
    for argv in (("guard", "approve", "wide.yaml", *key), ("approve", "wide.yaml", *key)):
        res = cli(*argv, cwd=project)
        assert res.returncode == 2
        assert "no terminal" in one_line(res.stderr)
    # piping a guess into stdin is not a terminal either
    res = cli("guard", "approve", "wide.yaml", *key, cwd=project, stdin=None)
    assert res.returncode == 2
    res = subprocess.run(
        [sys.executable, "-m", "faultplane.cli.main", "guard", "approve", "wide.yaml", *key],
        cwd=project,
        input=APPROVER_PASSPHRASE + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != approvals.PASSPHRASE_ENV},
        check=False,
    )
    assert res.returncode == 2 and "no terminal" in res.stderr
    # the CI mechanism with a guessed passphrase
    for guess in ("", "password", APPROVER_PASSPHRASE.upper(), APPROVER_PASSPHRASE + " "):
        res = cli("guard", "approve", "wide.yaml", *key, cwd=project, env={approvals.PASSPHRASE_ENV: guess})
        assert res.returncode == 2, guess
        if guess:
            assert "wrong passphrase" in one_line(res.stderr)
    assert not approvals.approvals_dir().exists() or not list(approvals.approvals_dir().iterdir())
    assert cli("guard", "check", "wide.yaml", cwd=project).returncode == 3


def test_keygen_and_sign_refuse_without_a_person(project: Path, tmp_path: Path, approver: Approver) -> None:
    out = tmp_path / "elsewhere" / "k.key"
    res = cli("approvals", "keygen", "--principal", "agent", "--key", str(out), cwd=project)
    assert res.returncode == 2 and "no terminal" in one_line(res.stderr) and not out.exists()
    # a key inside the project is refused even with a passphrase: the agent works there
    inside = project / ".faultplane" / "approver.key"
    env = {approvals.PASSPHRASE_ENV: APPROVER_PASSPHRASE}
    res = cli("approvals", "keygen", "--principal", "agent", "--key", str(inside), cwd=project, env=env)
    assert res.returncode == 2 and "inside the project" in one_line(res.stderr) and not inside.exists()
    res = cli(
        "approvals",
        "keygen",
        "--principal",
        "agent",
        "--key",
        str(out),
        cwd=project,
        env={approvals.PASSPHRASE_ENV: "short"},
    )
    assert res.returncode == 2 and "12 characters" in one_line(res.stderr)
    # an existing key is never silently replaced
    res = cli(
        "approvals", "keygen", "--principal", "x", "--key", str(approver.key_path), cwd=project, env=env
    )
    assert res.returncode == 2 and "already exists" in one_line(res.stderr)
    res = cli("approvals", "sign", "--hash", "a" * 64, "--key", str(approver.key_path), cwd=project)
    assert res.returncode == 2 and "no terminal" in one_line(res.stderr)


# ---- 3. the Python API ---------------------------------------------------------------------------------------------


async def test_the_python_api_cannot_approve_without_the_passphrase(
    project: Path, approver: Approver
) -> None:
    approver.write_policy(project, LAB)
    marker = project / "ran"
    path = write_experiment(project, marking(marker), "mark.yaml")
    with pytest.raises(approvals.ApprovalError, match="no terminal"):
        approve_experiment(path, key_path=approver.key_path)
    for guess in ("", "alice", APPROVER_PASSPHRASE[:-1]):
        with pytest.raises(approvals.ApprovalError, match="wrong passphrase"):
            approve_experiment(path, key_path=approver.key_path, passphrase=guess)
    with pytest.raises(approvals.ApprovalError, match="no approver key"):
        approve_experiment(path, key_path=project / "nope.key", passphrase=APPROVER_PASSPHRASE)
    # a key of its own signs nothing the policy trusts, however it is presented
    ahash = prepare(path).approval_hash
    rogue = Approver(project.parent / "rogue", "alice")  # same principal name, different key
    with pytest.raises(approvals.ApprovalError, match="not in the policy"):
        approve_experiment(path, key_path=rogue.key_path, passphrase=APPROVER_PASSPHRASE)
    token = rogue.sign(ahash, family=FAMILY).token  # signed against its own trust list
    journal = await execute(marking(marker), approval_token=token, store=None)
    assert journal.status == "refused" and "does not trust" in (journal.error or "")
    assert not marker.exists()
    # the stored copy it wrote where the engine looks counts for nothing either
    assert (approvals.approvals_dir() / f"{ahash}.json").exists()
    assert not check_experiment(path).allowed
    journal = await execute(marking(marker), store=None)
    assert journal.status == "refused" and not marker.exists()


async def test_in_process_trust_ends_with_its_block(project: Path, approver: Approver) -> None:
    """session_trust is how the MCP server lends its in-memory key to one call. Code in the same process can
    call it too (the limit docs/security.md states); it never outlives the block or crosses a process."""
    approver.write_policy(project, LAB)
    marker = project / "ran"
    path = write_experiment(project, marking(marker), "mark.yaml")
    ahash = prepare(path).approval_hash
    key = Ed25519PrivateKey.generate()
    trusted = approvals.TrustedKey("rogue", approvals.key_id(key.public_key()), key.public_key())
    token = approvals.sign_approval(
        ahash, key=approvals.ApproverKey(key, trusted.key_id), trusted_keys=[trusted.line()], family=FAMILY
    ).token
    with approvals.session_trust(trusted):
        assert check_experiment(path, approval_token=token).allowed
    assert not check_experiment(path, approval_token=token).allowed
    # the stored token it left behind: another process (the hook, the CLI, the engine) refuses it
    assert cli("guard", "check", "mark.yaml", cwd=project).returncode == 3
    assert cli("run", "mark.yaml", cwd=project).returncode != 0
    assert not marker.exists()


# ---- 4. reading the key files ------------------------------------------------------------------------------------


def test_reading_the_key_files_gives_no_signing_power(project: Path, approver: Approver) -> None:
    data = approver.key_path.read_bytes()  # the agent can read it: same user
    assert b"ENCRYPTED" in data
    for guess in (b"", b"alice", b"password", b"correct horse battery"):
        with pytest.raises((ValueError, TypeError)):
            serialization.load_pem_private_key(data, guess or None)
    pub = approver.key_path.with_name(approver.key_path.name + ".pub")
    with pytest.raises(approvals.ApprovalError, match="not a PEM private key"):
        approvals.load_signing_key(pub, APPROVER_PASSPHRASE)
    # swapping in an unencrypted key of its own at the same path: refused before anything is signed
    rogue = Ed25519PrivateKey.generate()
    approver.key_path.write_bytes(
        rogue.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    with pytest.raises(approvals.ApprovalError, match="not encrypted"):
        approvals.load_signing_key(approver.key_path, "")
    # and an encrypted key of its own with a passphrase it knows: it signs, but nobody trusts it
    approver.key_path.write_bytes(
        rogue.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"agent knows this one"),
        )
    )
    key = approvals.load_signing_key(approver.key_path, "agent knows this one")
    with pytest.raises(approvals.ApprovalError, match="not in the policy"):
        approvals.sign_approval("a" * 64, key=key, trusted_keys=[approver.line])


def test_the_old_key_file_is_useless_now(project: Path, approver: Approver) -> None:
    doc = wide()
    path = approvals.legacy_key_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(secrets.token_bytes(32).hex())
    token = legacy_token(approval_hash(doc), bytes.fromhex(path.read_text()))
    with pytest.raises(approvals.ApprovalError, match="no longer accepted"):
        approvals.verify_token(token, approval_hash(doc), trusted_keys=[approver.line])
    assert not evaluate(doc, policy=approver.policy(), store=None, approval_token=token).allowed


# ---- 5. a signature for something else ---------------------------------------------------------------------------


def test_a_signature_for_another_hash_purpose_or_body(approver: Approver) -> None:
    a, b = wide(), base_experiment(blast_radius={"percent": 25}, title="another one")
    token = approver.sign(approval_hash(a), family=FAMILY).token
    pol = approver.policy()
    d = evaluate(b, policy=pol, store=None, approval_token=token)
    assert not d.allowed and "different version" in d.violations[0].message
    # re-pointing the payload at the other hash breaks the signature
    head, payload, sig = token.split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=="))
    for change in (
        {"h": approval_hash(b)},
        {"exp": body["exp"] + 86400},
        {"aka": [approval_hash(b)]},
        {"by": "x"},
    ):
        altered = _b64(json.dumps({**body, **change}, sort_keys=True, separators=(",", ":")).encode())
        with pytest.raises(approvals.ApprovalError, match="signature"):
            approvals.verify_token(f"{head}.{altered}.{sig}", approval_hash(b), trusted_keys=[approver.line])
    # an experiment approval is not consent to a policy change, nor the reverse
    with pytest.raises(approvals.ApprovalError, match="not a 'policy'"):
        approvals.verify_signed(approval_hash(a), token, [approver.line])
    policy_token = approver.sign("c" * 64, purpose="policy").token
    assert approvals.verify_signed("c" * 64, policy_token, [approver.line]) == "alice"
    with pytest.raises(approvals.ApprovalError, match="not a 'experiment'"):
        approvals.verify_token(policy_token, "c" * 64, trusted_keys=[approver.line])
    with pytest.raises(approvals.ApprovalError, match="different version"):
        approvals.verify_signed("d" * 64, policy_token, [approver.line])


# ---- 6. expiry -----------------------------------------------------------------------------------------------------


def test_expired_and_future_approvals(approver: Approver) -> None:
    doc = wide()
    ahash = approval_hash(doc)
    keys = [approver.line]
    old = approver.sign(ahash, family=FAMILY, ttl_s=60, now=time.time() - 120)
    with pytest.raises(approvals.ApprovalError, match="expired"):
        approvals.verify_token(old.token, ahash, trusted_keys=keys)
    d = evaluate(doc, policy=approver.policy(), store=None)  # the stored copy is the expired one
    assert not d.allowed and "expired" in d.violations[0].message
    future = approver.sign(ahash, family=FAMILY, now=time.time() + 3600)
    with pytest.raises(approvals.ApprovalError, match="future"):
        approvals.verify_token(future.token, ahash, trusted_keys=keys)
    short = approver.sign(ahash, family=FAMILY, ttl_s=1)
    assert approvals.verify_token(short.token, ahash, trusted_keys=keys).approver == "alice"
    with pytest.raises(approvals.ApprovalError, match="expired"):
        approvals.verify_signed(ahash, short.token, keys, purpose="experiment", now=time.time() + 5)
    for ttl in (
        0,
        -1,
        float("nan"),
        float("inf"),
    ):  # an infinite one was signed: `"exp": Infinity`, never expiring
        with pytest.raises(approvals.ApprovalError, match="ttl"):
            approver.sign(ahash, ttl_s=ttl)


@pytest.mark.parametrize(
    ("asked", "policy_hours", "expected"),
    [
        (None, 24.0, 24 * 3600.0),  # the policy's validity by default
        (1.5, 24.0, 1.5 * 3600.0),  # a shorter one may be asked for
        (48.0, 24.0, "longer than the policy's approval.ttl_hours"),  # a longer one was signed as asked
        (1e308, 24.0, "longer than"),
        (float("inf"), 24.0, "not a positive number"),
        (float("nan"), 24.0, "not a positive number"),
        (0.0, 24.0, "not a positive number"),
    ],
)
def test_an_approval_lasts_at_most_what_the_policy_allows(
    asked: float | None, policy_hours: float, expected: float | str
) -> None:
    if asked is not None and 0 < asked < float("inf"):  # a signed policy file may stand longer, never forever
        assert approvals.approval_ttl_s(asked, policy_hours, "policy") == asked * 3600.0
    if isinstance(expected, float):
        assert approvals.approval_ttl_s(asked, policy_hours) == expected
    else:
        with pytest.raises(approvals.ApprovalError, match=expected):
            approvals.approval_ttl_s(asked, policy_hours)


# ---- 7. the plan changed after its approval ------------------------------------------------------------------------


async def test_a_plan_changed_after_approval_does_not_run(project: Path, approver: Approver) -> None:
    approver.write_policy(project, LAB)
    marker = project / "ran"
    path = write_experiment(project, marking(marker), "mark.yaml")
    approve_experiment(path, key_path=approver.key_path, passphrase=APPROVER_PASSPHRASE)
    for changed in (
        marking(marker, "else"),
        marking(project / "elsewhere"),
        {
            **marking(marker),
            "rollbacks": [{"type": "action", "name": "x", "provider": {"type": "process", "path": "true"}}],
        },
        {**marking(marker), "title": "Payment DB latency "},
    ):
        journal = await execute(changed, store=None)
        assert journal.status == "refused" and "approval.required" in (journal.error or ""), changed
    assert not marker.exists() and not (project / "elsewhere").exists()
    # the unchanged plan runs, and the engine records who approved it
    journal = await execute(marking(marker), store=None)
    assert journal.status != "refused", journal.error
    assert marker.read_text() == "ran"


# ---- 8. keys the policy does not trust -----------------------------------------------------------------------------


def test_untrusted_keys(project: Path, approver: Approver, tmp_path: Path) -> None:
    doc = wide()
    ahash = approval_hash(doc)
    bob = Approver(tmp_path / "bob-keys", "bob")
    token = bob.sign(ahash, family=FAMILY).token
    d = evaluate(doc, policy=approver.policy(), store=None, approval_token=token)
    assert not d.allowed and "does not trust" in d.violations[0].message
    # the principal is the policy's name for the key, never the token's claim
    forged, line = own_key_token(ahash, principal="alice")
    d = evaluate(doc, policy=approver.policy(), store=None, approval_token=forged)
    assert not d.allowed
    renamed = line.rsplit(" ", 1)[0] + " mallory"
    d = evaluate(doc, policy=load_policy_with(project, [renamed]), store=None, approval_token=forged)
    assert d.allowed and d.approved_by == "mallory"
    # a key dropped from the policy takes its stored approvals with it
    approver.sign(ahash, family=FAMILY)
    assert evaluate(doc, policy=approver.policy(), store=None).allowed
    assert not evaluate(doc, policy=bob.policy(), store=None).allowed


def load_policy_with(project: Path, keys: list[str]) -> Any:
    path = project / "p.yaml"
    path.write_text(f"approval: {{trusted_keys: {json.dumps(keys)}}}\n")
    return load_policy(path)


# ---- 9. malformed keys, tokens and key files: one line each --------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("garbage", "expected"),
        ("ssh-ed25519 AAAA", "expected"),
        ("ssh-ed25519 AAAAnotbase64!! alice", "not an OpenSSH public key"),
        ("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDH alice", "key"),
        (123, "valid string"),
        (
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIlY3j1fIvVfEbXNiEhHiqhPgJZK0f133e+Awh9YHXrp \u202e",
            "expected",
        ),
    ],
)
def test_malformed_trusted_keys_are_one_line_policy_errors(project: Path, entry: Any, why: str) -> None:
    path = project / "faultplane.policy.yaml"
    path.write_text(f"approval: {{trusted_keys: [{json.dumps(entry)}]}}\n")
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert "trusted_keys" in one_line(str(info.value)) and why in str(info.value)
    write_experiment(project, wide(), "wide.yaml")
    res = cli("guard", "check", "wide.yaml", cwd=project)
    assert res.returncode == 2 and "trusted_keys" in one_line(res.stderr)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\x00" * 10,
        os.urandom(300),
        b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nnot base64\n-----END ENCRYPTED PRIVATE KEY-----\n",
        b"-----BEGIN" + b"A" * 70_000,
        "ключ 🔑".encode(),
        b"faultplane-approver-key scrypt n=1099511627776 r=8 p=1 salt=AAAAAAAAAAAAAAAAAAAAAA==\n-----BEGIN x",
        b"faultplane-approver-key scrypt n=16384 r=99999 p=1 salt=AAAAAAAAAAAAAAAAAAAAAA==\n-----BEGIN x",
        b"faultplane-approver-key scrypt n=16385 r=8 p=1 salt=AAAAAAAAAAAAAAAAAAAAAA==\n-----BEGIN x",
        b"faultplane-approver-key scrypt n=16384 r=8 p=1 salt=!!\n-----BEGIN ENCRYPTED",
        b"faultplane-approver-key scrypt n=16384 r=8 p=1\n-----BEGIN ENCRYPTED",
        b"faultplane-approver-key scrypt \xff\xfe\n-----BEGIN ENCRYPTED",
    ],
)
def test_malformed_key_files_are_one_line_errors(project: Path, approver: Approver, content: bytes) -> None:
    approver.write_policy(project)
    write_experiment(project, wide(), "wide.yaml")
    approver.key_path.write_bytes(content)
    with pytest.raises(approvals.ApprovalError) as info:
        approvals.load_signing_key(approver.key_path, APPROVER_PASSPHRASE)
    one_line(str(info.value))
    env = {approvals.PASSPHRASE_ENV: APPROVER_PASSPHRASE}
    res = cli("guard", "approve", "wide.yaml", "--key", str(approver.key_path), cwd=project, env=env)
    assert res.returncode == 2 and one_line(res.stderr).startswith("cannot approve: --key:")


@pytest.mark.parametrize(
    "token",
    [
        "",
        "fpa2",
        "fpa2..",
        "fpa2.!!!.???",
        "fpa2." + _b64(b"not json") + ".AAAA",
        "fpa2." + _b64(b"[1,2]") + ".AAAA",
        "fpa2." + _b64(b"[" * 5000 + b"]" * 5000) + ".AAAA",
        "fpa2." + _b64(json.dumps({"kid": "x" * 100}).encode()) + ".AAAA",
        "fpa2." + "A" * 20_000 + ".AAAA",
        "fpa2.ключ.🔑",
        "fpa1.x.y",
    ],
)
def test_malformed_tokens_are_one_line_refusals(project: Path, approver: Approver, token: str) -> None:
    with pytest.raises(approvals.ApprovalError) as info:
        approvals.verify_token(token, "a" * 64, trusted_keys=[approver.line])
    one_line(str(info.value))
    d = evaluate(wide(), policy=approver.policy(), store=None, approval_token=token)
    assert not d.allowed and d.violations[0].rule == "approval.required"
    for bad_hash in ("", "A" * 64, "g" * 64, "a" * 63):
        with pytest.raises(approvals.ApprovalError, match="sha256"):
            approvals.verify_signed(bad_hash, token, [approver.line])


# ---- the hook refuses the attempts it can recognise ----------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "faultplane guard approve wide.yaml",
        "faultplane approve wide.yaml --key /tmp/k.key",
        "faultplane approvals sign --hash " + "a" * 64,
        "faultplane approvals keygen --principal agent --key /tmp/agent.key",
        "FAULTPLANE_APPROVER_PASSPHRASE=guess faultplane guard check wide.yaml",
        "env FAULTPLANE_APPROVER_KEY=/tmp/agent.key faultplane guard check wide.yaml",
        "cat ~/.config/faultplane/approver.key",
        "cp /tmp/agent.key ~/.config/faultplane/approver.key",
    ],
)
def test_the_hook_refuses_agent_approval_attempts(project: Path, approver: Approver, command: str) -> None:
    from faultplane.hook.judge import judge_tool_call

    write_experiment(project, wide(), "wide.yaml")
    payload = {"hook_event_name": "PreToolUse", "cwd": str(project), "tool_name": "Bash"}
    verdict = judge_tool_call({**payload, "tool_input": {"command": command}})
    assert not verdict.allow, command
    # reading the public side and verifying are not approvals
    ok = judge_tool_call({**payload, "tool_input": {"command": "faultplane approvals trusted"}})
    assert ok.allow, ok.reason


def test_truncated_extended_or_swapped_signatures(approver: Approver, tmp_path: Path) -> None:
    token = approver.sign("a" * 64).token
    head, payload, sig = token.split(".")
    other = approver.sign("b" * 64).token.split(".")[2]  # a valid signature, of another payload
    for bad in ("", "AA", sig + "AA", sig[:10], other, sig[::-1]):
        with pytest.raises(approvals.ApprovalError, match="signature"):
            approvals.verify_token(f"{head}.{payload}.{bad}", "a" * 64, trusted_keys=[approver.line])


# ---- the CI path, end to end ---------------------------------------------------------------------------------------


def test_ci_creates_a_key_signs_a_policy_change_and_verifies_it(project: Path, tmp_path: Path) -> None:
    """In CI the passphrase comes from the secret store through $FAULTPLANE_APPROVER_PASSPHRASE."""
    key = tmp_path / "ci" / "approver.key"
    env = {approvals.PASSPHRASE_ENV: APPROVER_PASSPHRASE, "FAULTPLANE_APPROVER_KEY": str(key)}
    res = cli("approvals", "keygen", "--principal", "release-bot", cwd=project, env=env)
    assert res.returncode == 0, res.stderr
    line = (
        next(x for x in res.stdout.splitlines() if "ssh-ed25519" in x).strip().removeprefix("- ").strip('"')
    )
    assert key.stat().st_mode & 0o777 == 0o600 and line.endswith(" release-bot")
    (project / "faultplane.policy.yaml").write_text(f"approval: {{trusted_keys: [{json.dumps(line)}]}}\n")
    res = cli("approvals", "trusted", cwd=project)
    assert res.returncode == 0 and res.stdout.startswith("release-bot\tSHA256:")
    digest = hashlib.sha256(b"the loosened policy").hexdigest()
    res = cli("approvals", "sign", "--hash", digest, "--purpose", "policy", cwd=project, env=env)
    assert res.returncode == 0, res.stderr
    token = res.stdout.strip()
    assert approvals.verify_signed(digest, token, [line]) == "release-bot"
    res = cli("approvals", "verify", token, "--hash", digest, "--purpose", "policy", cwd=project)
    assert res.returncode == 0 and json.loads(res.stdout)["approver"] == "release-bot"
    res = cli("approvals", "verify", token, "--hash", "0" * 64, "--purpose", "policy", cwd=project)
    assert res.returncode == 3 and "different version" in one_line(res.stderr)
    res = cli("approvals", "verify", token, "--hash", digest, cwd=project)  # as an experiment approval
    assert res.returncode == 3 and "not a 'experiment'" in one_line(res.stderr)
    res = cli("approvals", "sign", "--hash", "nothex", "--purpose", "policy", cwd=project, env=env)
    assert res.returncode == 2 and "sha256" in one_line(res.stderr)


def test_keygen_stretches_the_passphrase_with_scrypt(project: Path, tmp_path: Path) -> None:
    """Reading the key file must not make guessing cheap: the default costs ~0.3 s and 128 MiB a guess."""
    path = tmp_path / "keys" / "default.key"
    line = approvals.generate_key(path, "alice", APPROVER_PASSPHRASE)
    header = path.read_bytes().split(b"\n", 1)[0].decode()
    assert header.startswith("faultplane-approver-key scrypt n=131072 r=8 p=1 salt=")
    key = approvals.load_signing_key(path, APPROVER_PASSPHRASE)
    assert approvals.public_line(key.private_key.public_key(), "alice") == line
    # the PEM block alone does not open with the passphrase: it is locked with the stretched one
    pem = path.read_bytes().split(b"\n", 1)[1]
    with pytest.raises((ValueError, TypeError)):
        serialization.load_pem_private_key(pem, APPROVER_PASSPHRASE.encode())


def test_the_hook_leaves_a_missing_approval_to_the_mcp_server_only(project: Path) -> None:
    """Over MCP the server asks a person, so the hook lets through a call whose only problem is a missing
    approval; the same experiment from the shell, or with any other problem, is still refused."""
    from faultplane.hook.judge import judge_tool_call

    write_experiment(project, wide(), "wide.yaml")
    write_experiment(project, base_experiment(blast_radius={"percent": 25}, slo_gates=None), "gateless.yaml")
    base = {"hook_event_name": "PreToolUse", "cwd": str(project)}

    def call(tool: str, tool_input: dict[str, Any]) -> Any:
        return judge_tool_call({**base, "tool_name": tool, "tool_input": tool_input})

    text = (project / "wide.yaml").read_text()
    assert call("mcp__faultplane__chaos_run_experiment", {"experiment": text}).allow
    assert call("mcp__faultplane__chaos_run_experiment", {"experiment_name": "wide.yaml"}).allow
    refused = call("Bash", {"command": "faultplane run wide.yaml"})
    assert not refused.allow and "approval.required" in refused.reason
    gateless = call("mcp__faultplane__chaos_run_experiment", {"experiment_name": "gateless.yaml"})
    assert not gateless.allow and "gates" in gateless.reason
    prod = (project / "wide.yaml").read_text().replace("staging", "production")
    assert not call("mcp__faultplane__chaos_run_experiment", {"experiment": prod}).allow
    assert not call("mcp__faultplane__chaos_approve", {"experiment": text}).allow


# ---- an interactive terminal: the person's way, and an agent that fakes one ----------------------------------------


def in_terminal(argv: list[str], cwd: Path, answers: list[str], timeout: float = 60) -> tuple[int, str]:
    """Run `argv` with a pseudo-terminal as its controlling terminal, typing each answer at each prompt."""
    import pty
    import select

    env = {k: v for k, v in os.environ.items() if k not in (approvals.PASSPHRASE_ENV, "FAULTPLANE_POLICY")}
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once
        os.chdir(cwd)
        os.execvpe(argv[0], argv, env)
    out = b""
    deadline = time.monotonic() + timeout
    pending = list(answers)
    prompts = 0
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    break  # the child closed the terminal
                if not chunk:
                    break
                out += chunk
            seen = out.count(b"passphrase: ") + out.count(b"again: ")
            if pending and seen > prompts:
                prompts = seen
                os.write(fd, pending.pop(0).encode() + b"\n")
    finally:
        os.close(fd)
        _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_a_person_at_a_terminal_approves_and_a_faked_terminal_needs_the_passphrase(
    project: Path, approver: Approver
) -> None:
    approver.write_policy(project)
    write_experiment(project, wide(), "wide.yaml")
    argv = [sys.executable, "-m", "faultplane.cli.main", "guard", "approve", "wide.yaml"]
    argv += ["--key", str(approver.key_path)]
    # an agent can allocate a terminal (script, pty) but not know the passphrase
    code, out = in_terminal(argv, project, ["agent's best guess"])
    assert code == 2 and "wrong passphrase" in out and APPROVER_PASSPHRASE not in out
    assert cli("guard", "check", "wide.yaml", cwd=project).returncode == 3
    code, out = in_terminal(argv, project, [APPROVER_PASSPHRASE])
    assert code == 0 and "approved payment-db-latency" in out and "by alice" in out, out
    assert APPROVER_PASSPHRASE not in out  # not echoed
    assert cli("guard", "check", "wide.yaml", cwd=project).returncode == 0


def test_keygen_at_a_terminal_asks_twice(project: Path, tmp_path: Path) -> None:
    key = tmp_path / "keys" / "typed.key"
    argv = [sys.executable, "-m", "faultplane.cli.main", "approvals", "keygen", "--principal", "carol"]
    argv += ["--key", str(key)]
    code, out = in_terminal(argv, project, [APPROVER_PASSPHRASE, APPROVER_PASSPHRASE + "x"])
    assert code == 2 and "differ" in out and not key.exists()
    code, out = in_terminal(argv, project, [APPROVER_PASSPHRASE, APPROVER_PASSPHRASE])
    assert code == 0 and "ssh-ed25519" in out and key.exists(), out
