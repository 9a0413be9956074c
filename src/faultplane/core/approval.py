"""Approvals: a human's signed "yes" for one exact version of one experiment (or one policy change).

A token is `fpa2.<payload>.<signature>`: the payload (base64url JSON) names the hash it approves, what kind of
thing it approves (`for`: experiment | policy), who signed it, when, and when it expires; the signature is
Ed25519 over the payload by an approver key. The engine accepts a token only when the signature verifies
against one of the policy's `approval.trusted_keys` (OpenSSH `ssh-ed25519 AAAA… name` lines): the principal
is the name the policy gives that key, not anything the token claims.

The private key lives outside the project (default $XDG_CONFIG_HOME/faultplane/approver.key), encrypted with a
passphrase that only the approver knows. Reading the file is not enough to sign: an agent running as the same
OS user can read it, but not the passphrase, which is asked on the terminal or, in CI, read from the secret
$FAULTPLANE_APPROVER_PASSPHRASE (see docs/security.md for what this does and does not protect against).

Signed tokens are also written to $XDG_STATE_HOME/faultplane/approvals/<hash>.json so the engine finds them
without the user passing the token around; the file alone proves nothing, the signature does.

The first token format, `fpa1` (HMAC with a key file on the same machine), proves only that someone who could
read that file made it, which an agent can. It is refused with the migration steps in the message.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import getpass
import hashlib
import json
import math
import os
import secrets
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from faultplane.core.paths import faultplane_dir, file_from_env

__all__ = [
    "PASSPHRASE_ENV",
    "Approval",
    "ApprovalError",
    "ApproverKey",
    "TrustedKey",
    "approval_ttl_s",
    "approvals_dir",
    "default_key_path",
    "find_approval",
    "generate_key",
    "load_signing_key",
    "parse_trusted_keys",
    "read_passphrase",
    "session_trust",
    "sign_approval",
    "stored_approval",
    "verify_signed",
    "verify_token",
]

_PREFIX = "fpa2"
_LEGACY_PREFIX = "fpa1"
_DOMAIN = b"faultplane approval v2\x00"  # a signature over anything else never verifies as an approval
DEFAULT_TTL_S = 24 * 3600.0
MIN_PASSPHRASE = 12
MAX_TOKEN = 16_384
CLOCK_SKEW_S = 300.0
PASSPHRASE_ENV = "FAULTPLANE_APPROVER_PASSPHRASE"
KEY_ENV = "FAULTPLANE_APPROVER_KEY"
Purpose = Literal["experiment", "policy"]

MIGRATION = (
    "fpa1 tokens (HMAC with ~/.config/faultplane/approval.key) are no longer accepted, because anything that "
    "can read that file can mint one; a person runs `faultplane approvals keygen`, adds the printed line to "
    "the policy's approval.trusted_keys, and approves again with `faultplane guard approve FILE`"
)


class ApprovalError(ValueError):
    """An approval that cannot be made or does not verify; the message says why and what to do."""


@dataclass(frozen=True)
class Approval:
    token: str
    content_hash: str
    family: str
    approver: str
    issued_at: float
    expires_at: float
    reason: str = ""
    purpose: str = "experiment"
    key_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["token"] = d.pop("token")  # every field, the token last, as approval files have always been written
        return d


@dataclass(frozen=True)
class TrustedKey:
    principal: str
    key_id: str
    public_key: Any  # Ed25519PublicKey

    def line(self) -> str:
        return public_line(self.public_key, self.principal)


@dataclass(frozen=True)
class ApproverKey:
    """A decrypted signing key, held in memory only for the time of one approval."""

    private_key: Any  # Ed25519PrivateKey
    key_id: str


# ---- paths ---------------------------------------------------------------------------------------------------


def default_key_path() -> Path:
    """The approver's private key: $FAULTPLANE_APPROVER_KEY, else $XDG_CONFIG_HOME/faultplane/approver.key."""
    return file_from_env(KEY_ENV, "config", "approver.key")


