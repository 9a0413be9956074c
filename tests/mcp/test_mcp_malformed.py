"""Malformed JSON-RPC: 200 property-generated messages over HTTP, each answered with a JSON-RPC error while the
server keeps serving; garbage lines over stdio (which the SDK drops without a reply) don't stop it either."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_helpers import HttpServer, ServerEnv, server_argv

from jsonrpc_helpers import initialize, tool_call
from proc_helpers import wait_or_kill

pytestmark = pytest.mark.anyio

N_MESSAGES = 200
# every fuzz loop: N_MESSAGES fixed examples against one live server, no deadline (the machine may be loaded)
FUZZ = settings(
    max_examples=N_MESSAGES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
JSONRPC_ERRORS = {-32700, -32600, -32601, -32602, -32020, -32022}
ACCEPT = "application/json, text/event-stream"

# ---- strategies: every message is malformed by construction --------------------------------------------

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)


def _not_json(b: bytes) -> bool:
    try:
        json.loads(b)
    except (ValueError, UnicodeDecodeError):
        return True
    return False


not_json = st.one_of(
    st.binary(min_size=1, max_size=200),
    st.text(min_size=1, max_size=200).map(str.encode),
    st.sampled_from([b"{", b'{"jsonrpc": "2.0",', b"[{]", b"{'single': 'quotes'}", b"\xff\xfe\x00"]),
).filter(_not_json)

# valid JSON whose top level is not an object (arrays are JSON-RPC batches, which MCP dropped)
not_object = json_values.filter(lambda v: not isinstance(v, dict)).map(lambda v: json.dumps(v).encode())

DEFECTS = ("jsonrpc", "method", "id", "params", "empty")

# a wrong "jsonrpc" member, None standing for a missing one
wrong_jsonrpc = st.one_of(st.none(), st.integers(), st.text(max_size=5).filter(lambda s: s != "2.0"))


def _set_jsonrpc(msg: dict[str, Any], value: Any) -> None:
    if value is None:
        del msg["jsonrpc"]
    else:
        msg["jsonrpc"] = value


@st.composite
def bad_envelope(draw: st.DrawFn) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": draw(st.integers(1, 10**6)), "method": "tools/list"}
    defect = draw(st.sampled_from(DEFECTS))
    if defect == "jsonrpc":
        _set_jsonrpc(msg, draw(wrong_jsonrpc))
    elif defect == "method":
        msg["method"] = draw(
            st.one_of(
                st.integers(),
                st.lists(st.integers(), max_size=2),
                st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                st.none(),
            )
        )
    elif defect == "id":
        msg["id"] = draw(
            st.one_of(
                st.lists(st.integers(), max_size=2),
                st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                st.floats(0.1, 0.9),
            )
        )
    elif defect == "params":
        msg["params"] = draw(st.one_of(st.integers(), st.text(max_size=5), st.booleans()))
    else:
        msg = draw(st.dictionaries(st.sampled_from(["foo", "bar", "x"]), json_scalars, max_size=3))
    extra = draw(st.dictionaries(st.sampled_from(["zz", "extra"]), json_scalars, max_size=1))
    return json.dumps({**msg, **extra}).encode()


malformed = st.one_of(not_json, not_object, bad_envelope())
eras = st.sampled_from(["session", "modern", "no-session"])


def _initialize(http: httpx.Client, url: str) -> str:
    r = http.post(url, json=initialize(0), headers={"accept": ACCEPT})
    assert r.status_code == 200
    sid = r.headers["mcp-session-id"]
    r = http.post(
        url,
        json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        headers={"accept": ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"},
    )
    assert r.status_code == 202
    return sid


def _headers(era: str, sid: str) -> dict[str, str]:
    h = {"content-type": "application/json", "accept": ACCEPT}
    if era == "session":
        h |= {"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
    elif era == "modern":
        h |= {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list"}
    return h


def _assert_jsonrpc_error(r: httpx.Response, body: bytes) -> None:
    assert 400 <= r.status_code < 500, (body, r.status_code, r.text)
    payload = r.json()
    assert payload["jsonrpc"] == "2.0" and "id" in payload, (body, payload)
    assert payload["error"]["code"] in JSONRPC_ERRORS, (body, payload)
    assert isinstance(payload["error"]["message"], str) and payload["error"]["message"]


async def test_200_malformed_messages_get_jsonrpc_errors_and_server_keeps_serving(
    http_server: HttpServer,
) -> None:
    url = http_server.url
    seen: list[bytes] = []

    def fuzz() -> None:
        with httpx.Client(timeout=10) as http:
            sid = _initialize(http, url)

            @FUZZ
            @given(body=malformed, era=eras)
            def one(body: bytes, era: str) -> None:
                seen.append(body)
                r = http.post(url, content=body, headers=_headers(era, sid))
                _assert_jsonrpc_error(r, body)

            one()
            # the same session still works after all of it
            r = http.post(
                url, json={"jsonrpc": "2.0", "id": 99, "method": "ping"}, headers=_headers("session", sid)
            )
            assert r.status_code == 200 and '"id":99' in r.text.replace(" ", "")

    with anyio.fail_after(110):
        await anyio.to_thread.run_sync(fuzz)
        assert len(seen) >= N_MESSAGES
        async with http_server.client() as c:
            r = await c.call_tool("chaos_status", {})
            assert not r.is_error and r.structured_content is not None
    assert http_server.proc.poll() is None


async def test_stdio_garbage_lines_dont_stop_the_server(server_env: ServerEnv) -> None:
    garbage = [
        b"not json",
        b"{",
        b"[]",
        b"[1,2,3]",
        b"42",
        b'{"jsonrpc":"1.0"}',
        b'{"jsonrpc":"2.0","id":{}}',
        b"\xff\xfe\xfd",
        b"",
        b'{"jsonrpc":"2.0","id":7,"method":5}',
        b"null",
        b"{}" * 1000,
    ]
    init = initialize(1)
    call = tool_call(2, "chaos_status")

    import os

    env = {**os.environ, **server_env.env}
    with anyio.fail_after(60):
        async with await anyio.open_process(server_argv(), env=env, stderr=subprocess.DEVNULL) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            buf = b""

            async def reply(want_id: int) -> dict[str, Any]:
                nonlocal buf
                while True:
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        msg = json.loads(line)
                        if msg.get("id") == want_id:
                            return msg  # type: ignore[no-any-return]
                    assert proc.stdout is not None
                    buf += await proc.stdout.receive()

            for g in garbage:
                await proc.stdin.send(g + b"\n")
            await proc.stdin.send(json.dumps(init).encode() + b"\n")
            assert (await reply(1))["result"]["serverInfo"]["name"] == "faultplane"
            await proc.stdin.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            for g in garbage:
                await proc.stdin.send(g + b"\n")
            await proc.stdin.send(json.dumps(call).encode() + b"\n")
            result = (await reply(2))["result"]
            assert result["isError"] is False and "active_faults" in result["structuredContent"]
            await proc.stdin.aclose()
            await proc.wait()


# ---- stdio: 200 property-generated malformed-but-JSON messages ---------------------------------------------
#
# Over stdio each line is one message. Lines that are not JSON get no reply (the SDK drops them; there is no
# -32700 over stdio, see docs/mcp.md). Every JSON line that is not a valid message gets the Invalid Request
# error JSON-RPC 2.0 requires (-32600, with the request's id when it can be read, else null); valid requests
# for an unknown method get -32601 and tools/call with bad params -32602; notifications and anything shaped
# like a response get no reply.

ids = st.one_of(st.integers(1, 10**9), st.text(min_size=1, max_size=8))
bad_ids = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(0.1, 0.9),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
non_objects = st.one_of(
    st.integers(), st.text(max_size=5), st.booleans(), st.lists(st.integers(), max_size=2)
)
# (message, the reply's expected id or None for null, the expected code) -- or code None: no reply at all
Expectation = tuple[Any, Any, int | None]


@st.composite
def stdio_case(draw: st.DrawFn) -> Expectation:
    rid = draw(ids)
    kind = draw(
        st.sampled_from(
            [
                "envelope",
                "bad-id",
                "not-object",
                "no-method",
                "unknown",
                "bad-params",
                "notification",
                "response",
            ]
        )
    )
    if kind == "envelope":
        msg: Any = {"jsonrpc": "2.0", "id": rid, "method": draw(st.sampled_from(["tools/list", "ping"]))}
        defect = draw(st.sampled_from(["jsonrpc", "method", "params"]))
        if defect == "jsonrpc":
            _set_jsonrpc(msg, draw(wrong_jsonrpc))
        elif defect == "method":
            if draw(st.booleans()):
                del msg["method"]
            else:
                msg["method"] = draw(
                    st.one_of(st.none(), non_objects.filter(lambda v: not isinstance(v, str)))
                )
        else:
            msg["params"] = draw(non_objects)
        return msg, rid, -32600
    if kind == "bad-id":
        return {"jsonrpc": "2.0", "id": draw(bad_ids), "method": "tools/list"}, None, -32600
    if kind == "not-object":
        return draw(json_values.filter(lambda v: not isinstance(v, dict))), None, -32600
    if kind == "no-method":
        return (
            draw(st.dictionaries(st.sampled_from(["foo", "bar", "x"]), json_scalars, max_size=3)),
            None,
            -32600,
        )
    if kind == "unknown":
        method = "x-unknown/" + draw(st.text(max_size=10))
        return {"jsonrpc": "2.0", "id": rid, "method": method, "params": {}}, rid, -32601
    if kind == "bad-params":
        params = draw(
            st.one_of(
                st.just({}),
                st.fixed_dictionaries({"name": non_objects.filter(lambda v: not isinstance(v, str))}),
                st.fixed_dictionaries(
                    {
                        "name": st.just("chaos_status"),
                        "arguments": non_objects.filter(lambda v: v is not None),
                    }
                ),
            )
        )
        return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}, rid, -32602
    if kind == "notification":
        return {"jsonrpc": "2.0", "method": "notifications/x-" + draw(st.text(max_size=6))}, None, None
    return {"jsonrpc": "2.0", "id": rid, "result": draw(non_objects)}, None, None


class StdioPeer:
    """The server as a subprocess, spoken to line by line; every read is bounded."""

    def __init__(self, senv: ServerEnv) -> None:
        import os
        import queue
        import threading

        env = {**os.environ, **senv.env}
        self.proc = subprocess.Popen(
            server_argv(), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self.lines: queue.Queue[bytes] = queue.Queue()

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.put(line)
            self.lines.put(b"")

        threading.Thread(target=pump, daemon=True).start()

    def send(self, message: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        line = self.lines.get(timeout=15)
        assert line, "the server closed stdout"
        msg = json.loads(line)  # every frame on the wire must be JSON
        assert isinstance(msg, dict)
        return msg

    def until(self, want: Any) -> list[dict[str, Any]]:
        """Every message up to and including the reply with id `want`."""
        got = []
        while True:
            msg = self.read()
            got.append(msg)
            if msg.get("id") == want:
                return got

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        wait_or_kill(self.proc, 15)


def test_stdio_200_generated_malformed_messages_get_the_errors_json_rpc_requires(
    server_env: ServerEnv,
) -> None:
    peer = StdioPeer(server_env)
    checked: list[Expectation] = []
    try:
        peer.send(initialize("init"))
        assert peer.until("init")[-1]["result"]["serverInfo"]["name"] == "faultplane"
        peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

        @FUZZ
        @given(case=stdio_case())
        def one(case: Expectation) -> None:
            message, want_id, code = case
            checked.append(case)
            ping = f"ping-{len(checked)}"
            peer.send(message)
            peer.send({"jsonrpc": "2.0", "id": ping, "method": "ping"})
            got = peer.until(ping)
            if code is not None and not any(m.get("id") == want_id and "error" in m for m in got):
                got += peer.until(want_id)  # the SDK answers requests concurrently: the ping may come first
            others = [m for m in got if m.get("id") != ping]
            if code is None:
                assert others == [], (message, others)
                return
            assert len(others) == 1, (message, others)
            [reply] = others
            assert reply["jsonrpc"] == "2.0" and reply["id"] == want_id, (message, reply)
            assert reply["error"]["code"] == code, (message, reply)
            assert isinstance(reply["error"]["message"], str) and reply["error"]["message"], (message, reply)

        one()
        assert len(checked) >= N_MESSAGES
        # still serving: a real tool call works
        peer.send(tool_call("last", "chaos_status"))
        result = peer.until("last")[-1]["result"]
        assert result["isError"] is False and "active_faults" in result["structuredContent"]
    finally:
        peer.close()
    assert peer.proc.returncode == 0
