"""Signed post-exercise reports, evidence for ISO 22301 exercising and SOC 2 availability audits.

A report is a folder an auditor can take away:

    report.html          what was exercised and how it went (runs, statuses, recovery, requirements)
    journals/RUN.json    every journal the report cites, byte for byte as the store kept it
    manifest.json        the SHA-256 of each of those files, a hash chain over the journals in run order,
                         and an Ed25519 signature of the manifest by an approver key the organisation trusts

`verify_report` recomputes everything and names what changed: a cited journal, the report, a missing or an
added file, the chain, or the signature. The signature binds the manifest, the manifest binds every byte.
"""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "ReportError", "Verification", "build_report", "verify_report"]

FORMAT = "faultplane-exercise-report/1"


class ReportError(ValueError):
    """Input that cannot make or check a report; the message names what and the fix."""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sha_file(path: Path) -> str:
    """Streamed: a planted multi-gigabyte file is hashed, not loaded."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _canonical(manifest: dict[str, Any]) -> bytes:
    body = {k: v for k, v in manifest.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def chain(journal_hashes: list[str]) -> str:
    """The head of the hash chain over the journals' hashes in order: a journal left out, added, replaced or
    moved changes it."""
    head = _sha(FORMAT.encode())
    for h in journal_hashes:
        head = _sha(bytes.fromhex(head) + bytes.fromhex(h))
    return head


def _select(
    store: Any, gameday: str | None, since: datetime | None, until: datetime | None
) -> tuple[str, list[dict[str, Any]]]:
    if gameday:
        from faultplane.services.gameday import analyze_gameday

        a = analyze_gameday(gameday, store)
        ids = [r.run_id for r in a.runs if r.run_id]
        scope = f"GameDay {a.name} ({a.gameday_id})"
    else:
        if since is None:
            raise ReportError(
                "scope: give --gameday ID or --since DATE; fix: the exercise or period to report"
            )
        until = until or datetime.now(UTC)
        rows = store.query(
            "SELECT run_id FROM runs WHERE started_at >= ? AND started_at <= ? AND status NOT IN ('running') "
            "ORDER BY started_at, run_id",
            [since, until],
        )
        ids = [r["run_id"] for r in rows]
        scope = f"runs from {since:%Y-%m-%d %H:%M}Z to {until:%Y-%m-%d %H:%M}Z"
    if not ids:
        raise ReportError(f"{scope}: no runs to report; fix: another GameDay or period")
    bodies = {}
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        for r in store.query(
            f"SELECT run_id, body FROM journals WHERE run_id IN ({', '.join('?' for _ in chunk)})", chunk
        ):
            bodies[r["run_id"]] = r["body"]
    journals = []
    for rid in ids:
        if rid not in bodies:
            raise ReportError(
                f"run {rid}: its journal is not in the store; fix: index it (`faultplane runs list`)"
            )
        journals.append({"run_id": rid, "body": bodies[rid], "journal": json.loads(bodies[rid])})
    journals.sort(key=lambda j: (str(j["journal"].get("start")), j["run_id"]))
    return scope, journals


def _html(title: str, scope: str, journals: list[dict[str, Any]], generated: str) -> str:
    rows = []
    for j in journals:
        doc = j["journal"]
        exp = doc.get("experiment") or {}
        rec = (doc.get("steady_states") or {}).get("recovery") or {}
        tags = ", ".join(t for t in exp.get("tags") or [] if isinstance(t, str))
        rows.append(
            "<tr>"
            f"<td><code>{escape(j['run_id'])}</code></td><td>{escape(str(exp.get('title', '')))}</td>"
            f"<td>{escape(str(doc.get('start', ''))[:19])}</td><td>{escape(str(doc.get('status', '')))}</td>"
            f"<td>{escape(str(rec.get('time_to_recover_s', '-')))}</td><td>{escape(tags)}</td>"
            f"<td>{escape(str(doc.get('verdict') or ''))}</td>"
            "</tr>"
        )
    passed = sum(1 for j in journals if j["journal"].get("status") == "completed")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;vertical-align:top}}</style></head><body>
<h1>{escape(title)}</h1>
<p>Scope: {escape(scope)}. Generated {escape(generated)}. {passed} of {len(journals)} runs held their steady
state. Every run below is cited with its full journal in <code>journals/</code>; <code>manifest.json</code>
binds each file by SHA-256 and is signed: check it with <code>faultplane report verify &lt;this folder&gt;</code>.</p>
<table><tr><th>run</th><th>experiment</th><th>started (UTC)</th><th>status</th><th>recovered in (s)</th>
<th>requirements and tags</th><th>verdict</th></tr>{"".join(rows)}</table>
</body></html>
"""


