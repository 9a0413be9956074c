"""Every tool and every error case of the issue, over stdio (a real subprocess) and HTTP (a real server)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp_helpers import SMOKE_EXPERIMENT, ClientFactory, ServerEnv

from mcp import Client

pytestmark = pytest.mark.anyio

TOOLS = {
    "chaos_inject_fault",
    "chaos_run_experiment",
    "chaos_status",
    "chaos_discover",
    "chaos_validate_experiment",
    "chaos_list_experiments",
    "chaos_get_journal",
    "chaos_analyze",
    "chaos_abort",
}


async def ok(c: Client, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    r = await c.call_tool(tool, args or {})
    assert not r.is_error, r.content
    assert r.structured_content is not None
    return r.structured_content


async def err(c: Client, tool: str, args: dict[str, Any]) -> str:
    r = await c.call_tool(tool, args)
    assert r.is_error, r.structured_content
    text = r.content[0].text  # type: ignore[union-attr]
    assert isinstance(text, str)
    return text


async def test_tools_are_listed_with_input_and_output_schemas(connect: ClientFactory) -> None:
    with anyio.fail_after(60):
        async with connect() as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
    assert set(tools) >= TOOLS
    for name in TOOLS:
        assert tools[name].input_schema["type"] == "object"
        assert tools[name].output_schema is not None, name
    fault = tools["chaos_inject_fault"].input_schema
    assert set(fault["required"]) == {"fault_name", "action"}
    props = fault["properties"]
    assert props["action"]["enum"] == ["register", "inject", "remove"]
    assert props["probability"]["default"] == 0.1
    assert props["probability"]["minimum"] == 0.0 and props["probability"]["maximum"] == 1.0
    out = tools["chaos_inject_fault"].output_schema
    assert out is not None
    assert set(out["properties"]) >= {"status", "fault_name", "fault_type", "was_triggered"}


async def test_inject_fault_contract(connect: ClientFactory, server_env: ServerEnv) -> None:
    with anyio.fail_after(60):
        async with connect() as c:
            # register, and register again: overwrites (idempotent)
            r = await ok(
                c,
                "chaos_inject_fault",
                {
                    "fault_name": "slow-db",
                    "action": "register",
                    "fault_type": "latency",
                    "duration_seconds": 0.2,
                },
            )
            assert r["status"] == "registered" and r["fault_type"] == "latency" and r["probability"] == 0.1
            r = await ok(
                c,
                "chaos_inject_fault",
                {
                    "fault_name": "slow-db",
                    "action": "register",
                    "fault_type": "error",
                    "probability": 1.0,
                    "error_message": "db down",
                },
            )
            assert (r["status"], r["fault_type"], r["probability"]) == ("registered", "error", 1.0)
            registry = json.loads(server_env.registry.read_text())
            assert registry["faults"]["slow-db"]["fault_type"] == "error"
            assert registry["faults"]["slow-db"]["error_message"] == "db down"

            # inject: probability 1.0 always triggers and arms one occurrence
            r = await ok(c, "chaos_inject_fault", {"fault_name": "slow-db", "action": "inject"})
            assert r["status"] == "injected" and r["was_triggered"] is True and r["fault_type"] == "error"
            assert isinstance(r["seed"], int)
            assert json.loads(server_env.registry.read_text())["faults"]["slow-db"]["armed"] == 1

            # inject of an unknown fault: a tool error naming the field and the fix
            text = await err(c, "chaos_inject_fault", {"fault_name": "nope", "action": "inject"})
            assert "fault_name" in text and "nope" in text and "fix:" in text and "slow-db" in text

            # register without fault_type
            text = await err(c, "chaos_inject_fault", {"fault_name": "x", "action": "register"})
            assert text.startswith("fault_type") and "fix:" in text and "latency" in text

            # probability outside 0-1, both sides
            for bad in (1.5, -0.1):
                text = await err(
                    c,
                    "chaos_inject_fault",
                    {"fault_name": "x", "action": "register", "fault_type": "error", "probability": bad},
                )
                assert text.startswith("probability") and "fix:" in text

            # an unknown action and an unknown fault type
            text = await err(c, "chaos_inject_fault", {"fault_name": "x", "action": "explode"})
            assert text.startswith("action") and "register, inject, remove" in text
            text = await err(
                c, "chaos_inject_fault", {"fault_name": "x", "action": "register", "fault_type": "meteor"}
            )
            assert text.startswith("fault_type") and "network_partition" in text

            # the error result still carries the structured status
            r2 = await c.call_tool("chaos_inject_fault", {"fault_name": "nope", "action": "inject"})
            assert r2.is_error and r2.structured_content and r2.structured_content["status"] == "error"

            # remove: success, and again (idempotent)
            r = await ok(c, "chaos_inject_fault", {"fault_name": "slow-db", "action": "remove"})
            assert r["status"] == "removed" and r["existed"] is True and r["fault_type"] == "error"
            r = await ok(c, "chaos_inject_fault", {"fault_name": "slow-db", "action": "remove"})
            assert r["status"] == "removed" and r["existed"] is False
            r = await ok(c, "chaos_inject_fault", {"fault_name": "never-was", "action": "remove"})
            assert r["status"] == "removed"

            # every call is in the audit log
            audit = await ok(
                c,
                "chaos_analyze",
                {"sql": "SELECT action, subject, details FROM audit WHERE action LIKE 'fault.%' ORDER BY ts"},
            )
    actions = [(row[0], row[1]) for row in audit["rows"]]
    assert actions == [
        ("fault.register", "slow-db"),
        ("fault.register", "slow-db"),
        ("fault.inject", "slow-db"),
        ("fault.inject", "nope"),
        ("fault.register", "x"),
        ("fault.register", "x"),
        ("fault.register", "x"),
        ("fault.invalid", "x"),
        ("fault.register", "x"),
        ("fault.inject", "nope"),
        ("fault.remove", "slow-db"),
        ("fault.remove", "slow-db"),
        ("fault.remove", "never-was"),
    ]
    inject_details = json.loads(audit["rows"][2][2])
    assert inject_details["was_triggered"] is True and isinstance(inject_details["seed"], int)
    assert json.loads(audit["rows"][3][2])["status"] == "error"


# (arguments, the field the refusal must name, text the fix must contain)
REFUSED_FAULT_CALLS: list[tuple[dict[str, Any], str, str]] = [
    ({"fault_name": "x"}, "action", 'pass e.g. "register"'),
    ({"action": "register", "fault_type": "error"}, "fault_name", "pass e.g."),
    (
        {"fault_name": "x", "action": "register", "fault_type": "error", "probability": "high"},
        "probability",
        "0.0 to 1.0",
    ),
    (
        {"fault_name": "x", "action": "register", "fault_type": "error", "probability": 1.5},
        "probability",
        "0.0 to 1.0",
    ),
    (
        {"fault_name": "x", "action": "register", "fault_type": "latency", "duration_seconds": "long"},
        "duration_seconds",
        "pass e.g. 0.5",
    ),
    ({"fault_name": 7, "action": "remove"}, "fault_name", "must be a string"),
]


async def test_refused_fault_calls_are_audited_and_explained(connect: ClientFactory) -> None:
    """Arguments that break the published schema: an isError result naming the field and the fix, never
    pydantic's text, and an audit row all the same (every call is audited, accepted or refused)."""
    with anyio.fail_after(60):
        async with connect() as c:
            for args, field, fix in REFUSED_FAULT_CALLS:
                r = await c.call_tool("chaos_inject_fault", args)
                assert r.is_error, args
                text = r.content[0].text  # type: ignore[union-attr]
                assert text.startswith(f"{field}: "), text
                assert "; fix: " in text and fix in text, text
                assert "pydantic" not in text and "validation error" not in text, text
                assert r.structured_content and r.structured_content["status"] == "error"
                assert r.structured_content["error"] == text
            audit = await ok(
                c,
                "chaos_analyze",
                {"sql": "SELECT action, subject, details FROM audit WHERE action LIKE 'fault.%' ORDER BY ts"},
            )
    rows = audit["rows"]
    assert len(rows) == len(REFUSED_FAULT_CALLS)
    assert [(r[0], r[1]) for r in rows] == [
        ("fault.invalid", "x"),
        ("fault.register", ""),
        ("fault.register", "x"),
        ("fault.register", "x"),
        ("fault.register", "x"),
        ("fault.remove", "7"),
    ]
    for (args, field, _), row in zip(REFUSED_FAULT_CALLS, rows, strict=True):
        details = json.loads(row[2])
        assert details["status"] == "error" and details["refused"] is True
        assert details["error"].startswith(f"{field}: ")
        assert details["probability"] == args.get("probability")
    # the refusals changed nothing
    assert "x" not in json.dumps(await _active_faults(connect))


