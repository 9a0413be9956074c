"""A person approves over MCP (elicitation), never the model: real server subprocesses, real SDK clients with
elicitation callbacks, and the approval page answered with real HTTP requests on loopback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.client.session import ClientSession
from mcp.types import ElicitationCapability, ElicitRequestURLParams, ElicitResult, FormElicitationCapability
from mcp_helpers import ServerEnv, make_env, server_argv

from mcp import Client, MCPError, StdioServerParameters

pytestmark = pytest.mark.anyio

URL_PRINCIPAL = "person-on-mcp-approval-page"
FORM_PRINCIPAL = "mcp-client-form"
LAB = "gates: {required: false}\n"


def needs_approval(marker: Path) -> str:
    """Marks `marker` when it runs, then registers a resource-exhaustion fault: the policy wants a person."""
    return f"""\
title: MCP approval
method:
  - type: action
    name: mark-ran
    provider: {{type: python, module: mcp_target, func: mark, arguments: {{path: "{marker}", text: ran}}}}
  - type: action
    name: exhaust-pool
    provider:
      type: driver
      driver: faults
      name: register
      arguments: {{name: approval-pool, fault_type: resource_exhaustion, probability: 1.0}}
rollbacks:
  - type: action
    name: release-pool
    provider: {{type: driver, driver: faults, name: remove, arguments: {{name: approval-pool}}}}