def build_report(
    store: Any,
    out_dir: str | Path,
    *,
    gameday: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    title: str = "Resilience exercise report",
    key_path: Path | None = None,
    passphrase: str | None = None,
) -> dict[str, Any]:
    """Write the report folder and return its manifest; signed when `key_path` and `passphrase` are given."""
    scope, journals = _select(store, gameday, since, until)
    folder = Path(out_dir)
    if folder.exists() and any(folder.iterdir()):
        raise ReportError(f"{folder}: not empty; fix: a new folder for each report (reports are immutable)")
    (folder / "journals").mkdir(parents=True, exist_ok=True)
    generated = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cited = []
    for j in journals:
        data = j["body"].encode("utf-8")
        name = f"journals/{j['run_id']}.json"
        (folder / name).write_bytes(data)
        cited.append({"run_id": j["run_id"], "file": name, "sha256": _sha(data)})
    html = _html(title, scope, journals, generated).encode("utf-8")
    (folder / "report.html").write_bytes(html)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "title": title,
        "scope": scope,
        "generated_at": generated,
        "report": {"file": "report.html", "sha256": _sha(html)},
        "journals": cited,
        "chain": chain([c["sha256"] for c in cited]),
    }
    if key_path is not None:
        from faultplane.core.approval import load_signing_key, public_line

        key = load_signing_key(key_path, passphrase or "")
        pub = key_path.with_name(key_path.name + ".pub")
        principal = pub.read_text(encoding="utf-8").split()[-1] if pub.is_file() else "approver"
        manifest["signature"] = {
            "algorithm": "ed25519",
            "key_id": key.key_id,
            "public_key": public_line(key.private_key.public_key(), principal),
            "value": base64.b64encode(key.private_key.sign(_canonical(manifest))).decode(),
        }
    (folder / "manifest.json").write_text(
        json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return manifest


class Verification:
    """What `verify_report` found: problems (each names the file or part), and who signed."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.signer: str | None = None
        self.trusted: bool | None = None
        self.journals = 0

    @property
    def ok(self) -> bool:
        return not self.problems and self.signer is not None and self.trusted is not False


def verify_report(folder: str | Path, trusted_keys: list[str] | None = None) -> Verification:
    """Recompute every hash, the chain and the signature of a report folder."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_ssh_public_key

    root = Path(folder)
    v = Verification()
    from faultplane.core.hostile import HostileInput, load_json_file

    try:
        manifest = load_json_file(root / "manifest.json", "manifest")
    except FileNotFoundError:
        raise ReportError(
            f"{root}: no manifest.json; fix: the folder `faultplane report exercise` wrote"
        ) from None
    except HostileInput as exc:  # beyond the document limits: not a manifest this tool wrote
        raise ReportError(str(exc)) from None
    except (ValueError, OSError) as exc:
        v.problems.append(f"manifest.json: not JSON ({' '.join(str(exc).split())})")
        return v
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        v.problems.append(f"manifest.json: not a {FORMAT} manifest")
        return v
    listed = {"manifest.json"}
    entries = [manifest.get("report") or {}, *(manifest.get("journals") or [])]
    if not isinstance(manifest.get("journals") or [], list) or not all(isinstance(e, dict) for e in entries):
        v.problems.append(
            "manifest.json: `report` and `journals` entries must be objects with file and sha256"
        )
        return v
    for entry in entries:
        name = str(entry.get("file", ""))
        listed.add(name)
        path = (root / name).resolve()
        if not path.is_relative_to(root.resolve()):
            v.problems.append(f"manifest.json: {name!r} points outside the report folder")
            continue
        try:
            actual = _sha_file(path)
        except OSError:
            v.problems.append(f"{name}: missing")
            continue
        if actual != entry.get("sha256"):
            v.problems.append(
                f"{name}: changed (sha256 {actual[:16]}…, the manifest says {str(entry.get('sha256'))[:16]}…)"
            )
    v.journals = len(manifest.get("journals") or [])
    present = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    for extra in sorted(present - listed):
        v.problems.append(f"{extra}: not in the manifest (added after the report was made)")
    if chain([str(j.get("sha256", "")) for j in manifest.get("journals") or []]) != manifest.get("chain"):
        v.problems.append(
            "manifest.json: the hash chain over the journals does not match (a journal was added, removed or reordered)"
        )
    sig = manifest.get("signature")
    if not isinstance(sig, dict):
        v.problems.append("manifest.json: not signed (make it with --sign)")
        return v
    try:
        public = load_ssh_public_key(" ".join(str(sig.get("public_key", "")).split()[:2]).encode())
        if not isinstance(public, Ed25519PublicKey):
            raise ValueError("not an ed25519 key")
        public.verify(base64.b64decode(str(sig.get("value", ""))), _canonical(manifest))
        v.signer = str(sig.get("public_key", "")).split()[-1]
    except (InvalidSignature, ValueError, TypeError):
        v.problems.append(
            "manifest.json: the signature does not match the manifest (the manifest changed, or the signature is not this key's)"
        )
        return v
    if trusted_keys is not None:
        mine = " ".join(str(sig["public_key"]).split()[:2])
        v.trusted = any(" ".join(t.split()[:2]) == mine for t in trusted_keys)
        if not v.trusted:
            v.problems.append(f"signature: by {v.signer}, whose key is not among the trusted keys given")
    return v
