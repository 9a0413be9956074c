"""The faults added for issue 21 are reverted by the lease watchdog alone when their controller is SIGKILLed:
a PostgreSQL error trigger, a PID-limited process and a CPU stress over SSH, all applied by one controller."""

from __future__ import annotations

import uuid
from pathlib import Path

import psutil
import psycopg
import pytest
from lease_helpers import controller, reverted_after_kill

from faultplane.drivers import leases
from proc_helpers import fork, start_forker

pytestmark = [pytest.mark.timeout(120)]


def test_watchdog_reverts_new_faults_after_sigkill(postgres_server, ssh_target, lease_env) -> None:  # type: ignore[no-untyped-def]
    import os

    if os.geteuid() != 0:
        pytest.skip("pids cgroups and sshd need root")
    dsn = postgres_server.dsn
    table = f"orders_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {table} (v int)")
    forker, _ = start_forker()
    steps = [
        ["postgres", "statement_errors", {"dsn": dsn, "table": table}],
        ["hostres", "exhaust_pids", {"pid": forker.pid}],
        ["ssh", "stress", {"hosts": [ssh_target], "workers": 1}],
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
            assert write_fails() and fork(forker) == "EAGAIN" and stress()
            assert len(leases.list_leases()) == 3
            rows = reverted_after_kill(ctl, "sigkill-new", 3)
            assert sorted(r["ok"] for r in rows) == [True, True, True], rows
            assert not write_fails()
            assert fork(forker) == "ok"
            assert stress() == []
            assert "faultplane-pids-" not in Path(f"/proc/{forker.pid}/cgroup").read_text()
    finally:
        forker.kill()
        forker.wait()
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(f"DROP TABLE {table}")
