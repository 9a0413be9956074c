"""Host resource faults measured by ordinary programs: a writer gets ENOSPC on a filled tmpfs, a process whose
open-file limit was lowered gets EMFILE; both recover after the revert."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from faultplane.drivers import leases
from faultplane.drivers.base import ActivityContext, DriverError, get_activity
from proc_helpers import fork, start_forker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def small_fs():  # type: ignore[no-untyped-def]
    """A private 8 MiB tmpfs, so filling it touches nothing else."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    d = Path(tempfile.mkdtemp(prefix="faultplane-fill-"))
    out = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(d)], capture_output=True, text=True
    )
    if out.returncode != 0:
        d.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()}")
    yield d
    subprocess.run(["umount", str(d)], capture_output=True)
    d.rmdir()


def _write(directory: Path, size: int) -> str:
    """An ordinary writer in another process: 'ok' or the errno name it got."""
    code = textwrap.dedent(
        """
        import errno, os, sys
        p = os.path.join(sys.argv[1], "app.dat")
        try:
            with open(p, "wb") as f:
                f.write(b"a" * int(sys.argv[2])); f.flush(); os.fsync(f.fileno())
            print("ok")
        except OSError as e:
            print(errno.errorcode[e.errno])
        finally:
            if os.path.exists(p):
                os.unlink(p)
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(directory), str(size)], capture_output=True, text=True, timeout=30
    ).stdout.strip()


async def test_fill_disk_makes_writers_fail_with_enospc_and_revert_frees_it(small_fs: Path) -> None:
    assert _write(small_fs, 1 << 20) == "ok"
    ctx = ActivityContext(run_id="fill")
    out = await get_activity("hostres", "fill_disk").invoke(ctx, {"directory": str(small_fs)})
    assert out["free_bytes"] < 64 * 1024 and out["filled_bytes"] > 7 * (1 << 20)
    assert _write(small_fs, 1 << 20) == "ENOSPC"
    assert len(leases.list_leases()) == 1
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert _write(small_fs, 1 << 20) == "ok"
    assert list(small_fs.iterdir()) == [] and leases.list_leases() == []


async def test_fill_disk_leave_free_and_refusals(small_fs: Path) -> None:
    ctx = ActivityContext(run_id="fill2")
    out = await get_activity("hostres", "fill_disk").invoke(
        ctx, {"directory": str(small_fs), "leave_free_bytes": 2 << 20}
    )
    assert (2 << 20) - 256 * 1024 <= out["free_bytes"] <= (2 << 20) + 256 * 1024
    assert _write(small_fs, 1 << 20) == "ok" and _write(small_fs, 3 << 20) == "ENOSPC"
    # a revert never deletes a file that only has the fill's name
    assert len(leases.list_leases()) == 1
    fill = Path(out["file"])
    fill.unlink()
    fill.write_bytes(b"someone else's")
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert fill.read_bytes() == b"someone else's"
    fill.unlink()
    for args, pattern in [
        ({"directory": str(small_fs / "nope")}, "is not a directory"),
        ({"directory": str(small_fs), "fill_bytes": 1 << 30}, r"^fill_bytes: \d+ requested but only"),
        ({"directory": str(small_fs), "fill_bytes": 1, "leave_free_bytes": 1}, "not both"),
    ]:
        with pytest.raises(DriverError, match=pattern):
            await get_activity("hostres", "fill_disk").invoke(ctx, args)
    assert ctx.reverts == [] and leases.list_leases() == []


FD_TARGET = textwrap.dedent(
    """
    import errno, os, sys, time
    out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT)  # kept open: reporting needs no new descriptor
    while True:
        try:
            os.close(os.open("/dev/null", os.O_RDONLY)); result = b"ok    "
        except OSError as e:
            result = errno.errorcode[e.errno].encode().ljust(6)
        os.pwrite(out, result, 0)
        time.sleep(0.02)
    """
)


def _status(path: Path) -> str:
    return path.read_text().strip() if path.exists() else ""


async def test_exhaust_fds_makes_open_fail_with_emfile_and_revert_restores(tmp_path: Path) -> None:
    status = tmp_path / "status"
    target = subprocess.Popen([sys.executable, "-c", FD_TARGET, str(status)])
    try:
        deadline = time.monotonic() + 10
        while _status(status) != "ok":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        ctx = ActivityContext(run_id="fd")
        out = await get_activity("hostres", "exhaust_fds").invoke(ctx, {"pid": target.pid})
        assert out["limit"] == out["open_fds"]
        deadline = time.monotonic() + 5
        while _status(status) != "EMFILE":
            assert time.monotonic() < deadline, "the target never got EMFILE"
            time.sleep(0.02)
        assert len(leases.list_leases()) == 1
        assert [e for _, e in await ctx.revert_all()] == [None]
        deadline = time.monotonic() + 5
        while _status(status) != "ok":
            assert time.monotonic() < deadline, "the limit was not restored"
            time.sleep(0.02)
        assert leases.list_leases() == []
        with pytest.raises(DriverError, match=r"^pid: no process"):
            await get_activity("hostres", "exhaust_fds").invoke(ctx, {"pid": 2**22 + 7})
        assert ctx.reverts == [] and leases.list_leases() == []
    finally:
        target.kill()
        target.wait(5)


LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")

CLOCK_TARGET = textwrap.dedent(
    """
    import os, sys, time
    out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT)
    while True:
        os.pwrite(out, f"{time.time():.3f}".ljust(32).encode(), 0)
        time.sleep(0.02)
    """
)


def _skew(status: Path) -> float:
    """The target's clock minus the real one, as the target itself reports it."""
    text = status.read_text().strip() if status.exists() else ""
    return float(text) - time.time() if text else float("nan")


