"""The interceptor in-process: what is recorded as injected, timed-out answers, the response-side fail-safe."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from faultplane.plane.faults import SELFTEST_RESPONSE_ENV
from faultplane.plane.interceptor import STRICT_ERROR_CODE, Interceptor
from faultplane.plane.plan import parse_plan
from faultplane.plane.recorder import Recorder


def frame(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg).encode()


def call(rid: Any, tool: str) -> bytes:
    return frame(
        {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": tool, "arguments": {}}}
    )


def answer(rid: Any, sc: dict[str, Any]) -> bytes:
    result = {
        "content": [{"type": "text", "text": json.dumps(sc)}],
        "structuredContent": sc,
        "isError": False,
    }
    return frame({"jsonrpc": "2.0", "id": rid, "result": result})


def interceptor(plan: dict[str, Any], *, strict: bool = False) -> tuple[Interceptor, Recorder]:
    p = parse_plan(plan)
    rec = Recorder(driver="test", target="t", plan=p, enabled=False)  # buffers only; never touches a store
    return Interceptor(p, strict=strict, recorder=rec), rec


def injected(rec: Recorder) -> list[str]:
    return [e.fault_name for e in rec._events]


def test_schema_drift_on_a_missing_field_is_not_injected() -> None:
    icpt, rec = interceptor({"faults": [{"type": "schema_drift", "rename": {"temp_c": "temperature"}}]})
    icpt.on_client_frame(call(1, "weather"))
    out = icpt.on_server_frame(answer(1, {"city": "Oslo"}))  # nothing to rename
    assert out.frames == [None]
    icpt.on_client_frame(call(2, "weather"))
    out = icpt.on_server_frame(answer(2, {"temp_c": 3.0}))
    assert out.frames[0] is not None and b"temperature" in out.frames[0]
    assert injected(rec) == ["schema_drift"]
    assert [(c.faults, c.corrupted) for c in rec._calls] == [([], False), (["schema_drift"], True)]


def test_duplicate_is_injected_only_where_the_transport_can_repeat_the_answer() -> None:
    icpt, rec = interceptor({"faults": [{"type": "duplicate_response"}]})
    icpt.on_client_frame(call(1, "add"))
    assert icpt.on_server_frame(answer(1, {"result": 1}), can_duplicate=False).frames == [None]
    assert injected(rec) == [] and rec._calls[-1].faults == []
    icpt.on_client_frame(call(2, "add"))
    assert icpt.on_server_frame(answer(2, {"result": 1})).frames == [None, None]
    assert injected(rec) == ["duplicate_response"]


def test_delays_are_injected_on_the_way_in_and_errors_only_once() -> None:
    icpt, rec = interceptor(
        {"faults": [{"type": "latency", "added_ms": 5}, {"type": "error_injection", "tools": ["add"]}]}
    )
    action = icpt.on_client_frame(call(1, "add"))
    assert action.reply is not None and not action.forward
    assert injected(rec) == ["latency", "error_injection"]
    assert rec._calls[-1].faults == ["latency", "error_injection"] and rec._calls[-1].outcome == "rpc_error"


def test_a_timed_out_answer_is_swallowed_even_after_the_client_cancels() -> None:
    icpt, rec = interceptor({"faults": [{"type": "timeout", "tools": ["stamp"]}]})
    icpt.on_client_frame(call(7, "stamp"))
    icpt.on_client_frame(call(8, "echo"))
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
    icpt.on_client_frame(frame(cancel))
    assert not icpt.has_pending(json.dumps(7))
    assert icpt.on_server_frame(answer(7, {"result": "late"})).frames == []  # the server ignored the cancel
    assert icpt.on_server_frame(answer(8, {"result": "x"})).frames == [None]
    assert icpt.on_server_frame(answer(7, {"result": "again"})).frames == [None]  # swallowed once only
    assert injected(rec) == ["timeout"]
    assert [c.outcome for c in rec._calls] == ["timeout", "ok"]


def test_response_side_failure_passes_the_answer_through(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(SELFTEST_RESPONSE_ENV, "weather")
    icpt, rec = interceptor({"faults": [{"type": "schema_drift", "rename": {"temp_c": "temperature"}}]})
    icpt.on_client_frame(call(1, "weather"))
    with caplog.at_level(logging.ERROR, logger="faultplane.plane"):
        out = icpt.on_server_frame(answer(1, {"temp_c": 3.0}))
    assert out.frames == [None]  # the server's bytes, untouched
    assert icpt.internal_errors == 1 and "self-test" in caplog.text
    assert injected(rec) == [] and rec._calls[-1].outcome == "ok"


def test_response_side_failure_fails_closed_in_strict_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SELFTEST_RESPONSE_ENV, "weather")
    icpt, rec = interceptor(
        {"faults": [{"type": "schema_drift", "rename": {"temp_c": "temperature"}}]}, strict=True
    )
    icpt.on_client_frame(call("w", "weather"))
    out = icpt.on_server_frame(answer("w", {"temp_c": 3.0}))
    assert len(out.frames) == 1 and out.frames[0] is not None
    reply = json.loads(out.frames[0])
    assert reply["id"] == "w" and reply["error"]["code"] == STRICT_ERROR_CODE
    assert "strict" in reply["error"]["message"]
    assert rec._calls[-1].outcome == "rpc_error"