"""


@pytest.fixture
def senv(tmp_path: Path) -> ServerEnv:
    env = make_env(tmp_path / "srv")
    Path(env.env["FAULTPLANE_POLICY"]).write_text(LAB, encoding="utf-8")
    return env


ElicitFn = Callable[[Any, Any], Awaitable[ElicitResult]]


def client(senv: ServerEnv, mode: str, callback: ElicitFn | None = None) -> Client:
    argv = server_argv()
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=senv.env)
    return Client(params, mode=mode, elicitation_callback=callback, read_timeout_seconds=60)  # type: ignore[arg-type]


class Person:
    """Someone at a browser: opens the link the client showed, reads the plan, clicks a button."""

    def __init__(self, decision: str = "approve", client_action: str = "accept") -> None:
        self.decision = decision
        self.client_action = client_action
        self.urls: list[str] = []
        self.pages: list[str] = []
        self.messages: list[str] = []
        self.send, self.receive = anyio.create_memory_object_stream[str](4)

    async def callback(self, ctx: Any, params: Any) -> ElicitResult:
        assert isinstance(params, ElicitRequestURLParams), params
        self.messages.append(params.message)
        self.urls.append(params.url)
        if self.client_action == "accept":
            await self.send.send(params.url)  # the person clicks later, out of band
        return ElicitResult(action=self.client_action)  # type: ignore[arg-type]

    async def browse(self) -> None:
        async for url in self.receive:
            async with httpx.AsyncClient(timeout=10) as http:
                page = await http.get(url)
                assert page.status_code == 200, page.text
                self.pages.append(page.text)
                csrf = re.search(r"name='csrf' value='([^']+)'", page.text)
                assert csrf is not None
                done = await http.post(url, data={"csrf": csrf.group(1), "decision": self.decision})
                assert done.status_code == 200, done.text
                again = await http.get(url)
                assert again.status_code == 404  # one time only


async def run_tool(c: Client, person: Person | None, name: str, args: dict[str, Any]) -> Any:
    async with anyio.create_task_group() as tg:
        if person is not None:
            tg.start_soon(person.browse)
        try:
            return await c.call_tool(name, args)
        finally:
            if person is not None:
                await person.send.aclose()


async def audited(c: Client) -> Any:
    """The approval answers in the audit table, as the store holds them."""
    sql = "SELECT actor, action, subject FROM audit WHERE action IN ('approve', 'deny') ORDER BY ts"
    r = await c.call_tool("chaos_analyze", {"sql": sql})
    assert not r.is_error, r.content
    return r.structured_content["rows"]


async def approved_by(c: Client, run_id: str) -> Any:
    """Who the engine recorded as the approver, from the run's journal as the tool returns it."""
    r = await c.call_tool("chaos_get_journal", {"run_id": run_id, "format": "json"})
    assert not r.is_error, r.content
    found: list[Any] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "approved_by" in node:
                found.append(node["approved_by"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(json.loads(r.structured_content["journal"]))
    assert found, "the journal records no policy decision"
    return found[0]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_person_approves_on_the_page_and_the_model_never_sees_the_link(
    senv: ServerEnv, tmp_path: Path, mode: str
) -> None:
    marker = tmp_path / "ran"
    person = Person()
    with anyio.fail_after(90):
        async with client(senv, mode, person.callback) as c:
            r = await run_tool(c, person, "chaos_run_experiment", {"experiment": needs_approval(marker)})
            assert not r.is_error, r.content
            assert await approved_by(c, r.structured_content["run_id"]) == URL_PRINCIPAL
            assert await audited(c) == [[URL_PRINCIPAL, "approve", "mcp-approval"]]
    assert r.structured_content["status"] == "completed", r.structured_content
    assert marker.read_text() == "ran"
    [url] = person.urls
    assert url.startswith("http://127.0.0.1:") and "/approve/" in url
    secret = url.rsplit(".", 1)[1]
    shown = json.dumps(r.model_dump(mode="json"))
    assert (
        secret not in shown and url.split("/approve/")[0] not in shown
    )  # nothing of the link reaches the model
    page = person.pages[0]
    assert "exhaust-pool" in page and "resource_exhaustion" in page and "Approval hash" in page


@pytest.mark.parametrize(
    ("decision", "action"), [("deny", "accept"), ("approve", "decline"), ("approve", "cancel")]
)
async def test_a_deny_or_a_declined_link_runs_nothing(
    senv: ServerEnv, tmp_path: Path, decision: str, action: str
) -> None:
    marker = tmp_path / "ran"
    person = Person(decision, action)
    with anyio.fail_after(90):
        async with client(senv, "legacy", person.callback) as c:
            r = await run_tool(c, person, "chaos_run_experiment", {"experiment": needs_approval(marker)})
            assert r.is_error
            text = r.content[0].text
            assert ("denied" in text) if decision == "deny" else ("declined" in text)
            assert await audited(c) == (
                [[URL_PRINCIPAL, "deny", "mcp-approval"]] if decision == "deny" else []
            )
    assert not marker.exists()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_that_cannot_ask_a_person_is_refused_with_how_to_approve(
    senv: ServerEnv, tmp_path: Path, mode: str
) -> None:
    marker = tmp_path / "ran"
    forged = "fpa2.eyJoIjoiMCJ9.AAAA"
    with anyio.fail_after(90):
        async with client(senv, mode) as c:
            r = await c.call_tool("chaos_run_experiment", {"experiment": needs_approval(marker)})
            assert r.is_error
            text = r.content[0].text
            assert "needs a human approval" in text and "faultplane guard approve" in text
            # the model has no argument to pass an approval through: an invented one changes nothing
            r = await c.call_tool(
                "chaos_run_experiment", {"experiment": needs_approval(marker), "approval_token": forged}
            )
            assert r.is_error
            # nor can it hand the server a made-up resume state (the SDK seals request_state; ours is checked too)
            try:
                r = await c.call_tool(
                    "chaos_run_experiment",
                    {"experiment": needs_approval(marker)},
                    request_state="url:0123456789abcdef",
                    input_responses={"faultplane-approval": ElicitResult(action="accept")},
                )
                assert r.is_error
            except MCPError as exc:
                assert "requestState" in str(exc)
    assert not marker.exists()


def _form_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """An older client: it offers form-mode elicitation only."""
    original = ClientSession._build_capabilities

    def build(self: ClientSession, version: str) -> Any:
        caps = original(self, version)
        if caps.elicitation is not None:
            caps.elicitation = ElicitationCapability(form=FormElicitationCapability())
        return caps

    monkeypatch.setattr(ClientSession, "_build_capabilities", build)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_form_mode_when_that_is_all_the_client_offers(
    senv: ServerEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    _form_only(monkeypatch)
    marker = tmp_path / "ran"
    asked: list[str] = []

    async def answer(ctx: Any, params: Any) -> ElicitResult:
        assert getattr(params, "mode", "form") == "form"
        asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": True})

    with anyio.fail_after(90):
        async with client(senv, mode, answer) as c:
            r = await c.call_tool("chaos_run_experiment", {"experiment": needs_approval(marker)})
            assert not r.is_error, r.content
            assert await approved_by(c, r.structured_content["run_id"]) == FORM_PRINCIPAL
    assert marker.read_text() == "ran"
    assert "approval hash" in asked[0] and "exhaust-pool" in asked[0]


async def test_form_answers_no_and_a_url_only_policy_refuse(
    senv: ServerEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _form_only(monkeypatch)
    marker = tmp_path / "ran"

    async def no(ctx: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="accept", content={"approve": False})

    async def yes(ctx: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="accept", content={"approve": True})

    with anyio.fail_after(90):
        async with client(senv, "legacy", no) as c:
            r = await c.call_tool("chaos_run_experiment", {"experiment": needs_approval(marker)})
            assert r.is_error and "not approved" in r.content[0].text
        Path(senv.env["FAULTPLANE_POLICY"]).write_text(LAB + "approval: {elicitation: [url]}\n")
        async with client(senv, "legacy", yes) as c:
            r = await c.call_tool("chaos_run_experiment", {"experiment": needs_approval(marker)})
            assert r.is_error and "approval.elicitation" in r.content[0].text
    assert not marker.exists()


async def test_a_signed_cli_approval_needs_no_question(senv: ServerEnv, tmp_path: Path) -> None:
    from faultplane.core.approval import generate_key

    key = tmp_path / "keys" / "approver.key"
    line = generate_key(key, "alice", "correct horse battery staple")
    Path(senv.env["FAULTPLANE_POLICY"]).write_text(
        LAB + f"approval: {{trusted_keys: [{json.dumps(line)}]}}\n"
    )
    marker = tmp_path / "ran"
    exp = tmp_path / "exp.yaml"
    exp.write_text(needs_approval(marker))
    signed = subprocess.run(
        [sys.executable, "-m", "faultplane.cli.main", "guard", "approve", str(exp), "--key", str(key)],
        env={**os.environ, **senv.env, "FAULTPLANE_APPROVER_PASSPHRASE": "correct horse battery staple"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert signed.returncode == 0, signed.stderr
    with anyio.fail_after(90):
        async with client(senv, "auto") as c:  # no elicitation at all: the signed approval is enough
            r = await c.call_tool("chaos_run_experiment", {"experiment": exp.read_text()})
            assert not r.is_error, r.content
            assert await approved_by(c, r.structured_content["run_id"]) == "alice"


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_approval_class_fault_registration_asks_a_person(senv: ServerEnv, mode: str) -> None:
    part = {"fault_name": "part", "action": "register", "fault_type": "network_partition", "probability": 0.5}
    with anyio.fail_after(90):
        async with client(senv, mode) as c:
            r = await c.call_tool("chaos_inject_fault", part)
            assert r.is_error and "needs a human approval" in r.content[0].text
            st = await c.call_tool("chaos_status", {})
            assert st.structured_content["active_faults"] == []
            ok = await c.call_tool("chaos_inject_fault", {**part, "fault_type": "latency"})
            assert not ok.is_error  # ordinary faults need nobody
        person = Person()
        async with client(senv, mode, person.callback) as c:
            r = await run_tool(c, person, "chaos_inject_fault", part)
            assert not r.is_error, r.content
            st = await c.call_tool("chaos_status", {})
            assert [f["fault_type"] for f in st.structured_content["active_faults"]] == ["network_partition"]
        assert "network_partition" in person.pages[0]
        denied = Person("deny")
        async with client(senv, mode, denied.callback) as c:
            r = await run_tool(c, denied, "chaos_inject_fault", {**part, "fault_name": "part2"})
            assert r.is_error and "denied" in r.content[0].text


async def test_a_bare_client_session_gets_the_url_elicitation(senv: ServerEnv, tmp_path: Path) -> None:
    """The SDK's low-level ClientSession (initialize handshake), as most clients embed it."""
    from mcp import stdio_client

    marker = tmp_path / "ran"
    person = Person()
    argv = server_argv()
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=senv.env)
    with anyio.fail_after(90):
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, elicitation_callback=person.callback) as session,
        ):
            init = await session.initialize()
            assert init.protocol_version == "2025-11-25"
            async with anyio.create_task_group() as tg:
                tg.start_soon(person.browse)
                r = await session.call_tool("chaos_run_experiment", {"experiment": needs_approval(marker)})
                await person.send.aclose()
    assert not r.is_error, r.content
    assert marker.read_text() == "ran" and len(person.urls) == 1


@pytest.mark.parametrize(("extra", "mode"), [((), "legacy"), ((), "auto"), (("--stateless",), "legacy")])
async def test_over_http(senv: ServerEnv, tmp_path: Path, extra: tuple[str, ...], mode: str) -> None:
    """Streamable HTTP: a session's SSE stream carries the question; stateless HTTP cannot, and says how else."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client
    from mcp_helpers import run_http_server

    marker = tmp_path / "ran"
    person = Person()
    with run_http_server(senv, *extra) as srv, anyio.fail_after(90):
        http = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=120))
        transport = streamable_http_client(srv.url, http_client=http)
        async with Client(transport, mode=mode, elicitation_callback=person.callback) as c:  # type: ignore[arg-type]
            r = await run_tool(c, person, "chaos_run_experiment", {"experiment": needs_approval(marker)})
    if extra:
        # stateless: no session keeps the client's capabilities, and no channel carries a question back
        assert r.is_error and "needs a human approval" in r.content[0].text
        assert "faultplane guard approve" in r.content[0].text and not marker.exists()
    else:
        assert not r.is_error, r.content
        assert marker.read_text() == "ran" and len(person.urls) == 1
