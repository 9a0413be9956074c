"""`faultplane drivers ...` commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest
from lease_helpers import resume_lease
from typer.testing import CliRunner

from faultplane.cli.main import app

pytestmark = [pytest.mark.timeout(60)]
runner = CliRunner()


def test_list_shows_every_builtin_driver_with_schemas() -> None:
    res = runner.invoke(app, ["drivers", "list", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    drivers = {r["driver"] for r in rows}
    assert {"process", "netproxy", "http", "postgres", "redis", "kubernetes", "ssh"} <= drivers
    assert all(r["parameters"].get("type") == "object" for r in rows)
    table = runner.invoke(app, ["drivers", "list", "--driver", "netproxy"])
    assert "netproxy.add_toxic" in table.output


def test_show_and_unknown_activity() -> None:
    res = runner.invoke(app, ["drivers", "show", "process", "suspend"])
    assert res.exit_code == 0 and "duration_seconds" in res.output
    bad = runner.invoke(app, ["drivers", "show", "process", "nope"])
    assert bad.exit_code == 2 and "available:" in bad.output


def test_leases_reap_reverts_a_dead_controllers_fault() -> None:
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        os.kill(target.pid, signal.SIGSTOP)
        lease = resume_lease(target.pid, "cli", ttl_s=0.0)
        listed = runner.invoke(app, ["drivers", "leases", "list", "--json"])
        assert json.loads(listed.output)[0]["lease_id"] == lease.lease_id
        res = runner.invoke(app, ["drivers", "leases", "reap"])
        assert res.exit_code == 0 and "expired; reverted" in res.output
        assert psutil.Process(target.pid).status() != psutil.STATUS_STOPPED
        assert runner.invoke(app, ["drivers", "leases", "reap"]).output.strip() == "no stale lease"
    finally:
        target.kill()
        target.wait(5)


def test_proxy_command_runs_a_standalone_proxy() -> None:
    import socket

    srv = socket.create_server(("127.0.0.1", 0))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "faultplane.cli.main",
            "drivers",
            "proxy",
            "--upstream",
            f"127.0.0.1:{srv.getsockname()[1]}",
            "--control",
            "none",
            "--toxic",
            '{"type":"latency","latency_ms":5}',
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        info = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        assert info["control"] is None
        assert info["routes"][0]["toxics"][0]["latency_ms"] == 5
    finally:
        proc.terminate()
        proc.wait(10)
        srv.close()