async def test_clock_skew_shifts_only_the_faketime_process_and_reverts(tmp_path: Path) -> None:
    if not LIBFAKETIME.exists():
        pytest.skip("libfaketime is not installed (apt-get install -y libfaketime)")
    stamp = tmp_path / "app.faketime"
    status = tmp_path / "clock"
    env = {
        **os.environ,
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME_TIMESTAMP_FILE": str(stamp),
        "FAKETIME_NO_CACHE": "1",
    }
    target = subprocess.Popen([sys.executable, "-c", CLOCK_TARGET, str(status)], env=env)

    def wait_for(pred, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 10
        while not pred():
            assert time.monotonic() < deadline, what
            time.sleep(0.02)

    try:
        wait_for(lambda: abs(_skew(status)) < 2, "the target's clock is not the real one to start with")
        ctx = ActivityContext(run_id="clk")
        out = await get_activity("hostres", "clock_skew").invoke(
            ctx, {"timestamp_file": str(stamp), "offset_seconds": 3600}
        )
        assert out["previous"] is None
        wait_for(lambda: 3595 < _skew(status) < 3605, "the target never saw the skew")
        assert [e for _, e in await ctx.revert_all()] == [None]
        wait_for(lambda: abs(_skew(status)) < 2, "the clock was not put back")
        assert stamp.read_text().strip() == "+0"
        # backwards, then a revert to a value an operator had set before
        stamp.write_text("+60\n")
        await get_activity("hostres", "clock_skew").invoke(
            ctx, {"timestamp_file": str(stamp), "offset_seconds": -86400}
        )
        wait_for(lambda: -86405 < _skew(status) < -86395, "the target never went back a day")
        assert [e for _, e in await ctx.revert_all()] == [None]
        assert stamp.read_text() == "+60\n"
        assert leases.list_leases() == []
        with pytest.raises(DriverError, match=r"^timestamp_file: directory"):
            await get_activity("hostres", "clock_skew").invoke(
                ctx, {"timestamp_file": str(tmp_path / "no" / "f"), "offset_seconds": 1}
            )
        assert ctx.reverts == [] and leases.list_leases() == []
    finally:
        target.kill()
        target.wait(5)


# --- PID exhaustion ---


def _pids_cgroup(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            return path
    return Path(f"/proc/{pid}/cgroup").read_text().splitlines()[-1].split(":", 2)[2]  # cgroup v2


@pytest.fixture
def forker():  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        pytest.skip("moving a process into a pids cgroup needs root")
    proc, child = start_forker()
    yield proc, child
    proc.kill()
    proc.wait()


async def test_exhaust_pids_makes_fork_fail_and_revert_restores(forker) -> None:  # type: ignore[no-untyped-def]
    proc, child = forker
    home = _pids_cgroup(proc.pid)
    assert fork(proc) == "ok"
    ctx = ActivityContext(run_id="pids")
    out = await get_activity("hostres", "exhaust_pids").invoke(ctx, {"pid": proc.pid})
    assert set(out["processes"]) == {proc.pid, child} and out["pids_max"] == out["tasks"]
    cgroup = Path(out["cgroup"])
    assert _pids_cgroup(child) == _pids_cgroup(proc.pid) == "/" + cgroup.name  # the descendant moved too
    assert fork(proc) == "EAGAIN"  # as on a host out of PIDs
    assert subprocess.run(["true"]).returncode == 0  # everyone else still forks
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert fork(proc) == "ok"
    assert _pids_cgroup(proc.pid) == _pids_cgroup(child) == home
    assert not cgroup.exists() and leases.list_leases() == []


async def test_exhaust_pids_headroom_and_the_lease_recipe_alone(forker) -> None:  # type: ignore[no-untyped-def]
    proc, _ = forker
    ctx = ActivityContext(run_id="pids2")
    out = await get_activity("hostres", "exhaust_pids").invoke(ctx, {"pid": proc.pid, "headroom": 1})
    assert out["pids_max"] == out["tasks"] + 1
    assert fork(proc) == "ok"  # one more task fits (and exits again)
    # What the watchdog runs after a SIGKILLed controller: the recipe from the lease file alone.
    (lease,) = leases.list_leases()
    leases.run_recipe(lease.driver, lease.revert, lease.args)
    assert not Path(out["cgroup"]).exists()
    leases.run_recipe(lease.driver, lease.revert, lease.args)  # a second revert is a no-op
    with pytest.raises(DriverError, match=r"^pid: no process 99999999"):
        await get_activity("hostres", "exhaust_pids").invoke(ActivityContext(run_id="x"), {"pid": 99999999})


# --- IO stress ---


def _io_dir() -> Path:
    """A directory on a real disk (tmpfs would count no device IO)."""
    return Path(tempfile.mkdtemp(prefix="faultplane-io-", dir="/var/tmp"))


async def test_stress_io_writes_to_the_device_until_rollback() -> None:
    d = _io_dir()
    try:
        ctx = ActivityContext(run_id="io")
        out = await get_activity("hostres", "stress_io").invoke(
            ctx,
            {
                "directory": str(d),
                "file_megabytes": 4,
                "block_kilobytes": 256,
                "duration_seconds": 600,
                "wait": False,
            },
        )
        (pid,) = out["pids"]
        # The kernel's own count of bytes the worker sent to the block device grows while the fault is on.
        io = Path(f"/proc/{pid}/io")
        first = int(dict(x.split(": ") for x in io.read_text().splitlines())["write_bytes"])
        deadline = time.monotonic() + 60
        later = first
        while later < first + 2**20 and time.monotonic() < deadline:
            time.sleep(0.2)
            later = int(dict(x.split(": ") for x in io.read_text().splitlines())["write_bytes"])
        assert later >= first + 2**20
        assert [e for _, e in await ctx.revert_all()] == [None]
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
        assert list(d.iterdir()) == [] and leases.list_leases() == []
    finally:
        for f in d.iterdir():
            f.unlink()
        d.rmdir()


async def test_stress_io_bounded_run_reports_kernel_counts_and_refuses_bad_input(tmp_path: Path) -> None:
    d = _io_dir()
    try:
        ctx = ActivityContext(run_id="io2")
        out = await get_activity("hostres", "stress_io").invoke(
            ctx, {"directory": str(d), "file_megabytes": 1, "block_kilobytes": 64, "duration_seconds": 1.5}
        )
        assert out["write_bytes"] > 0 and list(d.iterdir()) == [] and leases.list_leases() == []
        for args, pattern in [
            ({"directory": str(tmp_path / "nope")}, r"^directory: .* is not a directory"),
            (
                {"directory": str(d), "file_megabytes": 65_536, "workers": 64},
                r"^file_megabytes: 64 x 65536 MiB",
            ),
        ]:
            with pytest.raises(DriverError, match=pattern):
                await get_activity("hostres", "stress_io").invoke(ctx, {"duration_seconds": 1, **args})
        assert ctx.reverts == [] and leases.list_leases() == []
    finally:
        d.rmdir()


# --- IO throttling ---

_READER = textwrap.dedent(
    """
    import os, sys, time
    path = sys.argv[1]
    for line in sys.stdin:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # from the disk, not the page cache
        t0 = time.monotonic()
        while os.read(fd, 1 << 20):
            pass
        os.close(fd)
        print(time.monotonic() - t0, flush=True)
    """
)


async def test_throttle_io_slows_only_the_target_process_reads() -> None:
    if os.geteuid() != 0:
        pytest.skip("moving a process into a blkio/io cgroup needs root")
    d = _io_dir()
    data = d / "data.bin"
    with open(data, "wb") as f:
        f.write(os.urandom(2 * 2**20))
        f.flush()
        os.fsync(f.fileno())  # clean pages: DONTNEED really drops them
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER, str(data)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )

    def read_s() -> float:
        assert reader.stdin is not None and reader.stdout is not None
        reader.stdin.write("go\n")
        reader.stdin.flush()
        return float(reader.stdout.readline())

    try:
        fast = read_s()
        ctx = ActivityContext(run_id="thr")
        out = await get_activity("hostres", "throttle_io").invoke(
            ctx, {"pid": reader.pid, "directory": str(d), "read_bytes_per_second": 256 * 1024}
        )
        assert out["limits"] == {"read_bps": 256 * 1024}
        assert "faultplane-io-" in Path(f"/proc/{reader.pid}/cgroup").read_text()
        slow = read_s()
        # 2 MiB at 256 KiB/s is 8 s (less the throttle's first slice); an unthrottled read is far below it even
        # on a loaded disk, so the ratios below leave a wide margin.
        assert slow >= 4.0
        assert slow > 3 * fast
        assert [e for _, e in await ctx.revert_all()] == [None]
        assert "faultplane-io-" not in Path(f"/proc/{reader.pid}/cgroup").read_text()
        assert not Path(out["cgroup"]).exists() and leases.list_leases() == []
        assert read_s() < slow / 3
        with pytest.raises(DriverError, match=r"^directory: .* is not on a block device"):
            await get_activity("hostres", "throttle_io").invoke(
                ctx, {"pid": reader.pid, "directory": "/dev/shm", "read_iops": 10}
            )
        assert ctx.reverts == [] and leases.list_leases() == []
    finally:
        reader.kill()
        reader.wait()
        data.unlink()
        d.rmdir()