async def _active_faults(connect: ClientFactory) -> list[dict[str, Any]]:
    async with connect() as c:
        return (await ok(c, "chaos_status"))["active_faults"]


# other tools: wrong types, out-of-range values, missing required arguments
REFUSED_OTHER_CALLS: list[tuple[str, dict[str, Any], str, str]] = [
    ("chaos_analyze", {}, "sql", "pass e.g. "),
    ("chaos_analyze", {"sql": "SELECT 1", "limit": 0}, "limit", "from 1 to 10000"),
    ("chaos_analyze", {"sql": "SELECT 1", "limit": "many"}, "limit", "pass e.g. 200"),
    ("chaos_get_journal", {"run_id": "abc", "format": "xml"}, "format", "one of json, toon"),
    ("chaos_get_journal", {"format": "json"}, "run_id", "pass e.g. "),
    ("chaos_run_experiment", {"experiment_name": "mcp-smoke", "dry_run": "yes"}, "dry_run", "true or false"),
    ("chaos_run_experiment", {"experiment_name": "mcp-smoke", "variables": [1, 2]}, "variables", "an object"),
    ("chaos_status", {"include_results": 3}, "include_results", "true or false"),
    ("chaos_abort", {"run_id": 12}, "run_id", "a string"),
    ("chaos_discover", {"driver": ["faults"]}, "driver", "a string"),
]


