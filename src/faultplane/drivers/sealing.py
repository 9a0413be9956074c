"""Secrets in leases: sealed with a key that lives only in the controller process and its watchdog.

A lease's revert recipe often needs a credential (a Redis URL with a password, a DSN, an SSH password). The
lease file must survive the controller's death, so the credential cannot stay only in memory; it must not
sit on disk in clear either. A reference resolved at revert time (an env var name, a vault path) is no answer
for an inline secret or a password embedded in a URL, so each controller process draws a random AES-256-GCM
key, seals every sensitive string of a lease's arguments with it, and hands the key to its own watchdog over
a pipe. The key is never written anywhere: a lease whose controller *and* watchdog are both gone can no longer
be unsealed, and is parked for a person with its (masked) label, which is the honest outcome.

What counts as sensitive: any string holding one of the run's secret values, a URL with a password in its
user-info, a libpq ``password=`` keyword, and the value of any key named like a password or token.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import threading
from typing import Any
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "MASK",
    "SealedKeyMissing",
    "is_sensitive",
    "key_id",
    "mask_text",
    "own_key",
    "seal",
    "sealed_key_ids",
    "unseal",
]

MASK = "***"
_SEALED = "$sealed"
_SECRET_KEYS = re.compile(r"(?i)^(password|passwd|pass|secret|token|api_?key|auth|credentials?)$")
_CONNINFO_PW = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")
_URL_USERINFO = re.compile(r"(?i)([a-z][a-z0-9+.-]*://[^/@\s:]*:)([^/@\s]*)(@)")

_lock = threading.Lock()
_key: bytes | None = None


class SealedKeyMissing(RuntimeError):
    """The lease was sealed by a controller whose key this process does not hold."""

    def __init__(self, kid: str) -> None:
        super().__init__(
            f"the lease's secret arguments are sealed with key {kid}, held only by its controller and that "
            "controller's watchdog; both are gone, so it cannot be reverted automatically"
        )
        self.kid = kid


def own_key() -> bytes:
    """This process's sealing key (drawn once, never written to disk)."""
    global _key
    with _lock:
        if _key is None:
            _key = AESGCM.generate_key(bit_length=256)
        return _key


def key_id(key: bytes) -> str:
    return hashlib.sha256(b"faultplane-lease-key:" + key).hexdigest()[:16]


def is_sensitive(text: str, secret_values: list[str] | tuple[str, ...] = ()) -> bool:
    if any(s and s in text for s in secret_values):
        return True
    if _CONNINFO_PW.search(text):
        return True
    if "://" in text:
        try:
            if urlsplit(text).password:
                return True
        except ValueError:
            pass
        if _URL_USERINFO.search(text):
            return True
    return False


def mask_text(text: str, secret_values: list[str] | tuple[str, ...] = ()) -> str:
    """``text`` with secret values, URL passwords and ``password=`` values replaced by ***."""
    for s in sorted({s for s in secret_values if s}, key=len, reverse=True):
        text = text.replace(s, MASK)
    text = _URL_USERINFO.sub(lambda m: m.group(1) + (MASK if m.group(2) else "") + m.group(3), text)
    return _CONNINFO_PW.sub(lambda m: m.group(1) + MASK, text)


def seal(args: Any, secret_values: list[str] | tuple[str, ...] = ()) -> tuple[Any, str | None]:
    """Replace every sensitive string in ``args`` by a sealed token; also return the key id (None: nothing
    needed sealing, so the lease can be reverted by any process)."""
    key = own_key()
    aead = AESGCM(key)
    kid = key_id(key)
    used = False

    def enc(value: str) -> dict[str, str]:
        nonlocal used
        used = True
        nonce = os.urandom(12)
        blob = aead.encrypt(nonce, value.encode(), kid.encode())
        return {_SEALED: f"{kid}:{base64.b64encode(nonce + blob).decode()}"}

    def walk(node: Any, key_name: str | None = None) -> Any:
        if isinstance(node, str):
            secret_key = key_name is not None and _SECRET_KEYS.match(key_name) is not None
            return enc(node) if node and (secret_key or is_sensitive(node, secret_values)) else node
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, dict):
            return {k: walk(v, str(k)) for k, v in node.items()}
        return node

    out = walk(args)
    return out, (kid if used else None)


def sealed_key_ids(args: Any) -> set[str]:
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if set(node) == {_SEALED}:
                found.add(str(node[_SEALED]).split(":", 1)[0])
                return
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(args)
    return found


def unseal(args: Any, keys: dict[str, bytes]) -> Any:
    """``args`` with every sealed token opened; raises :class:`SealedKeyMissing` for a key not in ``keys``."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if set(node) == {_SEALED}:
                kid, _, blob_b64 = str(node[_SEALED]).partition(":")
                key = keys.get(kid)
                if key is None:
                    raise SealedKeyMissing(kid)
                blob = base64.b64decode(blob_b64)
                try:
                    return AESGCM(key).decrypt(blob[:12], blob[12:], kid.encode()).decode()
                except InvalidTag:
                    raise SealedKeyMissing(kid) from None
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(args)
