"""Approval tokens: a human's signed "yes" for one exact version of one experiment.

A token is `fpa1.<payload>.<mac>`: the payload (base64url JSON) names the experiment's content hash, its family,
who approved, when, and when the approval expires; the mac is HMAC-SHA256 over the payload with a secret that
lives only on this machine ($XDG_CONFIG_HOME/faultplane/approval.key, mode 0600). Binding to the content hash
means any change to the experiment, however small, needs a new approval.

Issued tokens are also written to $XDG_STATE_HOME/faultplane/approvals/<content_hash>.json so the engine finds
them without the user passing the token around; the file alone proves nothing, the mac does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Approval",
    "ApprovalError",
    "approvals_dir",
    "find_approval",
    "issue_approval",
    "key_path",
    "list_approvals",
    "verify_token",
]

_PREFIX = "fpa1"
DEFAULT_TTL_S = 24 * 3600.0


class ApprovalError(ValueError):
    """A token that does not verify; the message says why and what to do."""


@dataclass(frozen=True)
class Approval:
    token: str
    content_hash: str
    family: str
    approver: str
    issued_at: float
    expires_at: float
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "content_hash": self.content_hash,
            "family": self.family,
            "approver": self.approver,
            "issued_at": self.issued_at,
            "expires_at": self.expires_at,
            "reason": self.reason,
            "token": self.token,
        }


def _config_home() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")


def _state_home() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")


def key_path() -> Path:
    """Where the approval secret lives; $FAULTPLANE_APPROVAL_KEY moves it (e.g. out of an agent's reach)."""
    env = os.environ.get("FAULTPLANE_APPROVAL_KEY")
    return Path(env).expanduser() if env else _config_home() / "faultplane" / "approval.key"


def approvals_dir() -> Path:
    return _state_home() / "faultplane" / "approvals"


def _load_key(*, create: bool) -> bytes | None:
    path = key_path()
    if path.exists():
        return bytes.fromhex(path.read_text().strip())
    if not create:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    # O_EXCL: two approvers racing must not end up with different keys
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return bytes.fromhex(path.read_text().strip())
    with os.fdopen(fd, "w") as fh:
        fh.write(key.hex())
    return key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())


def issue_approval(
    content_hash: str,
    *,
    family: str,
    approver: str | None = None,
    reason: str = "",
    ttl_s: float = DEFAULT_TTL_S,
    now: float | None = None,
    also: list[str] | None = None,
) -> Approval:
    """Sign an approval for exactly this content hash and record it where the engine looks.

    `also` lists other hashes of the very same content (the document as written and as resolved), so the
    approval holds whichever form the verifier hashes; a change to the content changes all of them."""
    aliases = [h for h in (also or []) if h != content_hash]
    for h in (content_hash, *aliases):
        if not h or len(h) != 64:
            raise ApprovalError(f"content_hash must be a sha256 hex digest, got {h!r}")
    if ttl_s <= 0:
        raise ApprovalError(f"ttl must be positive seconds, got {ttl_s}")
    key = _load_key(create=True)
    assert key is not None
    issued = time.time() if now is None else now
    who = approver or os.environ.get("USER") or os.environ.get("USERNAME") or "unknown"
    body: dict[str, Any] = {
        "h": content_hash,
        "f": family,
        "by": who,
        "iat": issued,
        "exp": issued + ttl_s,
        "why": reason,
    }
    if aliases:
        body["aka"] = aliases
    payload = _b64(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    token = f"{_PREFIX}.{payload}.{_mac(key, payload)}"
    approval = Approval(token, content_hash, family, who, issued, issued + ttl_s, reason)
    folder = approvals_dir()
    folder.mkdir(parents=True, exist_ok=True)
    for h in (content_hash, *aliases):
        (folder / f"{h}.json").write_text(json.dumps(approval.to_dict(), indent=2))
    return approval


def verify_token(token: str, content_hash: str, *, now: float | None = None) -> Approval:
    """Return the approval if `token` is a valid, unexpired approval of `content_hash`; else ApprovalError."""
    parts = token.strip().split(".")
    if len(parts) != 3 or parts[0] != _PREFIX:
        raise ApprovalError("not a Faultplane approval token (expected `fpa1.<payload>.<mac>`)")
    key = _load_key(create=False)
    if key is None:
        raise ApprovalError(f"no approval key on this machine ({key_path()}): run `faultplane approve` here")
    if not hmac.compare_digest(_mac(key, parts[1]), parts[2]):
        raise ApprovalError("approval token signature does not verify (forged, or issued on another machine)")
    try:
        body = json.loads(_unb64(parts[1]))
    except (ValueError, json.JSONDecodeError):
        raise ApprovalError("approval token payload is unreadable") from None
    if content_hash != body.get("h") and content_hash not in (body.get("aka") or []):
        raise ApprovalError(
            "approval token is for a different version of the experiment (content hash "
            f"{str(body.get('h'))[:12]}…, this one is {content_hash[:12]}…): the experiment changed since it "
            "was approved; approve it again"
        )
    t = time.time() if now is None else now
    if t > float(body.get("exp", 0)):
        raise ApprovalError("approval token has expired; approve the experiment again")
    return Approval(
        token.strip(),
        content_hash,
        body.get("f", ""),
        body.get("by", ""),
        float(body.get("iat", 0)),
        float(body["exp"]),
        body.get("why", ""),
    )


def list_approvals() -> Iterator[dict[str, Any]]:
    folder = approvals_dir()
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.json")):
        try:
            yield json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue


def find_approval(content_hash: str, *, now: float | None = None) -> Approval | None:
    """The stored approval of exactly this content hash, if it still verifies."""
    path = approvals_dir() / f"{content_hash}.json"
    if not path.is_file():
        return None
    try:
        token = json.loads(path.read_text()).get("token", "")
        return verify_token(token, content_hash, now=now)
    except (OSError, json.JSONDecodeError, ApprovalError):
        return None