async def test_argument_errors_of_every_tool_name_the_field_and_the_fix(connect: ClientFactory) -> None:
    with anyio.fail_after(60):
        async with connect() as c:
            for tool, args, field, hint in REFUSED_OTHER_CALLS:
                text = await err(c, tool, args)
                assert text.startswith(f"{field}: "), (tool, text)
                assert "; fix: " in text and hint in text, (tool, text)
                assert "pydantic" not in text and "Error executing tool" not in text, (tool, text)
            # several problems at once: one line each
            text = await err(c, "chaos_analyze", {"sql": 5, "limit": 0})
            assert text.splitlines()[0].startswith("limit: ") and text.splitlines()[1].startswith("sql: ")


async def test_inject_is_seeded_and_reproducible(server_env: ServerEnv) -> None:
    """Two servers started with the same --seed roll the same sequence of inject outcomes."""
    from mcp_helpers import stdio_client

    async def rolls() -> list[tuple[bool, int]]:
        out = []
        async with stdio_client(server_env) as c:
            await ok(
                c,
                "chaos_inject_fault",
                {"fault_name": "coin", "action": "register", "fault_type": "error", "probability": 0.5},
            )
            for _ in range(12):
                r = await ok(c, "chaos_inject_fault", {"fault_name": "coin", "action": "inject"})
                out.append((r["was_triggered"], r["seed"]))
        return out

    with anyio.fail_after(60):
        first, second = await rolls(), await rolls()
    assert first == second
    assert {t for t, _ in first} == {True, False}  # 12 fair rolls: both outcomes (fixed by the seed)


