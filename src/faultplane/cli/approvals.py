"""`faultplane approvals`: the approver's Ed25519 key, and signatures over hashes other than experiments'.

Experiments are approved with `faultplane guard approve FILE`; logic lives in faultplane.core.approval.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="Approver keys: create one (kept outside the project, under a passphrase), sign, verify.",
    no_args_is_help=True,
)

KeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--key",
        help="private key path (default: $FAULTPLANE_APPROVER_KEY, ~/.config/faultplane/approver.key)",
    ),
]
PolicyOpt = Annotated[
    Path | None,
    typer.Option("--policy", help="policy file (default: faultplane.policy.yaml, $FAULTPLANE_POLICY)"),
]


def _fail(message: str, code: int = 2) -> None:
    typer.echo(message, err=True)
    raise typer.Exit(code)


@app.command()
def keygen(
    principal: Annotated[str, typer.Option("--principal", help="your name as approvals record it")],
    key: KeyOpt = None,
    force: Annotated[bool, typer.Option("--force", help="replace an existing key")] = False,
) -> None:
    """Create an approver key. The passphrase is asked twice on the terminal (or taken from
    $FAULTPLANE_APPROVER_PASSPHRASE, meant for CI secret stores); without either, nothing is created."""
    from faultplane.core.approval import ApprovalError, default_key_path, generate_key, read_passphrase

    path = key.expanduser() if key else default_key_path()
    try:
        line = generate_key(path, principal, read_passphrase(confirm=True), force=force)
    except ApprovalError as exc:
        _fail(f"cannot create the key: {exc}")
        return
    except OSError as exc:
        _fail(f"cannot create the key: {path}: {exc.strerror}")
        return
    typer.echo(f"wrote {path} (encrypted, mode 0600) and {path}.pub")
    typer.echo("add this line to approval.trusted_keys in the policy:")
    typer.echo(f'  - "{line}"')


@app.command()
def sign(
    hash_: Annotated[str, typer.Option("--hash", help="the sha256 hex digest to approve")],
    purpose: Annotated[str, typer.Option("--purpose", help="experiment | policy")] = "policy",
    reason: Annotated[str, typer.Option("--reason", help="why")] = "",
    ttl_hours: Annotated[float | None, typer.Option("--ttl-hours")] = None,
    key: KeyOpt = None,
    policy: PolicyOpt = None,
) -> None:
    """Sign an approval of a hash (e.g. of a policy change that loosens the floor); prints the token."""
    from faultplane.core.approval import (
        ApprovalError,
        approval_ttl_s,
        default_key_path,
        load_signing_key,
        read_passphrase,
        sign_approval,
    )
    from faultplane.core.policy import PolicyError, load_policy

    if purpose not in ("experiment", "policy"):
        _fail(f"--purpose: {purpose!r} is not a purpose; use experiment or policy")
    try:
        pol = load_policy(policy)
        signer = load_signing_key(key.expanduser() if key else default_key_path(), read_passphrase())
        ttl_s = approval_ttl_s(ttl_hours, pol.approval.ttl_hours, purpose)
        granted = sign_approval(
            hash_.strip().lower(),
            key=signer,
            trusted_keys=pol.approval.trusted_keys,
            purpose="policy" if purpose == "policy" else "experiment",
            reason=reason,
            ttl_s=ttl_s,
        )
    except (ApprovalError, PolicyError) as exc:
        _fail(f"cannot sign: {exc}")
        return
    typer.echo(granted.token)


@app.command()
def verify(
    token: Annotated[str, typer.Argument(help="an fpa2 token")],
    hash_: Annotated[str, typer.Option("--hash", help="the hash it must approve")],
    purpose: Annotated[str, typer.Option("--purpose", help="experiment | policy")] = "experiment",
    policy: PolicyOpt = None,
) -> None:
    """Does this token approve this hash under the policy's trusted keys? Exit 0 yes, 3 no."""
    from faultplane.core.approval import ApprovalError, verify_token
    from faultplane.core.policy import PolicyError, load_policy

    if purpose not in ("experiment", "policy"):
        _fail(f"--purpose: {purpose!r} is not a purpose; use experiment or policy")
    try:
        pol = load_policy(policy)
        found = verify_token(
            token,
            hash_.strip().lower(),
            trusted_keys=pol.approval.trusted_keys,
            purpose="policy" if purpose == "policy" else "experiment",
        )
    except PolicyError as exc:
        _fail(f"cannot verify: {exc}")
        return
    except ApprovalError as exc:
        _fail(f"does not verify: {exc}", 3)
        return
    typer.echo(json.dumps({k: v for k, v in found.to_dict().items() if k != "token"}, indent=2))


@app.command()
def trusted(policy: PolicyOpt = None) -> None:
    """The approver keys the policy in force trusts, by principal and key id."""
    from faultplane.core.approval import parse_trusted_keys
    from faultplane.core.policy import PolicyError, load_policy

    try:
        pol = load_policy(policy)
    except PolicyError as exc:
        _fail(f"cannot read the policy: {exc}")
        return
    keys = parse_trusted_keys(pol.approval.trusted_keys)
    if not keys:
        typer.echo(f"{pol.source}: no trusted approver keys (approval.trusted_keys is empty)")
    for k in keys:
        typer.echo(f"{k.principal}\t{k.key_id}")
