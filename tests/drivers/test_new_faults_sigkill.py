"""The faults added for issue 21 are reverted by the lease watchdog alone when their controller is SIGKILLed:
a PostgreSQL error trigger, a PID-limited process and a CPU stress over SSH, all applied by one controller."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import psycopg
import pytest
from lease_helpers import controller, reverted_after_kill
from test_hostres import _FORKER

from faultplane.drivers import leases

pytestmark = [pytest.mark.timeout(120)]


def _fork(proc: subprocess.Popen[str]) -> str:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("fork\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


def test_watchdog_reverts_new_faults_after_sigkill(postgres_server, sshd_server, lease_env) -> None:  # type: ignore[no-untyped-def]
    import os

    if os.geteuid() != 0:
        pytest.skip("pids cgroups and sshd need root")
    dsn = postgres_server.dsn
    table = f"orders_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {table} (v int)")
    forker = subprocess.Popen(
        [sys.executable, "-c", _FORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert forker.stdout is not None
    forker.stdout.readline()  # its child's pid
    host = {
        "host": sshd_server.host,
        "port": sshd_server.port,
        "username": sshd_server.username,
        "client_keys": [str(sshd_server.client_key)],
        "known_hosts": str(sshd_server.known_hosts),
    }
    steps = [
        ["postgres", "statement_errors", {"dsn": dsn, "table": table}],
        ["hostres", "exhaust_pids", {"pid": forker.pid}],
        ["ssh", "stress", {"hosts": [host], "workers": 1}],
    ]

    def stress() -> list[psutil.Process]:
        return [
            p
            for p in psutil.process_iter(["cmdline"])
            if "fp-stress-cpu-" in " ".join(p.info["cmdline"] or [])
        ]

    def write_fails() -> bool:
        with psycopg.connect(dsn, autocommit=True) as c:
            try:
                c.execute(f"INSERT INTO {table} VALUES (1)")
                return False
            except psycopg.errors.SerializationFailure:
                return True

    try:
        with controller(steps, "sigkill-new", "no-secret-here", lease_env) as ctl:
            assert write_fails() and _fork(forker) == "EAGAIN" and stress()
            assert len(leases.list_leases()) == 3
            rows = reverted_after_kill(ctl, "sigkill-new", 3)
            assert sorted(r["ok"] for r in rows) == [True, True, True], rows
            assert not write_fails()
            assert _fork(forker) == "ok"
            assert stress() == []
            assert "faultplane-pids-" not in Path(f"/proc/{forker.pid}/cgroup").read_text()
    finally:
        forker.kill()
        forker.wait()
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(f"DROP TABLE {table}")
