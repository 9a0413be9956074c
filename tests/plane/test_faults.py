"""The fault engine on its own: seeded draws, probabilities within bounds, and each mutation."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from faultplane.plane.faults import FaultEngine
from faultplane.plane.plan import parse_plan


def call(rid: int, tool: str, **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": {}}
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def result(rid: int, structured: dict[str, Any] | None = None, text: str | None = None) -> dict[str, Any]:
    res: dict[str, Any] = {
        "content": [{"type": "text", "text": text or json.dumps(structured)}],
        "isError": False,
    }
    if structured is not None:
        res["structuredContent"] = structured
    return {"jsonrpc": "2.0", "id": rid, "result": res}


def within(count: int, n: int, p: float, sds: float = 4.5) -> bool:
    sd = math.sqrt(n * p * (1 - p))
    return abs(count - n * p) <= sds * sd + 1


@pytest.mark.parametrize("p", [0.02, 0.25, 0.5, 0.9])
def test_probability_is_honoured(p: float) -> None:
    engine = FaultEngine(parse_plan({"seed": 3, "faults": [{"type": "error_injection", "rate": p}]}))
    n = 4000
    hits = sum(1 for i in range(n) if (d := engine.on_request(call(i, "add"))) is not None and d.reply)
    assert within(hits, n, p)


def test_same_seed_same_faults_and_other_seed_differs() -> None:
    def run(seed: int) -> list[bool]:
        plan = parse_plan({"seed": seed, "faults": [{"type": "timeout", "probability": 0.3}]})
        engine = FaultEngine(plan)
        return [engine.on_request(call(i, f"t{i % 3}")) is not None for i in range(300)]

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_draws_do_not_depend_on_interleaving() -> None:
    plan = parse_plan({"seed": 9, "faults": [{"type": "error_injection", "rate": 0.4}]})
    a, b = FaultEngine(plan), FaultEngine(plan)
    seq_a = [(t, a.on_request(call(i, t)) is not None) for i, t in enumerate(["x", "y"] * 50)]
    seq_b = [(t, b.on_request(call(i, t)) is not None) for i, t in enumerate(["x"] * 50 + ["y"] * 50)]
    per_tool = lambda seq, tool: [hit for t, hit in seq if t == tool]  # noqa: E731
    assert per_tool(seq_a, "x") == per_tool(seq_b, "x")
    assert per_tool(seq_a, "y") == per_tool(seq_b, "y")


def test_scoping_by_tool_pattern_and_method() -> None:
    plan = parse_plan({"faults": [{"type": "error_injection", "tools": ["db_*"]}]})
    engine = FaultEngine(plan)
    assert engine.on_request(call(1, "db_query")) is not None
    assert engine.on_request(call(2, "web_fetch")) is None
    assert engine.on_request({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}) is None
    assert engine.on_request({"jsonrpc": "2.0", "method": "notifications/initialized"}) is None


def test_error_injection_shapes() -> None:
    e1 = FaultEngine(parse_plan({"faults": [{"type": "error_injection", "code": -32001, "message": "nope"}]}))
    d = e1.on_request(call(7, "add"))
    assert d is not None and d.reply == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32001, "message": "nope"},
    }
    e2 = FaultEngine(parse_plan({"faults": [{"type": "error_injection", "as_tool_error": True}]}))
    d = e2.on_request(call("a", "add"))
    assert d is not None and d.reply is not None and d.reply["result"]["isError"] is True
    assert d.events[0].request_id == '"a"' and d.events[0].tool == "add"


def test_latency_and_jitter_are_seeded() -> None:
    plan = parse_plan({"seed": 5, "faults": [{"type": "latency", "added_ms": 100, "jitter_ms": 50}]})
    delays = [FaultEngine(plan).on_request(call(1, "add")).delay_s for _ in range(3)]  # type: ignore[union-attr]
    assert len(set(delays)) == 1 and 0.1 <= delays[0] < 0.15


def test_timeout_swallows_the_answer() -> None:
    engine = FaultEngine(parse_plan({"faults": [{"type": "timeout"}, {"type": "partial_result"}]}))
    d = engine.on_request(call(1, "add"))
    assert d is not None and d.drop_response and not d.mutators
    assert [e.fault_type for e in d.events] == ["timeout"]


def test_schema_drift_rename_remove_retype() -> None:
    plan = parse_plan(
        {
            "faults": [
                {
                    "type": "schema_drift",
                    "tools": ["weather"],
                    "rename": {"temp_c": "temperature"},
                    "remove": ["conditions"],
                    "retype": {"city": "list"},
                }
            ]
        }
    )
    engine = FaultEngine(plan)
    assert engine.on_request(call(1, "add")) is None
    d = engine.on_request(call(2, "weather"))
    assert d is not None and d.corrupts
    sc = {"city": "Oslo", "temp_c": 3.5, "conditions": "snow"}
    out = engine.on_response(result(2, sc), d)
    assert out is not None
    assert out["result"]["structuredContent"] == {"city": ["Oslo"], "temperature": 3.5}
    assert json.loads(out["result"]["content"][0]["text"]) == {"city": ["Oslo"], "temperature": 3.5}
    assert engine.on_response({"jsonrpc": "2.0", "id": 2, "error": {"code": 1, "message": "x"}}, d) is None


def test_partial_result_truncates_without_marking() -> None:
    engine = FaultEngine(parse_plan({"faults": [{"type": "partial_result", "keep_fraction": 0.5}]}))
    d = engine.on_request(call(1, "catalog"))
    assert d is not None
    sc = {"items": [f"i{k}" for k in range(10)], "total": 10}
    out = engine.on_response(result(1, sc), d)
    assert out is not None
    assert out["result"]["structuredContent"] == {"items": ["i0", "i1", "i2", "i3", "i4"], "total": 10}
    d2 = engine.on_request(call(2, "echo"))
    assert d2 is not None
    out2 = engine.on_response(result(2, text="abcdefghij"), d2)
    assert out2 is not None and out2["result"]["content"][0]["text"] == "abcde"
    assert "isError" in out2["result"] and out2["result"]["isError"] is False


def test_registry_inconsistency_both_modes() -> None:
    plan = parse_plan(
        {
            "faults": [
                {"type": "registry_inconsistency", "mode": "missing_from_list", "tools": ["echo"]},
                {"type": "registry_inconsistency", "mode": "listed_but_broken", "tools": ["weather"]},
            ]
        }
    )
    engine = FaultEngine(plan)
    d = engine.on_request({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert d is not None
    listing = {"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "echo"}, {"name": "add"}]}}
    out = engine.on_response(listing, d)
    assert out is not None and [t["name"] for t in out["result"]["tools"]] == ["add"]
    broken = engine.on_request(call(2, "weather"))
    assert broken is not None and broken.reply is not None
    assert broken.reply["error"] == {"code": -32602, "message": "Unknown tool: weather"}
    assert engine.on_request(call(3, "echo")) is None  # hidden, but it still works when called


def test_cold_tool_follows_the_clock() -> None:
    now = [0.0]
    engine = FaultEngine(
        parse_plan({"faults": [{"type": "cold_tool", "added_ms": 300, "idle_ms": 1000}]}),
        clock=lambda: now[0],
    )
    first = engine.on_request(call(1, "add"))
    assert first is not None and first.delay_s == pytest.approx(0.3)
    now[0] = 0.5
    assert engine.on_request(call(2, "add")) is None
    now[0] = 2.0
    assert engine.on_request(call(3, "add")) is not None
    assert engine.on_request(call(4, "echo")) is not None  # every tool starts cold


def test_duplicate_and_reorder_flags() -> None:
    engine = FaultEngine(parse_plan({"faults": [{"type": "duplicate_response"}, {"type": "reorder"}]}))
    d = engine.on_request(call(1, "add"))
    assert d is not None and d.duplicate and d.hold_s == pytest.approx(0.2) and not d.corrupts


def test_selftest_hook_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULTPLANE_PLANE_SELFTEST_RAISE", "ad*")
    engine = FaultEngine(parse_plan({}))
    with pytest.raises(RuntimeError, match="self-test"):
        engine.on_request(call(1, "add"))
    assert engine.on_request(call(2, "echo")) is None