async def test_status_discover_analyze_and_lists(connect: ClientFactory) -> None:
    with anyio.fail_after(60):
        async with connect() as c:
            await ok(
                c,
                "chaos_inject_fault",
                {
                    "fault_name": "part",
                    "action": "register",
                    "fault_type": "timeout",
                    "probability": 0.3,
                },
            )
            st = await ok(c, "chaos_status")
            assert st["active_faults"] == [
                {
                    "name": "part",
                    "fault_type": "timeout",
                    "probability": 0.3,
                    "duration_seconds": None,
                    "target": None,
                    "armed": 0,
                }
            ]
            assert "mcp-smoke" in st["experiment_names"]
            assert st["registered_experiments"] == len(st["experiment_names"])
            assert st["total_runs"] == 0 and st["success_rate"] is None and st["results"] is None
            st = await ok(c, "chaos_status", {"include_results": True})
            assert st["results"] == []

            disc = await ok(c, "chaos_discover")
            faults = next(d for d in disc["drivers"] if d["driver"] == "faults")
            names = {a["name"] for a in faults["actions"]}
            assert names >= {"register", "inject", "remove"}
            reg = next(a for a in faults["actions"] if a["name"] == "register")
            assert "fault_type" in reg["parameters"]["properties"]
            assert disc["action_count"] >= 3
            assert {p["type"] for p in disc["providers"]} == {"python", "process", "http", "driver"}
            text = await err(c, "chaos_discover", {"driver": "warp-drive"})
            assert "driver" in text and "faults" in text

            lst = await ok(c, "chaos_list_experiments")
            assert "mcp-smoke" in {e["name"] for e in lst["experiments"]}

            q = await ok(c, "chaos_analyze", {"sql": "SELECT 1 AS one, 'a' AS letter", "limit": 5})
            assert q == {"columns": ["one", "letter"], "rows": [[1, "a"]], "row_count": 1, "truncated": False}
            q = await ok(c, "chaos_analyze", {"sql": "SELECT * FROM range(50)", "limit": 10})
            assert q["row_count"] == 10 and q["truncated"] is True
            # read-only is enforced by the database: writes, file access and settings changes all fail
            for sql in (
                "DELETE FROM audit",
                "CREATE TABLE t (a INT)",
                "COPY audit TO '/tmp/fp-leak.csv'",
                "SELECT * FROM read_csv('/etc/passwd')",
                "SET enable_external_access = true",
                "  insert into audit (actor) values ('x')",
            ):
                text = await err(c, "chaos_analyze", {"sql": sql})
                assert "sql:" in text and "fix:" in text
            text = await err(c, "chaos_analyze", {"sql": "SELECT 1", "limit": 0})
            assert text.startswith("Error executing tool chaos_analyze: limit") or "limit:" in text

            text = await err(c, "chaos_get_journal", {"run_id": "no-such-run"})
            assert "run_id" in text and "no-such-run" in text
            text = await err(c, "chaos_get_journal", {"run_id": "x", "format": "xml"})
            assert "format" in text and "toon" in text
            ab = await ok(c, "chaos_abort")
            assert ab == {"aborted": []}


