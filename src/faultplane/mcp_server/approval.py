"""A person approves over MCP: elicitation, never the model's own say-so.

When a tool call needs a human approval the policy has not got yet (a signed one from `faultplane guard
approve`), the server asks the person through the client:

* **URL mode** (preferred): a one-time page on this server's loopback interface shows the plan and its
  approval hash with Approve / Deny buttons. The client shows the link to the user; it is never put in tool
  output, so the model does not see it. The page's token is 256 random bits, valid once, for minutes.
* **Form mode**, only when that is all the client supports and the policy allows it (`approval.elicitation`):
  an in-client yes/no. A client may let the model answer forms, so form mode is only as good as the client;
  docs/security.md says so, and `approval.elicitation: [url]` turns it off.
* Neither: the call is refused with how a person approves instead (a signed approval in a terminal).

A "yes" becomes an fpa2 token signed by a key that exists only in this process's memory and is trusted only
inside the one call it was given for (`approvals.session_trust`), so the engine verifies it like any other.
Both protocol eras are served: up to 2025-11-25 the server sends `elicitation/create` mid-call; from
2026-07-28 it returns an `InputRequiredResult` and resumes when the client retries.
"""

from __future__ import annotations

import contextlib
import hmac
import html
import json
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, cast

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import NoBackChannelError
from mcp.types import (
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ElicitResult,
    InputRequiredResult,
)
from pydantic import BaseModel, Field

from faultplane.core import approval as approvals

__all__ = ["ApprovalBroker", "ApprovalPage", "PlanSummary"]

INPUT_KEY = "faultplane-approval"
WAIT_S = 300.0  # how long a call waits for the person on the page
PAGE_TTL_S = 600.0  # a link older than this is dead
TOKEN_TTL_S = 900.0  # the in-memory approval covers the call it was given for; this only bounds it
MAX_BODY = 4096
URL_PRINCIPAL = "person-on-mcp-approval-page"
FORM_PRINCIPAL = "mcp-client-form"
Decision = Literal["approve", "deny", "expired", "pending"]


@dataclass
class PlanSummary:
    """What the person sees: enough to know what they approve, bound by its hash."""

    title: str
    family: str
    approval_hash: str
    reasons: list[str]
    activities: list[str]
    targets: list[str] = field(default_factory=list)
    kind: str = "experiment run"

    def text(self) -> str:
        lines = [
            f"Approve this {self.kind}? {self.title!r} (family {self.family})",
            f"approval hash {self.approval_hash}",
            "needs approval because: " + "; ".join(self.reasons),
        ]
        lines += [f"  - {a}" for a in self.activities[:20]]
        return "\n".join(lines)


def summarize(
    document: Mapping[str, Any], *, family: str, approval_hash: str, reasons: list[str]
) -> PlanSummary:
    """The plan as the page shows it: every activity that runs, with what it calls."""

    def describe(act: Any) -> str:
        if not isinstance(act, Mapping):
            return repr(act)[:200]
        given = act.get("provider")
        prov: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        kind = prov.get("type", "?")
        what = {
            "driver": f"{prov.get('driver')}.{prov.get('name')}",
            "process": str(prov.get("path")),
            "python": f"{prov.get('module')}.{prov.get('func')}",
            "http": str(prov.get("url")),
        }.get(str(kind), "")
        args = prov.get("arguments")
        shown = json.dumps(args, sort_keys=True, default=str)[:300] if args else ""
        return f"{act.get('type', 'activity')} {act.get('name', '?')}: {kind} {what} {shown}".strip()

    acts: list[str] = []
    ssh = document.get("steady-state-hypothesis")
    for probe in (ssh.get("probes") or []) if isinstance(ssh, Mapping) else []:
        acts.append("steady state: " + describe(probe))
    for section in ("method", "rollbacks"):
        for act in document.get(section) or []:
            acts.append(f"{section}: " + describe(act))
    targets = [
        json.dumps(t, sort_keys=True, default=str)[:200]
        for t in (document.get("targets") or [])
        if t is not None
    ]
    return PlanSummary(str(document.get("title", "")), family, approval_hash, reasons, acts, targets)


