"""Tool contracts, exactly: closed input schemas enforced at the call, complete output schemas that every
tool's structured output satisfies, seed 003's field types, inline experiments in every form, and journals
in TOON as TOON text. One real stdio server (a subprocess) per module."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from jsonschema import Draft202012Validator
from mcp_helpers import SMOKE_EXPERIMENT, ServerEnv, make_env, stdio_client

from faultplane.core.formats import loads
from mcp import Client

pytestmark = pytest.mark.anyio


@pytest.fixture
async def client(tmp_path: Any) -> AsyncIterator[Client]:
    senv: ServerEnv = make_env(tmp_path / "srv")
    async with stdio_client(senv) as c:
        yield c


def _empty_schemas(schema: Any, where: str = "$") -> list[str]:
    """Places in a schema that say nothing about their value: an empty `items` or an empty property."""
    found: list[str] = []
    if isinstance(schema, dict):
        if "items" in schema and schema["items"] in ({}, True):
            found.append(where + ".items")
        for key, sub in (schema.get("properties") or {}).items():
            if sub in ({}, True):
                found.append(f"{where}.properties.{key}")
        for key, sub in schema.items():
            found += _empty_schemas(sub, f"{where}.{key}")
    elif isinstance(schema, list):
        for i, sub in enumerate(schema):
            found += _empty_schemas(sub, f"{where}[{i}]")
    return found


async def _structured(c: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    r = await c.call_tool(tool, args)
    assert r.structured_content is not None, (tool, r.content)
    return r.structured_content


async def test_every_input_schema_is_closed_and_unknown_arguments_are_refused_by_name(client: Client) -> None:
    with anyio.fail_after(60):
        tools = (await client.list_tools()).tools
        for tool in tools:
            assert tool.input_schema.get("additionalProperties") is False, tool.name
        # the misspelling that used to fall back to the default probability silently
        r = await client.call_tool(
            "chaos_inject_fault",
            {"fault_name": "f", "action": "register", "fault_type": "latency", "probabilty": 0.9},
        )
        text = r.content[0].text  # type: ignore[union-attr]
        assert r.is_error and "probabilty" in text and "probability" in text and "fault_type" in text
        status = await _structured(client, "chaos_status", {})
        assert status["active_faults"] == []  # nothing was registered by the refused call
        for tool in ("chaos_status", "chaos_list_experiments", "chaos_get_journal", "chaos_analyze"):
            r = await client.call_tool(tool, {"run_id": "x", "sql": "select 1", "bogus_arg": 1})
            text = r.content[0].text  # type: ignore[union-attr]
            assert r.is_error and "bogus_arg" in text and "use only" in text, (tool, text)


async def test_output_schemas_are_complete_and_every_tool_output_validates(client: Client) -> None:
    with anyio.fail_after(120):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for tool in tools.values():
            assert tool.output_schema is not None, tool.name
            assert _empty_schemas(tool.output_schema) == [], (tool.name, _empty_schemas(tool.output_schema))
        run = await _structured(client, "chaos_run_experiment", {"experiment_name": "mcp-smoke"})
        calls: dict[str, dict[str, Any]] = {
            "chaos_inject_fault": {"fault_name": "f", "action": "register", "fault_type": "latency"},
            "chaos_run_experiment": {"experiment_name": "mcp-smoke", "dry_run": True},
            "chaos_status": {"include_results": True},
            "chaos_discover": {},
            "chaos_validate_experiment": {"experiment_name": "mcp-smoke"},
            "chaos_list_experiments": {},
            "chaos_get_journal": {"run_id": run["run_id"], "format": "toon"},
            "chaos_analyze": {"sql": "SELECT run_id, status, started_at FROM runs"},
            "chaos_abort": {},
            "chaos_design_experiment": {
                "service": "orders",
                "kind": "redis",
                "url": "redis://127.0.0.1:9/0",
                "process": {"name": "redis-server"},
            },
        }
        checked = []
        for name, args in calls.items():
            if name not in tools:
                continue
            out = await _structured(client, name, args)
            errors = list(Draft202012Validator(tools[name].output_schema).iter_errors(out))
            assert errors == [], (name, [e.message for e in errors])
            checked.append(name)
        assert len(checked) == len(calls)


async def test_chaos_status_follows_seed_003(client: Client) -> None:
    with anyio.fail_after(60):
        await client.call_tool(
            "chaos_inject_fault", {"fault_name": "slow-db", "action": "register", "fault_type": "latency"}
        )
        st = await _structured(client, "chaos_status", {})
        assert isinstance(st["registered_experiments"], int) and not isinstance(
            st["registered_experiments"], bool
        )
        assert st["registered_experiments"] == len(st["experiment_names"]) >= 1
        assert isinstance(st["total_runs"], int) and isinstance(st["active_faults"], list)
        assert {"name", "fault_type", "probability"} <= set(st["active_faults"][0])


async def test_inline_experiments_as_object_json_text_and_path(client: Client, tmp_path: Any) -> None:
    doc = loads(SMOKE_EXPERIMENT, "yaml")
    path = tmp_path / "exp.yaml"
    path.write_text(SMOKE_EXPERIMENT, encoding="utf-8")
    with anyio.fail_after(120):
        for experiment in (doc, json.dumps(doc), json.dumps(doc, indent=2), str(path)):
            out = await _structured(
                client, "chaos_run_experiment", {"experiment": experiment, "dry_run": True}
            )
            assert out["success"] is True and out["experiment_name"] == doc["title"], out
        r = await client.call_tool("chaos_run_experiment", {"experiment": str(tmp_path / "missing.yaml")})
        text = r.content[0].text  # type: ignore[union-attr]
        assert r.is_error and "missing.yaml" in text and "fix" in text
        r = await client.call_tool("chaos_validate_experiment", {"experiment": doc})
        assert r.structured_content and r.structured_content["valid"] is True


async def test_a_journal_asked_for_in_toon_comes_back_as_toon_text(client: Client) -> None:
    with anyio.fail_after(120):
        run = await _structured(
            client, "chaos_run_experiment", {"experiment_name": "mcp-smoke", "dry_run": True}
        )
        r = await client.call_tool("chaos_get_journal", {"run_id": run["run_id"], "format": "toon"})
        text = r.content[0].text  # type: ignore[union-attr]
        assert r.structured_content and text == r.structured_content["journal"]
        assert not text.lstrip().startswith(('"', "{", "journal:"))
        assert loads(text, "toon")["run_id"] == run["run_id"]
        r = await client.call_tool("chaos_get_journal", {"run_id": run["run_id"], "format": "json"})
        assert json.loads(r.content[0].text)["run_id"] == run["run_id"]  # type: ignore[union-attr]
