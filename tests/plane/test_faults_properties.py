"""Property tests: the result mutations never raise and always leave a JSON-serialisable message."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from faultplane.plane.faults import FaultEngine
from faultplane.plane.plan import parse_plan

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)

PLAN = parse_plan(
    {
        "faults": [
            {
                "type": "schema_drift",
                "rename": {"a": "b", "x.y": "z"},
                "remove": ["c"],
                "retype": {"d": "integer"},
            },
            {"type": "partial_result", "keep_fraction": 0.3},
            {"type": "registry_inconsistency", "mode": "missing_from_list", "tools": ["t*"]},
        ]
    }
)


@settings(max_examples=150, deadline=None)
@given(structured=json_values, content=st.lists(json_values, max_size=4), text=st.text(max_size=50))
def test_mutations_never_raise_and_stay_json(structured: Any, content: list[Any], text: str) -> None:
    engine = FaultEngine(PLAN)
    d = engine.on_request({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "tool"}})
    assert d is not None
    blocks: list[Any] = [{"type": "text", "text": json.dumps(c)} for c in content] + [
        {"type": "text", "text": text}
    ]
    blocks.append({"type": "image", "data": "x"})
    blocks.append("not a block")
    msg = {"jsonrpc": "2.0", "id": 1, "result": {"content": blocks, "structuredContent": structured}}
    before = json.dumps(msg)
    out = engine.on_response(msg, d)
    assert json.dumps(msg) == before  # the original is never modified in place
    if out is not None:
        json.dumps(out)
        assert out["id"] == 1


@settings(max_examples=100, deadline=None)
@given(result=json_values)
def test_arbitrary_results_and_listings(result: Any) -> None:
    engine = FaultEngine(PLAN)
    d = engine.on_request({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert d is not None
    for msg in (
        {"jsonrpc": "2.0", "id": 2, "result": result},
        {"jsonrpc": "2.0", "id": 2, "result": {"tools": result}},
    ):
        out = engine.on_response(msg, d)
        if out is not None:
            json.dumps(out)
