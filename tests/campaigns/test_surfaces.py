"""The CLI commands and MCP tools call the same services: checked end to end on the demo service."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from faultplane.cli import compliance as compliance_cli
from faultplane.cli import design as design_cli
from faultplane.cli import gameday as gameday_cli
from faultplane.cli import search as search_cli


def cli() -> typer.Typer:
    # mounted the way the lead mounts them in faultplane.cli.main
    app = typer.Typer()
    app.add_typer(gameday_cli.app, name="gameday")
    app.add_typer(compliance_cli.app, name="compliance")
    design_cli.register(app)
    search_cli.register(app)
    return app


runner = CliRunner()


def invoke(*args: str) -> Any:
    return runner.invoke(cli(), list(args), catch_exceptions=False)


def test_cli_design_writes_files_and_refuses_bad_input(tmp_path: Path) -> None:
    r = invoke(
        "design",
        "--service",
        "orders",
        "--kind",
        "http",
        "--url",
        "http://127.0.0.1:8080/orders",
        "--fault-point",
        "demo.db",
        "--latency-p99-ms",
        "500",
        "--compliance",
        "DORA-25",
        "--out",
        str(tmp_path),
        "-o",
        "json",
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [d["slug"] for d in data["experiments"]][:2] == ["latency-half-slo", "latency-near-slo"]
    assert len(list(tmp_path.glob("*.yaml"))) == len(data["experiments"])
    assert "DORA-25" in yaml.safe_load(next(tmp_path.glob("00-*.yaml")).read_text())["tags"]
    bad = runner.invoke(cli(), ["design", "--service", "orders", "--kind", "http"])
    assert bad.exit_code == 2
    assert "url" in bad.output and "fix:" in bad.output
    assert "Traceback" not in bad.output


def test_cli_gameday_run_analyze_and_compliance_report(
    demo_url: str, experiments_dir: Path, tmp_path: Path
) -> None:
    r = invoke(
        "gameday",
        "run",
        str(experiments_dir / "gameday-orders.yaml"),
        "--var",
        f"service_url={demo_url}",
        "-o",
        "json",
    )
    assert r.exit_code == 0, r.output
    run = json.loads(r.stdout)
    assert run["planned"] == run["passed"] == 4
    r = invoke("gameday", "analyze", run["gameday_id"])
    assert r.exit_code == 0 and "grade" in r.output and run["gameday_id"] in r.output
    assert r.output.count("completed") == 4
    r = invoke("gameday", "list", "--format", "toon")
    assert r.exit_code == 0 and run["gameday_id"] in r.output
    out = tmp_path / "coverage.html"
    r = invoke("compliance", "report", "--framework", "DORA", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert "DORA-25" in out.read_text()
    r = invoke("compliance", "report", "--framework", "DORA")
    assert "| DORA-24 |" in r.output and "❌ gap" in r.output
    r = invoke("compliance", "requirements", "-f", "SOC2")
    assert r.exit_code == 0 and "SOC2-A1.3" in r.output
    missing = runner.invoke(cli(), ["gameday", "run", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_cli_search_exit_codes(demo_url: str, experiments_dir: Path, tmp_path: Path) -> None:
    spec = {
        "experiment": "demo-db-latency.yaml",
        "parameters": {"ms": {"type": "int", "low": 900, "high": 1400, "step": 10}},
        "objective": {"source": "probe", "name": "orders-latency-under-fault", "bound": 1000},
        "budget": 3,
        "seed": 3,
        "sampler": "random",
    }
    path = experiments_dir / "_cli-search.yaml"
    path.write_text(yaml.safe_dump(spec))
    try:
        r = invoke("search", str(path), "--var", f"service_url={demo_url}", "--format", "json")
        assert r.exit_code in (0, 1), r.output
        data = json.loads(r.stdout)
        assert len(data["trials"]) == 3
        assert (r.exit_code == 0) == data["found_breach"]
        bad = runner.invoke(cli(), ["search", str(path), "--budget", "0"])
        assert bad.exit_code == 2 and "budget" in bad.output
    finally:
        path.unlink()


def test_cli_search_bad_input_names_the_field_without_a_traceback(
    experiments_dir: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "experiment": str(experiments_dir / "demo-db-latency.yaml"),
                "parameters": {"ms": {"type": "int", "low": 0, "high": 100}},
                "objective": {"source": "probe", "name": "orders-latency-under-fault", "bound": 1000},
                "budget": 1,
            }
        )
    )
    cases = [
        (["search", "no-such-spec"], "spec", "search-payment"),
        (["search", str(tmp_path / "missing.yaml")], "spec", "file not found"),
        (["search", str(experiments_dir / "demo-db-latency.yaml")], "spec", "not a search spec"),
        (["search", str(spec), "--sampler", "ga"], "sampler", "fix:"),
        (["search", str(spec), "--var", "novalue"], "--var", "name=value"),
        (["search", str(spec), "--policy", str(tmp_path / "nope.policy.yaml")], "policy", "does not exist"),
        (
            ["gameday", "run", str(experiments_dir / "gameday-orders.yaml"), "--policy", "x.yaml"],
            "policy",
            "fix:",
        ),
    ]
    for args, field, words in cases:
        r = runner.invoke(cli(), args)
        assert r.exit_code == 2, (args, r.output)
        assert field in r.output and words in r.output, (args, r.output)
        assert r.exception is None or isinstance(r.exception, SystemExit), (args, r.exception)
        assert "Traceback" not in r.output
    # nothing ran: every refusal came before the first trial
    from faultplane.core.store import Store

    assert Store(tmp_path / "store.duckdb").query("SELECT count(*) AS n FROM runs")[0]["n"] == 0


def test_bundled_search_spec_and_help_read_well() -> None:
    r = invoke("search", "--help")
    assert r.exit_code == 0 and "search-payment" in r.output and "--policy" in r.output
    r = invoke("gameday", "--help")
    assert r.exit_code == 0 and "lanes" in r.output and "gameday run" in r.output


@pytest.mark.anyio
async def test_mcp_tools(demo_url: str, experiments_dir: Path, tmp_path: Path) -> None:
    from faultplane.mcp_server.server import ServerConfig, build_server
    from mcp import Client

    cfg = ServerConfig(seed=1, store_path=tmp_path / "mcp.duckdb")
    # build_server registers the campaign tools itself: the server as agents get it
    server = build_server(cfg)
    async with Client(server) as c:
        names = [t.name for t in (await c.list_tools()).tools]
        campaign = ["chaos_gameday_run", "chaos_gameday_analyze", "chaos_design_experiment", "chaos_search"]
        assert set(campaign) <= set(names)
        assert all(names.count(n) == 1 for n in campaign)

        r = await c.call_tool(
            "chaos_design_experiment",
            {
                "service": "cache",
                "kind": "redis",
                "url": "redis://127.0.0.1:6379/0",
                "slo": {"latency_p99_ms": 50},
            },
        )
        assert not r.is_error, r
        design = r.structured_content
        assert design["experiments"][0]["action"] == "redis.client_pause"
        assert "slo_gates:" in design["experiments"][0]["experiment_yaml"]
        assert design["held_back"][0]["action"] == "redis.exhaust_connections"
        bad = await c.call_tool("chaos_design_experiment", {"service": "db", "kind": "postgres"})
        assert bad.is_error and "dsn" in bad.content[0].text

        gd = yaml.safe_load((experiments_dir / "gameday-orders.yaml").read_text())
        gd["lanes"] = gd["lanes"][:1]
        gd["lanes"][0]["experiments"] = [
            {"experiment": str(experiments_dir / "demo-db-latency.yaml"), "variables": {"ms": 50}}
        ]
        gd["variables"]["service_url"] = demo_url
        gd["baseline_s"] = 1
        r = await c.call_tool("chaos_gameday_run", {"gameday": yaml.safe_dump(gd)})
        assert not r.is_error, r
        out = r.structured_content
        assert out["planned"] == out["passed"] == 1 and out["score"] is not None
        r = await c.call_tool("chaos_gameday_analyze", {})
        assert r.structured_content["gameday_id"] == out["gameday_id"]
        assert r.structured_content["score"] == out["score"]

        spec = {
            "experiment": str(experiments_dir / "demo-db-latency.yaml"),
            "parameters": {"ms": {"type": "int", "low": 0, "high": 1500, "step": 10}},
            "objective": {"source": "probe", "name": "orders-latency-under-fault", "bound": 1000},
            "budget": 2,
            "seed": 5,
        }
        r = await c.call_tool(
            "chaos_search", {"spec": yaml.safe_dump(spec), "variables": {"service_url": demo_url}}
        )
        assert not r.is_error, r
        assert r.structured_content["trials"] == 2 and "ms" in r.structured_content["toon"]
        bad = await c.call_tool("chaos_search", {"spec": yaml.safe_dump({**spec, "budget": 0})})
        assert bad.is_error and "budget" in bad.content[0].text


LAX_POLICY = {
    "forbidden": {"extend_defaults": False, "words": [], "labels": {}},
    "gates": {"required": False, "min_gates": 0, "require_window": False},
}


@pytest.mark.anyio
async def test_mcp_campaign_tools_run_under_the_servers_policy_only(
    demo_url: str, experiments_dir: Path, tmp_path: Path
) -> None:
    """An agent cannot swap in a lax policy file: the MCP surface refuses a spec that names one, and without it
    the policy in force decides (here the strict default, which refuses a production target)."""
    from faultplane.core.store import Store
    from faultplane.mcp_server.server import ServerConfig, build_server
    from faultplane.services.experiments import validate_experiment
    from mcp import Client

    lax = tmp_path / "lax.policy.yaml"
    lax.write_text(yaml.safe_dump(LAX_POLICY))
    prod = yaml.safe_load((experiments_dir / "demo-db-latency.yaml").read_text())
    prod["targets"][0]["labels"]["env"] = "production"
    # even the lax file cannot let production through (no policy file drops the production floor)
    assert not validate_experiment(prod, variables={"service_url": demo_url}, policy_path=lax).valid
    assert not validate_experiment(prod, variables={"service_url": demo_url}).valid

    store_path = tmp_path / "mcp.duckdb"
    cfg = ServerConfig(seed=1, store_path=store_path)
    spec = {
        "experiment": prod,
        "parameters": {"ms": {"type": "int", "low": 0, "high": 1500, "step": 10}},
        "objective": {"source": "probe", "name": "orders-latency-under-fault", "bound": 1000},
        "budget": 2,
        "seed": 5,
    }
    async with Client(build_server(cfg)) as c:
        for policy in (str(lax), "lax.policy.yaml"):
            r = await c.call_tool(
                "chaos_search",
                {"spec": yaml.safe_dump({**spec, "policy": policy}), "variables": {"service_url": demo_url}},
            )
            assert r.is_error, r
            text = r.content[0].text
            assert "chaos_search: policy:" in text and "policy in force" in text and "remove `policy`" in text
        # without the field, the policy in force decides, trial by trial
        r = await c.call_tool(
            "chaos_search", {"spec": yaml.safe_dump(spec), "variables": {"service_url": demo_url}}
        )
        assert not r.is_error, r
        out = r.structured_content
        assert out["status"] == "refused" and "production" in out["message"] and not out["found_breach"]

        # the GameDay and design tools have no way to name a policy at all: the key is refused by name
        gd = yaml.safe_load((experiments_dir / "gameday-orders.yaml").read_text())
        r = await c.call_tool("chaos_gameday_run", {"gameday": yaml.safe_dump({**gd, "policy": str(lax)})})
        assert r.is_error and "policy" in r.content[0].text and "remove" in r.content[0].text
        r = await c.call_tool(
            "chaos_design_experiment",
            {
                "service": "cache",
                "kind": "redis",
                "url": "redis://127.0.0.1:6379/0",
                "options": {"policy": str(lax)},
            },
        )
        assert r.is_error and "policy" in r.content[0].text and "remove" in r.content[0].text

    # nothing ran but the one refused trial, and it was refused by the strict default, not the lax file
    runs = Store(store_path).query("SELECT status FROM runs")
    assert runs == [{"status": "refused"}]