def legacy_key_path() -> Path:
    """Where the fpa1 HMAC secret lived (kept so the hook still guards it and docs can say to delete it)."""
    return file_from_env("FAULTPLANE_APPROVAL_KEY", "config", "approval.key")


key_path = legacy_key_path  # the name the hook's protected-file list used


def approvals_dir() -> Path:
    return faultplane_dir("state") / "approvals"


# ---- keys ----------------------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    # One token, one spelling: a decoder that ignores the unused low bits of the last character would accept
    # several strings as the same signature, so an altered token could still verify.
    if _b64(data) != text:
        raise ValueError("not canonical base64url")
    return data


def _raw_public(public_key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization as s

    raw: bytes = public_key.public_bytes(s.Encoding.Raw, s.PublicFormat.Raw)
    return raw


def key_id(public_key: Any) -> str:
    """A short, stable name for a public key: SHA-256 of its raw bytes, as OpenSSH prints fingerprints."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(_raw_public(public_key)).digest()).decode().rstrip("=")


def public_line(public_key: Any, principal: str) -> str:
    from cryptography.hazmat.primitives import serialization as s

    text: str = public_key.public_bytes(s.Encoding.OpenSSH, s.PublicFormat.OpenSSH).decode()
    return f"{text} {principal}"


def parse_trusted_keys(entries: Sequence[str]) -> list[TrustedKey]:
    """The policy's `approval.trusted_keys`: each an OpenSSH line `ssh-ed25519 AAAA… principal`."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_ssh_public_key

    out: list[TrustedKey] = []
    for i, entry in enumerate(entries):
        where = f"approval.trusted_keys[{i}]"
        if not isinstance(entry, str):
            raise ApprovalError(
                f"{where}: must be a string `ssh-ed25519 AAAA… name`, got {type(entry).__name__}"
            )
        parts = entry.strip().split(None, 2)
        if len(parts) < 3 or not parts[2].strip():
            raise ApprovalError(
                f"{where}: expected `ssh-ed25519 <base64 key> <approver name>` (the line "
                "`faultplane approvals keygen` prints), got {entry[:60]!r}"
            )
        name = parts[2].strip()
        if not name.isprintable() or any(c.isspace() for c in name) or len(name) > 200:
            raise ApprovalError(
                f"{where}: the approver name {name[:40]!r} must be one printable word (no spaces or control "
                "characters), as expected by `ssh-ed25519 <base64 key> <approver name>`"
            )
        try:
            key = load_ssh_public_key(f"{parts[0]} {parts[1]}".encode())
        except (ValueError, TypeError, UnicodeError) as exc:
            raise ApprovalError(
                f"{where}: not an OpenSSH public key ({exc}); paste the line keygen printed"
            ) from None
        except Exception as exc:  # cryptography's UnsupportedAlgorithm for e.g. ssh-dss
            raise ApprovalError(f"{where}: unsupported key ({exc}); only ssh-ed25519 keys approve") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ApprovalError(f"{where}: a {parts[0]} key; only ssh-ed25519 keys approve")
        out.append(TrustedKey(name, key_id(key), key))
    return out


def _inside_a_project(path: Path) -> Path | None:
    for folder in path.resolve().parents:
        if (folder / ".git").exists():
            return folder
    return None


# The key file is readable by anything running as the approver, so what protects it is the cost of guessing
# the passphrase offline. PKCS#8 BestAvailableEncryption alone is PBKDF2 with 2048 rounds (about a
# millisecond a guess); the passphrase is first stretched with scrypt (memory-hard, ~0.3 s and 128 MiB a
# guess at the default), whose salt and cost ride in a header line above the PEM block.
_KEY_HEADER = b"faultplane-approver-key scrypt"
SCRYPT_N = 2**17
_SCRYPT_LIMITS = {"n": (2**14, 2**20), "r": (1, 16), "p": (1, 4)}


def _stretch(passphrase: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    return base64.b64encode(Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(passphrase.encode()))


def _key_header(data: bytes, path: Path) -> tuple[dict[str, Any], bytes]:
    """(scrypt parameters, the PEM block) of a key file; parameters are bounded, so a hostile header cannot
    make the loader spend gigabytes."""
    first, _, rest = data.partition(b"\n")
    if not first.startswith(_KEY_HEADER):
        return {}, data
    params: dict[str, Any] = {}
    try:
        for item in first.removeprefix(_KEY_HEADER).decode("ascii").split():
            name, _, value = item.partition("=")
            params[name] = base64.b64decode(value, validate=True) if name == "salt" else int(value)
    except (ValueError, UnicodeError):
        raise ApprovalError(
            f"--key: {path} has an unreadable header line; create it again with keygen"
        ) from None
    for name, (low, high) in _SCRYPT_LIMITS.items():
        got = params.get(name)
        if not isinstance(got, int) or not low <= got <= high or (name == "n" and got & (got - 1)):
            raise ApprovalError(
                f"--key: {path}: scrypt {name}={got} is out of range; create it again with keygen"
            )
    if not isinstance(params.get("salt"), bytes) or not 16 <= len(params["salt"]) <= 64:
        raise ApprovalError(
            f"--key: {path}: the scrypt salt is missing or malformed; create it again with keygen"
        )
    return params, rest


def generate_key(
    path: Path, principal: str, passphrase: str, *, force: bool = False, scrypt_n: int = SCRYPT_N
) -> str:
    """Write a new encrypted Ed25519 approver key at `path` (mode 0600, `path`.pub beside it) and return the
    public line the policy's approval.trusted_keys should list."""
    from cryptography.hazmat.primitives import serialization as s
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    principal = principal.strip()
    if not principal or any(c.isspace() for c in principal) or not principal.isprintable():
        raise ApprovalError(f"--principal: {principal!r} must be one printable word (e.g. alice@example.com)")
    if len(passphrase) < MIN_PASSPHRASE:
        raise ApprovalError(
            f"passphrase: at least {MIN_PASSPHRASE} characters (the key file is readable by anything running as "
            "you; the passphrase is what an agent cannot guess)"
        )
    project = _inside_a_project(path)
    if project is not None:
        raise ApprovalError(
            f"--key: {path} is inside the project {project}, where an agent works; keep the approver key "
            "outside it (default ~/.config/faultplane/approver.key)"
        )
    if path.exists() and not force:
        raise ApprovalError(
            f"--key: {path} already exists; pass --force to replace it (old approvals stay valid "
            "only while the policy still trusts the old public key)"
        )
    key = Ed25519PrivateKey.generate()
    salt = secrets.token_bytes(16)
    params = {"n": scrypt_n, "r": 8, "p": 1}
    header = _KEY_HEADER + " ".join(["", *(f"{k}={v}" for k, v in params.items())]).encode()
    header += b" salt=" + base64.b64encode(salt) + b"\n"
    _key_header(header, path)  # the same bounds the loader applies
    password = _stretch(passphrase, salt, **params)
    pem = header + key.private_bytes(
        s.Encoding.PEM, s.PrivateFormat.PKCS8, s.BestAvailableEncryption(password)
    )
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if force:
        path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    line = public_line(key.public_key(), principal)
    path.with_name(path.name + ".pub").write_text(line + "\n")
    return line


def load_signing_key(path: Path, passphrase: str) -> ApproverKey:
    """Decrypt the approver key; one-line ApprovalError for a missing, malformed or wrongly unlocked file."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ApprovalError(
            f"--key: no approver key at {path}; a person creates one with `faultplane approvals keygen`"
        ) from None
    except OSError as exc:
        raise ApprovalError(f"--key: cannot read {path} ({exc.strerror})") from None
    if len(data) > 64_000 or b"-----BEGIN" not in data:
        raise ApprovalError(
            f"--key: {path} is not a PEM private key written by `faultplane approvals keygen`"
        )
    if b"ENCRYPTED" not in data:
        raise ApprovalError(
            f"--key: {path} is not encrypted; an unencrypted key signs for whoever reads it. Create a "
            "passphrase-protected one with `faultplane approvals keygen --force`"
        )
    params, pem = _key_header(data, path)
    password = _stretch(passphrase, params.pop("salt"), **params) if params else passphrase.encode()
    try:
        key = load_pem_private_key(pem, password)
    except (ValueError, TypeError):
        raise ApprovalError(f"--key: cannot unlock {path}: wrong passphrase or damaged file") from None
    except Exception as exc:  # UnsupportedAlgorithm and friends: still one line
        raise ApprovalError(f"--key: cannot load {path} ({exc.__class__.__name__})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ApprovalError(
            f"--key: {path} is not an Ed25519 key; create one with `faultplane approvals keygen`"
        )
    return ApproverKey(key, key_id(key.public_key()))


def read_passphrase(*, confirm: bool = False, stdin: Any = None) -> str:
    """The approver's passphrase: $FAULTPLANE_APPROVER_PASSPHRASE (a CI secret), else asked on the terminal.

    With neither, refuse: a command run by an agent has no terminal, and must not get a prompt it can feed."""
    env = os.environ.get(PASSPHRASE_ENV)
    if env:
        return env
    stream = stdin if stdin is not None else sys.stdin
    if not (stream is not None and stream.isatty()):
        raise ApprovalError(
            "approvals are signed by a person: there is no terminal to ask the approver's passphrase on and "
            f"${PASSPHRASE_ENV} is not set (set it only from a CI secret store, never in an agent's environment)"
        )
    first = getpass.getpass("approver passphrase: ")
    if confirm and getpass.getpass("again: ") != first:
        raise ApprovalError("passphrase: the two entries differ; nothing was written")
    return first


# ---- signing and verifying -------------------------------------------------------------------------------------


def _check_hash(h: str, what: str = "content_hash") -> None:
    if not isinstance(h, str) or len(h) != 64 or any(c not in "0123456789abcdef" for c in h):
        raise ApprovalError(f"{what} must be a sha256 hex digest, got {str(h)[:80]!r}")


def approval_ttl_s(ttl_hours: float | None, policy_ttl_hours: float, purpose: str = "experiment") -> float:
    """The validity of an approval about to be signed, in seconds: the policy's `approval.ttl_hours` unless
    another is asked for. An experiment's approval may not stand longer than that (the policy states how long
    one may); a signed policy file may (a lab's loosening is signed for weeks), but for a finite time."""
    hours = policy_ttl_hours if ttl_hours is None else ttl_hours
    if not 0 < hours < math.inf:
        raise ApprovalError(
            f"--ttl-hours: {hours!r} is not a positive number of hours; fix: e.g. --ttl-hours 4"
        )
    if purpose == "experiment" and hours > policy_ttl_hours:
        raise ApprovalError(
            f"--ttl-hours: {hours:g} is longer than the policy's approval.ttl_hours ({policy_ttl_hours:g}); "
            "fix: ask for at most that, or a person raises approval.ttl_hours in the policy"
        )
    return hours * 3600.0


def sign_approval(
    content_hash: str,
    *,
    key: ApproverKey,
    trusted_keys: Sequence[str],
    family: str = "",
    reason: str = "",
    ttl_s: float = DEFAULT_TTL_S,
    purpose: Purpose = "experiment",
    also: Sequence[str] = (),
    now: float | None = None,
    record: bool = True,
) -> Approval:
    """Sign an approval of exactly this hash with a decrypted approver key the policy trusts; record it where
    the engine looks (when `record`). `also` lists other hashes of the very same content."""
    aliases = [h for h in also if h != content_hash]
    for h in (content_hash, *aliases):
        _check_hash(h)
    if not 0 < ttl_s < math.inf:  # NaN fails this too; an infinite one would never expire
        raise ApprovalError(f"ttl must be a positive, finite number of seconds, got {ttl_s}")
    if purpose not in ("experiment", "policy"):
        raise ApprovalError(f"purpose must be experiment or policy, got {purpose!r}")
    trusted = {t.key_id: t for t in parse_trusted_keys(trusted_keys)}
    me = trusted.get(key.key_id)
    if me is None:
        line = public_line(key.private_key.public_key(), os.environ.get("USER") or "approver")
        raise ApprovalError(
            f"this approver key ({key.key_id}) is not in the policy's approval.trusted_keys, so the engine "
            f"would not accept what it signs; a person adds `{line}` there"
        )
    issued = time.time() if now is None else now
    body: dict[str, Any] = {
        "v": 2,
        "for": purpose,
        "h": content_hash,
        "f": family,
        "by": me.principal,
        "kid": key.key_id,
        "iat": issued,
        "exp": issued + ttl_s,
        "why": reason,
    }
    if aliases:
        body["aka"] = aliases
    payload = _b64(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    signature = key.private_key.sign(_DOMAIN + payload.encode())
    token = f"{_PREFIX}.{payload}.{_b64(signature)}"
    approval = Approval(
        token, content_hash, family, me.principal, issued, issued + ttl_s, reason, purpose, key.key_id
    )
    if record and purpose == "experiment":
        folder = approvals_dir()
        folder.mkdir(parents=True, exist_ok=True)
        for h in (content_hash, *aliases):
            (folder / f"{h}.json").write_text(json.dumps(approval.to_dict(), indent=2))
    return approval


# Keys an in-process surface trusts for the length of one call, on top of the policy's: the MCP server signs a
# person's elicited "Approve" with a key that exists only in its memory. A context variable, not a global, so
# the trust reaches only the call made inside `session_trust(...)`.
_SESSION_KEYS: contextvars.ContextVar[tuple[TrustedKey, ...]] = contextvars.ContextVar(
    "faultplane_session_keys", default=()
)


@contextlib.contextmanager
def session_trust(*keys: TrustedKey) -> Iterator[None]:
    token = _SESSION_KEYS.set(_SESSION_KEYS.get() + keys)
    try:
        yield
    finally:
        _SESSION_KEYS.reset(token)


def _decode(token: str) -> tuple[str, dict[str, Any], bytes]:
    if not isinstance(token, str) or len(token) > MAX_TOKEN:
        raise ApprovalError("not a Faultplane approval token (expected `fpa2.<payload>.<signature>`)")
    parts = token.strip().split(".")
    if parts and parts[0] == _LEGACY_PREFIX:
        raise ApprovalError(MIGRATION)
    if len(parts) != 3 or parts[0] != _PREFIX:
        raise ApprovalError("not a Faultplane approval token (expected `fpa2.<payload>.<signature>`)")
    try:
        body = json.loads(_unb64(parts[1]))
    except (ValueError, UnicodeError, RecursionError):
        raise ApprovalError("approval token is unreadable (damaged or truncated)") from None
    try:
        signature = _unb64(parts[2])
    except (ValueError, UnicodeError):
        raise ApprovalError(
            "approval token's signature is unreadable (damaged, truncated or respelled)"
        ) from None
    if not isinstance(body, dict):
        raise ApprovalError("approval token payload is not an object")
    return parts[1], body, signature


def verify_token(
    token: str,
    content_hash: str,
    *,
    trusted_keys: Sequence[str] = (),
    purpose: Purpose = "experiment",
    now: float | None = None,
) -> Approval:
    """The approval if `token` is an unexpired approval of `content_hash` for `purpose`, signed by a trusted
    key (the policy's, or one `session_trust` lends this call); else ApprovalError saying why."""
    payload, body, signature = _decode(token)
    trusted = {t.key_id: t for t in (*parse_trusted_keys(trusted_keys), *_SESSION_KEYS.get())}
    if not trusted:
        raise ApprovalError(
            "the policy trusts no approver key (approval.trusted_keys is empty), so no approval can verify; a "
            "person runs `faultplane approvals keygen` and adds the printed line to approval.trusted_keys"
        )
    signer = trusted.get(str(body.get("kid", "")))
    if signer is None:
        raise ApprovalError(
            f"approval token is signed by a key the policy does not trust ({str(body.get('kid'))[:60]}); "
            "only keys listed in approval.trusted_keys approve"
        )
    from cryptography.exceptions import InvalidSignature

    try:
        signer.public_key.verify(signature, _DOMAIN + payload.encode())
    except InvalidSignature:
        raise ApprovalError("approval token signature does not verify (forged or altered)") from None
    if body.get("for") != purpose:
        raise ApprovalError(f"approval token approves a {body.get('for')!r}, not a {purpose!r}")
    aka = body.get("aka") or []
    if content_hash != body.get("h") and content_hash not in (aka if isinstance(aka, list) else []):
        raise ApprovalError(
            f"approval token is for a different version (hash {str(body.get('h'))[:12]}…, this one is "
            f"{content_hash[:12]}…): it changed since it was approved; approve it again"
        )
    t = time.time() if now is None else now
    try:
        issued, expires = float(body["iat"]), float(body["exp"])
    except (KeyError, TypeError, ValueError):
        raise ApprovalError("approval token has no valid issue/expiry time") from None
    if not (math.isfinite(issued) and math.isfinite(expires)):  # `"exp": Infinity` would never expire
        raise ApprovalError("approval token has no valid issue/expiry time")
    if t > expires:
        raise ApprovalError("approval token has expired; approve it again")
    if issued > t + CLOCK_SKEW_S:
        raise ApprovalError("approval token is issued in the future; check the approver's clock")
    return Approval(
        token.strip(),
        content_hash,
        str(body.get("f", "")),
        signer.principal,
        issued,
        expires,
        str(body.get("why", "")),
        purpose,
        signer.key_id,
    )


def verify_signed(
    payload_hash: str,
    signature: str,
    trusted_keys: Sequence[str],
    *,
    purpose: Purpose = "policy",
    now: float | None = None,
) -> str:
    """The principal who approved `payload_hash` for `purpose`; ApprovalError (one line, says why) otherwise.

    The stable entry point for anything besides experiments that needs a person's signed consent (a policy
    that loosens the floor passes purpose="policy"): `signature` is the token `faultplane approvals sign`
    prints, `trusted_keys` the policy's approval.trusted_keys of the *stricter* policy in force."""
    _check_hash(payload_hash, "payload_hash")
    return verify_token(signature, payload_hash, trusted_keys=trusted_keys, purpose=purpose, now=now).approver


def list_approvals() -> Iterator[dict[str, Any]]:
    folder = approvals_dir()
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.json")):
        try:
            if path.stat().st_size > MAX_TOKEN * 2:
                continue
            data = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(data, dict):
            yield data


def find_approval(
    content_hash: str, *, trusted_keys: Sequence[str] = (), now: float | None = None
) -> Approval | None:
    """The stored approval of exactly this hash, if it verifies."""
    return stored_approval(content_hash, trusted_keys=trusted_keys, now=now)[0]


def stored_approval(
    content_hash: str, *, trusted_keys: Sequence[str] = (), now: float | None = None
) -> tuple[Approval | None, str]:
    """(the stored approval of exactly this hash if it verifies, else None; why a stored one did not)."""
    path = approvals_dir() / f"{content_hash}.json"
    try:
        if not path.is_file() or path.stat().st_size > MAX_TOKEN * 2:
            return None, ""
        data = json.loads(path.read_text())
        token = data.get("token", "") if isinstance(data, dict) else ""
    except (OSError, ValueError, RecursionError):
        return None, f"the stored approval {path.name} is unreadable"
    try:
        return verify_token(token, content_hash, trusted_keys=trusted_keys, now=now), ""
    except ApprovalError as exc:
        return None, f"the stored approval does not count: {exc}"