# ---- the one-time approval page ----------------------------------------------------------------------------------


@dataclass
class _Pending:
    id: str
    secret: str
    csrf: str
    summary: PlanSummary
    created: float
    decision: Decision = "pending"
    done: threading.Event = field(default_factory=threading.Event)

    def decide(self, decision: Decision) -> None:
        if self.decision == "pending":
            self.decision = decision
            self.done.set()


class ApprovalPage:
    """A loopback HTTP server with one page per pending approval, each reachable once through its link."""

    def __init__(self, host: str = "127.0.0.1", ttl_s: float = PAGE_TTL_S) -> None:
        self._host = host
        self._ttl = ttl_s
        self._lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def origin(self) -> str:
        self._start()
        assert self._server is not None
        return f"http://{self._host}:{self._server.server_address[1]}"

    def _start(self) -> None:
        with self._lock:
            if self._server is not None:
                return
            page = self

            class Handler(_Handler):
                owner = page

            self._server = ThreadingHTTPServer((self._host, 0), Handler)
            self._server.daemon_threads = True
            self._thread = threading.Thread(
                target=self._server.serve_forever, name="approval-page", daemon=True
            )
            self._thread.start()

    def open(self, summary: PlanSummary) -> tuple[str, str]:
        """(elicitation id, one-time URL) for a new pending approval."""
        origin = self.origin
        pending = _Pending(
            id=secrets.token_hex(8),
            secret=secrets.token_urlsafe(32),
            csrf=secrets.token_urlsafe(16),
            summary=summary,
            created=time.monotonic(),
        )
        with self._lock:
            self._expire()
            self._pending[pending.id] = pending
        return pending.id, f"{origin}/approve/{pending.id}.{pending.secret}"

    def get(self, pid: str) -> _Pending | None:
        with self._lock:
            self._expire()
            return self._pending.get(pid)

    def _expire(self) -> None:
        now = time.monotonic()
        for pid, p in list(self._pending.items()):
            if now - p.created > self._ttl:
                p.decide("expired")
                del self._pending[pid]

    def lookup(self, link: str) -> _Pending | None:
        pid, _, secret = link.partition(".")
        p = self.get(pid)
        if p is None or p.decision != "pending" or not hmac.compare_digest(p.secret, secret):
            return None
        return p

    def finish(self, pid: str) -> None:
        with self._lock:
            self._pending.pop(pid, None)

    async def wait(self, pid: str, timeout_s: float) -> Decision:
        p = self.get(pid)
        if p is None:
            return "expired"
        await anyio.to_thread.run_sync(p.done.wait, timeout_s, abandon_on_cancel=True)
        if p.decision == "pending":
            p.decide("expired")  # the link dies with the wait: nobody approves a call that gave up
        return p.decision

    def close(self) -> None:
        with self._lock:
            server, self._server = self._server, None
            for p in self._pending.values():
                p.decide("expired")
            self._pending.clear()
        if server is not None:
            server.shutdown()
            server.server_close()


_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
}


