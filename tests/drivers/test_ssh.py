"""SSH process faults against a real OpenSSH sshd on loopback (the processes are local, reached over SSH)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import lease_helpers
import psutil
import pytest

from faultplane.drivers import leases
from faultplane.drivers.base import ActivityContext, DriverError, get_activity
from proc_helpers import eventually, process_status
from proc_helpers import sleepers as sleepers_of

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def sleepers() -> Iterator[tuple[str, list[subprocess.Popen[bytes]]]]:
    with sleepers_of("fpssh", 3) as found:
        yield found


def _stopped(pid: int) -> bool:
    return process_status(pid) == psutil.STATUS_STOPPED


async def test_process_count_and_kill_with_restart(ssh_target, sleepers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    token, procs = sleepers
    ctx = ActivityContext(run_id="ssh1")
    assert await get_activity("ssh", "process_count").invoke(ctx, {**ssh_target, "pattern": token}) == 3
    marker = tmp_path / "restarted"
    out = await get_activity("ssh", "kill_process").invoke(
        ctx, {**ssh_target, "pattern": token, "count": 2, "restart_command": f"touch {marker}"}
    )
    assert len(out["pids"]) == 2 and set(out["pids"]) <= {p.pid for p in procs}
    assert eventually(lambda: sum(p.poll() is not None for p in procs) == 2)
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert marker.exists()
    assert leases.list_leases() == []


async def test_suspend_and_resume_over_ssh(ssh_target, sleepers) -> None:  # type: ignore[no-untyped-def]
    token, procs = sleepers
    ctx = ActivityContext(run_id="ssh2")
    out = await get_activity("ssh", "suspend_process").invoke(
        ctx, {**ssh_target, "pattern": token, "percentage": 100}
    )
    assert sorted(out["suspended"]) == sorted(p.pid for p in procs)
    assert eventually(lambda: all(_stopped(p.pid) for p in procs))
    [lease] = leases.list_leases()
    assert lease.args["target"].get("password") is None  # key auth: no secret to seal
    await ctx.revert_all()
    assert eventually(lambda: not any(_stopped(p.pid) for p in procs))


async def test_suspend_lease_recipe_resumes_from_another_process(ssh_target, sleepers) -> None:  # type: ignore[no-untyped-def]
    token, procs = sleepers
    ctx = ActivityContext(run_id="ssh3")
    await get_activity("ssh", "suspend_process").invoke(ctx, {**ssh_target, "pattern": token, "count": 1})
    assert len(leases.list_leases()) == 1
    assert eventually(lambda: sum(_stopped(p.pid) for p in procs) == 1)
    # What the watchdog does for a dead controller, in a fresh process.
    out = lease_helpers.reap("--force", timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    assert eventually(lambda: not any(_stopped(p.pid) for p in procs))
    await ctx.revert_all()  # the lease is gone: nothing happens twice


async def test_run_and_command_probe(ssh_target, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="ssh4")
    f = tmp_path / "flag"
    out = await get_activity("ssh", "run").invoke(
        ctx, {**ssh_target, "command": f"touch {f} && echo made", "revert_command": f"rm {f}"}
    )
    assert out["stdout"].strip() == "made" and f.exists()
    res = await get_activity("ssh", "command").invoke(ctx, {**ssh_target, "command": "exit 3"})
    assert res["exit_status"] == 3
    await ctx.revert_all()
    assert not f.exists()
    with pytest.raises(DriverError, match="exited 7"):
        await get_activity("ssh", "run").invoke(ctx, {**ssh_target, "command": "exit 7"})


async def test_connection_errors_are_clear(ssh_target, sshd_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext()
    wrong_hosts = tmp_path / "kh"
    wrong_hosts.write_text("")
    with pytest.raises(DriverError, match="host: cannot open SSH"):
        await get_activity("ssh", "process_count").invoke(
            ctx, {**ssh_target, "known_hosts": str(wrong_hosts), "pattern": "x"}
        )
    with pytest.raises(DriverError, match="pattern: no process"):
        await get_activity("ssh", "kill_process").invoke(
            ctx, {**ssh_target, "pattern": "no-such-process-xyz-123"}
        )
    with pytest.raises(DriverError, match=r"arguments\.pattern|valid regex"):
        await get_activity("ssh", "kill_process").invoke(ctx, {**ssh_target, "pattern": "("})
