"""Process faults against real child processes; every revert checked."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from faultplane.drivers.base import ActivityContext, DriverError, get_activity
from proc_helpers import eventually, process_status
from proc_helpers import sleepers as sleepers_of

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def sleepers() -> Iterator[tuple[str, list[subprocess.Popen[bytes]]]]:
    """Four `sleep` processes whose command line carries a unique token."""
    with sleepers_of("fp", 4) as found:
        yield found


async def test_kill_count_kills_exactly_that_many_and_rollback_restarts(sleepers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    token, procs = sleepers
    marker = tmp_path / "restarted"
    ctx = ActivityContext(run_id="p1")
    out = await get_activity("process", "kill").invoke(
        ctx, {"cmdline_pattern": token, "count": 1, "restart_command": ["touch", str(marker)]}
    )
    assert len(out["processes"]) == 1
    assert eventually(lambda: sum(p.poll() is not None for p in procs) == 1)
    assert not marker.exists()
    assert [err for _, err in await ctx.revert_all()] == [None]
    assert eventually(marker.exists)


async def test_terminate_percentage_is_rounded_up_and_seeded(sleepers) -> None:  # type: ignore[no-untyped-def]
    token, procs = sleepers
    import random

    ctx = ActivityContext(run_id="p2", rng=random.Random(3))
    out = await get_activity("process", "terminate").invoke(ctx, {"cmdline_pattern": token, "percentage": 40})
    assert len(out["processes"]) == 2  # ceil(4 * 0.4)
    assert eventually(lambda: sum(p.poll() is not None for p in procs) == 2)
    count = await get_activity("process", "count").invoke(ctx, {"cmdline_pattern": token})
    assert count == 2


async def test_suspend_stops_and_rollback_resumes(sleepers) -> None:  # type: ignore[no-untyped-def]
    _token, procs = sleepers
    ctx = ActivityContext(run_id="p3")
    out = await get_activity("process", "suspend").invoke(ctx, {"pid": procs[0].pid})
    assert out["suspended"] == [procs[0].pid]
    assert eventually(lambda: process_status(procs[0].pid) == psutil.STATUS_STOPPED)
    assert process_status(procs[1].pid) != psutil.STATUS_STOPPED
    await ctx.revert_all()
    assert eventually(lambda: process_status(procs[0].pid) != psutil.STATUS_STOPPED)


async def test_suspend_with_duration_resumes_by_itself(sleepers) -> None:  # type: ignore[no-untyped-def]
    token, procs = sleepers
    ctx = ActivityContext(run_id="p4")
    out = await get_activity("process", "suspend").invoke(
        ctx, {"cmdline_pattern": token, "count": 2, "duration_seconds": 0.2}
    )
    assert len(out["suspended"]) == 2
    assert all(process_status(p.pid) != psutil.STATUS_STOPPED for p in procs)
    assert ctx.reverts == []


def _burnt_half_a_cpu_second(proc: psutil.Process) -> bool:
    # CPU time consumed, not a percentage over a short interval: on a busy machine a burner gets a small
    # share, but it keeps burning; an idle process would not reach half a second of CPU
    return sum(proc.cpu_times()[:2]) >= 0.5


def _holds_60_mib(proc: psutil.Process) -> bool:
    return proc.memory_info().rss > 60 * 1024 * 1024


@pytest.mark.parametrize(
    ("activity", "args", "busy", "within_s"),
    [
        ("stress_cpu", {"workers": 1}, _burnt_half_a_cpu_second, 20),
        ("stress_memory", {"megabytes": 64}, _holds_60_mib, 10),
    ],
)
async def test_stress_holds_its_resource_until_rollback(
    activity: str, args: dict[str, int], busy: Callable[[psutil.Process], bool], within_s: float
) -> None:
    ctx = ActivityContext(run_id=activity)
    out = await get_activity("process", activity).invoke(ctx, {**args, "duration_seconds": 30, "wait": False})
    proc = psutil.Process(out["pids"][0])
    assert eventually(lambda: busy(proc), within_s), proc
    await ctx.revert_all()
    assert eventually(lambda: process_status(proc.pid) in ("gone", psutil.STATUS_ZOMBIE))


async def test_stress_cpu_with_wait_ends_after_duration() -> None:
    ctx = ActivityContext(run_id="p6")
    t0 = time.monotonic()
    await get_activity("process", "stress_cpu").invoke(ctx, {"workers": 1, "duration_seconds": 0.3})
    assert 0.3 <= time.monotonic() - t0 < 10
    assert ctx.reverts == []


async def test_bad_selectors_are_refused_with_the_field_named() -> None:
    ctx = ActivityContext()
    kill = get_activity("process", "kill")
    with pytest.raises(DriverError, match="at least one of name, pid, pids or cmdline_pattern"):
        await kill.invoke(ctx, {})
    with pytest.raises(DriverError, match="either count or percentage"):
        await kill.invoke(ctx, {"name": "x", "count": 1, "percentage": 10})
    with pytest.raises(DriverError, match="cmdline_pattern"):
        await kill.invoke(ctx, {"cmdline_pattern": "("})
    with pytest.raises(DriverError, match=r"arguments\.duration_seconds"):
        await get_activity("process", "stress_cpu").invoke(ctx, {"duration_seconds": 99999})
    # The controller itself is never a target.
    with pytest.raises(DriverError, match="no process matches"):
        await kill.invoke(ctx, {"pid": os.getpid()})
    assert ctx.reverts == []