class _Handler(BaseHTTPRequestHandler):
    owner: ApprovalPage
    server_version = "faultplane-approval"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        pass  # request lines carry the one-time secret: never write them anywhere

    def _send(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in _HEADERS.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _origin_ok(self) -> bool:
        """DNS rebinding and cross-site posts: the Host must be this loopback server, an Origin must match."""
        port = cast(ThreadingHTTPServer, self.server).server_port
        allowed = {f"127.0.0.1:{port}", f"localhost:{port}"}
        if self.headers.get("Host", "") not in allowed:
            return False
        origin = self.headers.get("Origin")
        return origin is None or origin in {f"http://{h}" for h in allowed}

    def _link(self) -> str | None:
        path = urllib.parse.urlsplit(self.path).path
        if not path.startswith("/approve/"):
            return None
        return path.removeprefix("/approve/")

    def do_GET(self) -> None:
        link = self._link()
        if not self._origin_ok():
            self._send(403, _page("Refused", "<p>This page only answers on its own loopback address.</p>"))
            return
        p = self.owner.lookup(link) if link else None
        if p is None:
            self._send(
                404, _page("Link not valid", "<p>This approval link was used already, or has expired.</p>")
            )
            return
        self._send(200, _approval_form(p))

    def do_POST(self) -> None:
        link = self._link()
        if not self._origin_ok():
            self._send(403, _page("Refused", "<p>Cross-site request refused.</p>"))
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self._send(413, _page("Refused", "<p>Request too large.</p>"))
            return
        body = self.rfile.read(length).decode("utf-8", "replace")
        form = urllib.parse.parse_qs(body, max_num_fields=8)
        p = self.owner.lookup(link) if link else None
        if p is None:
            self._send(
                404, _page("Link not valid", "<p>This approval link was used already, or has expired.</p>")
            )
            return
        csrf = (form.get("csrf") or [""])[0]
        decision = (form.get("decision") or [""])[0]
        if not hmac.compare_digest(csrf, p.csrf) or decision not in ("approve", "deny"):
            self._send(400, _page("Refused", "<p>The form was not this page's own.</p>"))
            return
        # decided, the link is dead (lookup wants "pending"); the waiting call collects the decision and
        # removes the entry, so a person quicker than the client's reply is not mistaken for an expiry
        p.decide("approve" if decision == "approve" else "deny")
        word = "Approved" if decision == "approve" else "Denied"
        self._send(200, _page(word, f"<p>{word}. You can close this tab and return to your client.</p>"))

    def do_HEAD(self) -> None:
        self._send(405, "")

    do_PUT = do_DELETE = do_PATCH = do_HEAD


def _page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Faultplane: {html.escape(title)}</title>"
        "<style>body{font:15px system-ui,sans-serif;max-width:52em;margin:2em auto;padding:0 1em}"
        "code{word-break:break-all}li{margin:.2em 0}button{font-size:1.1em;margin-right:1em;padding:.4em 1.4em}"
        ".warn{background:#fff4d6;padding:.6em}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )


def _approval_form(p: _Pending) -> str:
    s = p.summary
    e = html.escape
    acts = "".join(f"<li><code>{e(a)}</code></li>" for a in s.activities[:200])
    targets = "".join(f"<li><code>{e(t)}</code></li>" for t in s.targets[:50])
    reasons = "".join(f"<li>{e(r)}</li>" for r in s.reasons)
    return _page(
        f"Approve {s.kind}?",
        f"<p class='warn'>An MCP client asks to run this. The title and names below were written by whoever "
        f"asked (possibly an AI agent): judge it by what it runs.</p>"
        f"<p><b>{e(s.title)}</b> (family <code>{e(s.family)}</code>)</p>"
        f"<p>Approval hash <code>{e(s.approval_hash)}</code></p>"
        f"<h2>Why it needs a person</h2><ul>{reasons}</ul>"
        f"<h2>What it runs</h2><ul>{acts}</ul>"
        + (f"<h2>Targets</h2><ul>{targets}</ul>" if targets else "")
        + f"<form method='post'><input type='hidden' name='csrf' value='{e(p.csrf)}'>"
        "<button name='decision' value='approve'>Approve</button>"
        "<button name='decision' value='deny'>Deny</button></form>",
    )


# ---- the broker: picks a mode, asks, and turns a yes into a token the engine verifies ----------------------------


class ApprovalForm(BaseModel):
    approve: bool = Field(description="true to approve exactly the plan with the hash shown, false to deny")


@dataclass
class _FormPending:
    summary: PlanSummary
    created: float


class ApprovalBroker:
    """One per server process: the approval page, the in-memory signing key, and form-mode state."""

    def __init__(self, *, wait_s: float = WAIT_S, page: ApprovalPage | None = None) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        self.wait_s = wait_s
        self.page = page or ApprovalPage()
        # One in-memory key per way of asking, never written anywhere: the principal the engine records then
        # says which it was (a page only a person can open, or a client form a model might have answered).
        self._keys = {p: Ed25519PrivateKey.generate() for p in (URL_PRINCIPAL, FORM_PRINCIPAL)}
        self._forms: dict[str, _FormPending] = {}
        self.store: Callable[[], Any] | None = None  # where answers are audited (the server sets its store)

    def _audit(self, principal: str, action: str, summary: PlanSummary) -> None:
        if self.store is None:
            return
        from datetime import UTC, datetime

        details = {"approval_hash": summary.approval_hash, "kind": summary.kind, "title": summary.title}
        row = {"ts": datetime.now(UTC), "actor": principal, "action": action, "subject": summary.family}
        with contextlib.suppress(Exception):  # the audit must never turn a person's answer into a crash
            self.store().insert("audit", [{**row, "details": json.dumps(details, sort_keys=True)}])

    def _trusted(self, principal: str) -> approvals.TrustedKey:
        public = self._keys[principal].public_key()
        return approvals.TrustedKey(principal, approvals.key_id(public), public)

    @contextlib.contextmanager
    def trust(self, token: str | None) -> Iterator[None]:
        """Lend the in-memory keys' trust to the call made inside, only when it carries one of their tokens."""
        if not token:
            yield
            return
        with approvals.session_trust(*(self._trusted(p) for p in self._keys)):
            yield

    def _token(self, summary: PlanSummary, principal: str) -> str:
        self._audit(principal, "approve", summary)
        trusted = self._trusted(principal)
        granted = approvals.sign_approval(
            summary.approval_hash,
            key=approvals.ApproverKey(self._keys[principal], trusted.key_id),
            trusted_keys=[trusted.line()],
            family=summary.family,
            reason=f"approved through MCP elicitation ({principal})",
            ttl_s=TOKEN_TTL_S,
            record=False,
        )
        return granted.token

    @staticmethod
    def modes(ctx: Context, allowed: list[str]) -> list[str]:
        caps = ctx.client_capabilities
        eli = caps.elicitation if caps is not None else None
        if eli is None:
            return []
        offered = []
        if eli.url is not None:
            offered.append("url")
        # the spec: an empty elicitation capability means form mode (clients from before URL mode existed)
        if eli.form is not None or (eli.url is None and eli.form is None):
            offered.append("form")
        return [m for m in offered if m in allowed]

    async def ask(
        self, ctx: Context, summary: PlanSummary, allowed: list[str], *, how_else: str
    ) -> str | InputRequiredResult:
        """A token for `summary.approval_hash` once a person said yes; an InputRequiredResult on a 2026-07-28
        connection's first round; ToolError when nobody can be asked or the answer is no."""
        modern = (ctx.protocol_version or "") >= "2026-07-28"
        if modern and ctx.request_state:
            return await self._resume(ctx, summary)
        modes = self.modes(ctx, allowed)
        if not modes:
            offered = "an MCP client that cannot ask a person (it declares no elicitation capability"
            if allowed != ["url", "form"]:
                offered += f", or none the policy allows: approval.elicitation = {allowed}"
            raise ToolError(
                f"this {summary.kind} needs a human approval ({'; '.join(summary.reasons)}) and it came from "
                f"{offered}); fix: {how_else}"
            )
        message = (
            f"Faultplane needs a person to approve a {summary.kind} ({summary.title!r}, approval hash "
            f"{summary.approval_hash[:16]}…)."
        )
        if modes[0] == "url":
            pid, url = self.page.open(summary)
            message += " Open the link, review the plan, and choose Approve or Deny."
            if modern:
                req = ElicitRequest(
                    params=ElicitRequestURLParams(message=message, url=url, elicitation_id=pid)
                )
                return InputRequiredResult(input_requests={INPUT_KEY: req}, request_state=f"url:{pid}")
            try:
                result = await ctx.elicit_url(message, url, pid)
            except NoBackChannelError:
                self.page.finish(pid)
                raise ToolError(self._no_channel(summary, how_else)) from None
            return await self._after_url(ctx, pid, result.action, summary, modern=False)
        form_message = message + "\n" + summary.text()
        if modern:
            fid = secrets.token_hex(8)
            now = time.monotonic()
            # a client that never comes back must not grow this forever
            self._forms = {k: v for k, v in self._forms.items() if now - v.created < PAGE_TTL_S}
            self._forms[fid] = _FormPending(summary, now)
            schema = ApprovalForm.model_json_schema()
            req = ElicitRequest(params=ElicitRequestFormParams(message=form_message, requested_schema=schema))
            return InputRequiredResult(input_requests={INPUT_KEY: req}, request_state=f"form:{fid}")
        try:
            answer = await ctx.elicit(form_message, ApprovalForm)
        except NoBackChannelError:
            raise ToolError(self._no_channel(summary, how_else)) from None
        approved = answer.action == "accept" and bool(getattr(answer, "data", None) and answer.data.approve)
        return self._form_outcome(approved, answer.action, summary)

    @staticmethod
    def _no_channel(summary: PlanSummary, how_else: str) -> str:
        return (
            f"this {summary.kind} needs a human approval ({'; '.join(summary.reasons)}) and this connection cannot "
            f"carry a question to the person (stateless HTTP has no server-to-client channel); fix: {how_else}"
        )

    def _form_outcome(self, approved: bool, action: str, summary: PlanSummary) -> str:
        if not approved:
            self._audit(FORM_PRINCIPAL, "deny", summary)
            raise ToolError(f"the {summary.kind} was not approved in the client ({action}); nothing ran")
        return self._token(summary, FORM_PRINCIPAL)

    async def _after_url(
        self, ctx: Context, pid: str, action: str, summary: PlanSummary, *, modern: bool
    ) -> str:
        p = self.page.get(pid)
        if p is None or p.summary.approval_hash != summary.approval_hash:
            raise ToolError(
                f"the approval link for this {summary.kind} has expired; call again to get a new one"
            )
        if action != "accept":
            p.decide("deny")
            self.page.finish(pid)
            raise ToolError(f"the person declined to open the approval page ({action}); nothing ran")
        decision = await self.page.wait(pid, self.wait_s)
        self.page.finish(pid)
        if not modern:
            with contextlib.suppress(Exception):  # a courtesy to the client; the decision stands either way
                await ctx.session.send_elicit_complete(pid, related_request_id=ctx.request_id)
        if decision == "approve":
            return self._token(summary, URL_PRINCIPAL)
        if decision == "deny":
            self._audit(URL_PRINCIPAL, "deny", summary)
            raise ToolError(f"the person denied this {summary.kind} on the approval page; nothing ran")
        raise ToolError(
            f"no decision on the approval page within {self.wait_s:g} s; nothing ran (call again for a new link)"
        )

    async def _resume(self, ctx: Context, summary: PlanSummary) -> str:
        state = ctx.request_state or ""
        kind, _, ref = state.partition(":")
        responses = ctx.input_responses or {}
        answer = responses.get(INPUT_KEY)
        action = answer.action if isinstance(answer, ElicitResult) else "cancel"
        if kind == "url":
            return await self._after_url(ctx, ref, action, summary, modern=True)
        if kind == "form":
            pending = self._forms.pop(ref, None)
            if pending is None or pending.summary.approval_hash != summary.approval_hash:
                raise ToolError(f"this approval request is unknown or for another {summary.kind}; call again")
            content = answer.content if isinstance(answer, ElicitResult) else None
            approved = action == "accept" and isinstance(content, dict) and content.get("approve") is True
            return self._form_outcome(approved, action, summary)
        raise ToolError("request_state: not one this server issued; call the tool again without it")

    # ---- the gates the tools call ----

    async def for_run(
        self, ctx: Context, source: Any, variables: Mapping[str, Any] | None, store: Any
    ) -> str | InputRequiredResult | None:
        """Before chaos_run_experiment runs: None when no approval is needed or another rule refuses anyway
        (the engine then says why), else the approval (token) or the question to ask (InputRequiredResult)."""
        from faultplane.core.formats import ExperimentError
        from faultplane.core.policy import PolicyError, load_policy
        from faultplane.services.prepared import decide, prepare

        def check() -> tuple[Any, Any, Any] | None:
            try:
                prepared = prepare(source, variables)
                pol = load_policy()
            except (ExperimentError, PolicyError, LookupError, ValueError):
                return None  # the run itself reports it, with the field and the fix
            return prepared, pol, decide(prepared, pol, store, None)

        checked = await anyio.to_thread.run_sync(check)
        if checked is None:
            return None
        prepared, pol, decision = checked
        if decision.allowed or any(v.rule != "approval.required" for v in decision.violations):
            return None
        summary = summarize(
            prepared.document,
            family=prepared.family,
            approval_hash=prepared.approval_hash,
            reasons=list(decision.approval_required),
        )
        how_else = (
            "a person reviews the experiment and runs `faultplane guard approve <experiment file>` in a terminal "
            f"(signed with a key listed in approval.trusted_keys; approval hash {prepared.approval_hash[:16]}…), "
            "then the call is made again"
        )
        return await self.ask(ctx, summary, list(pol.approval.elicitation), how_else=how_else)

    async def for_fault(
        self, ctx: Context, spec: Mapping[str, Any], registry: Any
    ) -> str | InputRequiredResult | None:
        """Before chaos_inject_fault registers or arms a fault of a type the policy reserves for a person
        (`inject` without a type arms the registered fault, so its registered type counts)."""
        from faultplane.core.policy import PolicyError, load_policy, normalize_text
        from faultplane.services.faults import approval_spec, fault_approval_hash, list_faults

        def look() -> tuple[Any, str]:
            kind = spec.get("fault_type") or next(
                (f.fault_type for f in list_faults(registry) if f.name == spec.get("fault_name")), ""
            )
            return load_policy(), str(kind)

        try:
            pol, kind = await anyio.to_thread.run_sync(look)
        except PolicyError as exc:
            raise ToolError(str(exc)) from None
        if normalize_text(kind) not in {normalize_text(f) for f in pol.approval.fault_types}:
            return None
        # the same call the service will check the approval against (services.faults.manage_fault)
        spec = approval_spec(
            spec["fault_name"],  # chaos_inject_fault's required arguments: always there
            spec["action"],
            kind,
            spec.get("probability"),
            spec.get("duration_seconds"),
        )
        ahash = fault_approval_hash(spec)
        summary = PlanSummary(
            title=f"fault {spec.get('fault_name')!r}",
            family=f"fault:{spec.get('fault_name')}",
            approval_hash=ahash,
            reasons=[f"{kind} faults need approval by policy"],
            activities=[json.dumps(dict(spec), sort_keys=True, default=str)],
            kind="fault registration",
        )
        how_else = (
            "register it from an experiment a person approved with `faultplane guard approve`, or from an MCP "
            "client that can ask its user (URL elicitation)"
        )
        answer = await self.ask(ctx, summary, list(pol.approval.elicitation), how_else=how_else)
        if isinstance(answer, str):
            with self.trust(answer):  # the same verification the engine applies, not a look-alike
                approvals.verify_token(answer, ahash)
        return answer

    def close(self) -> None:
        self.page.close()