async def test_validate_run_journal_and_status(connect: ClientFactory, server_env: ServerEnv) -> None:
    with anyio.fail_after(90):
        async with connect() as c:
            v = await ok(c, "chaos_validate_experiment", {"experiment_name": "mcp-smoke"})
            assert v == {"valid": True, "title": "MCP smoke", "errors": [], "warnings": []}
            # the same checks a run makes before it executes anything: a function that does not exist is
            # an error with a suggestion; a key Chaos Toolkit ignores is a warning
            typo = (
                "title: t\ndescription: d\ndry_run: false\nmethod:\n  - {type: probe, name: p, "
                "provider: {type: python, module: mcp_target, func: okk}}\n"
            )
            v = await ok(c, "chaos_validate_experiment", {"experiment": typo})
            assert v["valid"] is False
            assert [(e["field"], e["fix"]) for e in v["errors"]] == [
                ("method[0].provider.func", "did you mean 'ok'?")
            ]
            assert [w["field"] for w in v["warnings"]] == ["dry_run"]
            v = await ok(c, "chaos_validate_experiment", {"experiment": "title: broken\nmethod: 5\n"})
            assert v["valid"] is False and v["errors"] and v["errors"][0]["field"].startswith("method")
            assert all(e["fix"] for e in v["errors"])
            text = await err(c, "chaos_validate_experiment", {})
            assert "experiment_name" in text and "fix:" in text
            text = await err(c, "chaos_validate_experiment", {"experiment_name": "a", "experiment": "b"})
            assert "exactly one" in text

            # a named experiment, really run
            run = await ok(c, "chaos_run_experiment", {"experiment_name": "mcp-smoke"})
            assert run["experiment_name"] == "mcp-smoke"
            assert run["success"] is True and run["status"] == "completed"
            assert run["steady_state_before"] is True and run["steady_state_after"] is True
            assert run["error"] is None and run["duration_seconds"] >= 0 and run["dry_run"] is False
            assert run["started_at"][:4].isdigit() and "T" in run["started_at"]
            assert run["run_id"] and run["run_id"] in run["journal_toon"]
            # the experiment's faults.register action really registered the fault, and rollback removed it
            registry = json.loads(server_env.registry.read_text())
            assert "mcp-smoke-db" not in registry["faults"]

            # inline YAML, dry run
            dry = await ok(c, "chaos_run_experiment", {"experiment": SMOKE_EXPERIMENT, "dry_run": True})
            assert dry["experiment_name"] == "MCP smoke" and dry["dry_run"] is True and dry["success"]

            # bad input is a tool error naming the field
            text = await err(c, "chaos_run_experiment", {"experiment_name": "no-such-exp"})
            assert "experiment_name" in text and "mcp-smoke" in text
            text = await err(c, "chaos_run_experiment", {"experiment": "title: x\nmethod: nope\n"})
            assert "method" in text and "fix" in text

            j = await ok(c, "chaos_get_journal", {"run_id": run["run_id"]})
            body = json.loads(j["journal"])
            assert body["run_id"] == run["run_id"] and j["format"] == "json"
            j = await ok(c, "chaos_get_journal", {"run_id": run["run_id"], "format": "toon"})
            assert j["format"] == "toon" and run["run_id"] in j["journal"]
            assert not j["journal"].lstrip().startswith("{")

            st = await ok(c, "chaos_status", {"include_results": True, "experiment_name": "mcp-smoke"})
            assert st["total_runs"] == 1 and st["success_rate"] == 1.0
            assert {run["run_id"], dry["run_id"]} <= {r["run_id"] for r in st["results"]}
            st = await ok(c, "chaos_status", {"experiment_name": "something-else"})
            assert st["total_runs"] == 0

            q = await ok(c, "chaos_analyze", {"sql": "SELECT count(*) FROM runs WHERE status = 'completed'"})
            assert q["rows"][0][0] >= 1


REGISTER = {"fault_name": "era", "action": "register", "fault_type": "latency", "duration_seconds": 0.1}


@pytest.mark.parametrize(("mode", "version"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
async def test_both_protocol_eras(http_server: Any, server_env: ServerEnv, mode: str, version: str) -> None:
    from mcp_helpers import stdio_client

    with anyio.fail_after(60):
        async with http_server.client(mode=mode) as c:
            assert c.session.protocol_version == version
            r = await c.call_tool("chaos_inject_fault", REGISTER)
            assert not r.is_error
            # the text block is TOON (compact for agents); structured content is JSON
            text = r.content[0].text  # type: ignore[union-attr]
            assert "status: registered" in text and not text.lstrip().startswith("{")
        async with stdio_client(server_env, mode=mode) as c:
            assert c.session.protocol_version == version
            st = await ok(c, "chaos_status")
            assert [f["name"] for f in st["active_faults"]] == ["era"]
    assert "listening on http://127.0.0.1:" in http_server.log.read_text()  # loopback by default


async def test_json_text_format(server_env: ServerEnv) -> None:
    from mcp_helpers import stdio_client

    with anyio.fail_after(60):
        async with stdio_client(server_env, "--text-format", "json") as c:
            r = await c.call_tool("chaos_inject_fault", REGISTER)
    text = r.content[0].text  # type: ignore[union-attr]
    assert json.loads(text) == r.structured_content
