"""Host resource faults: a filesystem filled up, a process's file-descriptor or process limit lowered, IO
stress, a process's clock skewed.

Each is undone by anyone who can read the lease: the fill is one file of Faultplane's (deleted by the revert,
and only if it is still the file we created), the limit is put back to what it was (only if it is still ours),
a process moved into a pids cgroup of Faultplane's is moved back and the cgroup removed, IO workers are killed
by (pid, start time) and their files deleted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel, ConfigDict, Field, model_validator

from faultplane.drivers.base import ActivityContext, DriverError, action
from faultplane.drivers.leases import (
    apply_or_revert,
    hold_then_revert,
    leased_revert,
    revert_now,
    revert_recipe,
)
from faultplane.drivers.params import HoldSeconds
from faultplane.drivers.workers import wait_workers

__all__: list[str] = []

_FILL_PREFIX = ".faultplane-fill-"


@contextlib.contextmanager
def _process_errors(pid: int, doing: str = "inspect") -> Iterator[None]:
    """psutil's errors about the target process, as the one-line error on the ``pid`` field a user reads."""
    try:
        yield
    except psutil.NoSuchProcess:
        raise DriverError(f"pid: no process {pid}") from None
    except psutil.AccessDenied:
        raise DriverError(f"pid: not allowed to {doing} process {pid} (run as root)") from None


# --- disk fill ------------------------------------------------------------------------------------------------


@revert_recipe("hostres", "remove_fill")
def _recipe_remove_fill(args: dict[str, Any]) -> None:
    path = Path(args["path"])
    try:
        st = path.stat()
    except FileNotFoundError:
        return  # already gone
    if st.st_ino != args["inode"] or not path.name.startswith(_FILL_PREFIX):
        return  # not the file this fault created
    path.unlink()


class FillParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    directory: str = Field(description="a directory on the filesystem to fill (the fill file goes there)")
    leave_free_bytes: int | None = Field(
        default=None, ge=0, description="fill until only this much is free (default: 0, completely full)"
    )
    fill_bytes: int | None = Field(default=None, ge=1, description="or: take exactly this much")
    duration_seconds: HoldSeconds = None

    @model_validator(mode="after")
    def _one(self) -> FillParams:
        if self.leave_free_bytes is not None and self.fill_bytes is not None:
            raise ValueError("give leave_free_bytes or fill_bytes, not both")
        return self


def _fill(size: int, path: Path) -> int:
    fd = os.open(path, os.O_WRONLY)
    try:
        try:
            os.posix_fallocate(fd, 0, size)  # real blocks, not a sparse file
        except OSError:
            # filesystems without fallocate (or a concurrent writer took space): write what fits
            chunk = b"\0" * (1 << 20)
            written = 0
            while written < size:
                try:
                    written += os.write(fd, chunk[: min(len(chunk), size - written)])
                except OSError:
                    break
            os.fsync(fd)
        return os.fstat(fd).st_blocks * 512
    finally:
        os.close(fd)


@action("hostres", "fill_disk", FillParams, fault_type="resource_exhaustion")
async def fill_disk(ctx: ActivityContext, p: FillParams) -> dict[str, Any]:
    """Fill the filesystem holding ``directory`` with one file (``.faultplane-fill-*``), to full or to
    ``leave_free_bytes``, or by ``fill_bytes``; writers then get ENOSPC. Rollback deletes the file."""
    directory = Path(p.directory)
    if not directory.is_dir():
        raise DriverError(f"directory: {p.directory!r} is not a directory")
    vfs = os.statvfs(directory)
    free = vfs.f_bavail * vfs.f_frsize
    size = p.fill_bytes if p.fill_bytes is not None else max(0, free - (p.leave_free_bytes or 0))
    if size <= 0:
        raise DriverError(f"leave_free_bytes: only {free} bytes are free; nothing to fill")
    if p.fill_bytes is not None and p.fill_bytes > free:
        raise DriverError(f"fill_bytes: {p.fill_bytes} requested but only {free} bytes are free")
    path = directory / f"{_FILL_PREFIX}{uuid.uuid4().hex[:12]}"
    # Create the (empty) file first so the lease can name it by inode: the revert then never deletes a file
    # that merely has the same name.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise DriverError(f"directory: cannot create a file in {p.directory!r}: {exc.strerror}") from None
    inode = os.fstat(fd).st_ino
    os.close(fd)
    entry = leased_revert(
        ctx,
        label=f"hostres: delete fill file {path}",
        driver="hostres",
        revert="remove_fill",
        args={"path": str(path), "inode": inode},
    )
    taken = await apply_or_revert(ctx, entry, _fill, size, path)
    after = os.statvfs(directory)
    result: dict[str, Any] = {
        "file": str(path),
        "filled_bytes": taken,
        "free_bytes": after.f_bavail * after.f_frsize,
    }
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        result["removed_after_s"] = p.duration_seconds
    return result


# --- file-descriptor exhaustion -------------------------------------------------------------------------------


@revert_recipe("hostres", "restore_nofile")
def _recipe_restore_nofile(args: dict[str, Any]) -> None:
    try:
        proc = psutil.Process(int(args["pid"]))
        if abs(proc.create_time() - float(args["started"])) > 1.0:
            return  # the pid was recycled: not our process
        current = proc.rlimit(psutil.RLIMIT_NOFILE)
        if list(current) != list(args["applied"]):
            return  # someone changed it since: theirs stands
        proc.rlimit(psutil.RLIMIT_NOFILE, tuple(args["previous"]))
    except psutil.NoSuchProcess:
        return  # the process is gone, and its limit with it


class FdParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pid: int = Field(ge=1, description="the process whose open-file limit is lowered")
    headroom: int = Field(
        default=0, ge=0, le=1_000_000, description="new files it may still open (0: every open() fails)"
    )
    duration_seconds: HoldSeconds = None


@action("hostres", "exhaust_fds", FdParams, fault_type="resource_exhaustion")
async def exhaust_fds(ctx: ActivityContext, p: FdParams) -> dict[str, Any]:
    """Lower a running process's RLIMIT_NOFILE to its open descriptors + ``headroom`` (prlimit), so its next
    open()/accept()/socket() fails with EMFILE. Rollback puts the old limit back. Needs the right to change
    the process's limits (same user raising back needs CAP_SYS_RESOURCE: run as root)."""
    with _process_errors(p.pid, "read the limits of"):
        proc = psutil.Process(p.pid)
        previous = proc.rlimit(psutil.RLIMIT_NOFILE)
        opened = proc.num_fds()
        started = proc.create_time()
    soft = opened + p.headroom
    applied = [soft, previous[1]]
    entry = leased_revert(
        ctx,
        label=f"hostres: restore RLIMIT_NOFILE {list(previous)} of pid {p.pid}",
        driver="hostres",
        revert="restore_nofile",
        args={"pid": p.pid, "started": started, "previous": list(previous), "applied": applied},
    )
    try:
        proc.rlimit(psutil.RLIMIT_NOFILE, (soft, previous[1]))
    except (psutil.Error, OSError, ValueError) as exc:
        from faultplane.drivers.leases import withdraw

        withdraw(ctx, entry)  # the limit did not change
        raise DriverError(f"pid: cannot lower the open-file limit of {p.pid}: {exc}") from None
    result: dict[str, Any] = {"pid": p.pid, "open_fds": opened, "limit": soft, "previous": list(previous)}
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        result["restored_after_s"] = p.duration_seconds
    return result


# --- clock skew (libfaketime) ---------------------------------------------------------------------------------


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.faultplane-{uuid.uuid4().hex[:6]}")
    tmp.write_text(text)
    os.replace(tmp, path)  # libfaketime re-reads the file: it must never see half a value


@revert_recipe("hostres", "restore_faketime")
def _recipe_restore_faketime(args: dict[str, Any]) -> None:
    path = Path(args["timestamp_file"])
    try:
        current = path.read_text()
    except FileNotFoundError:
        current = None
    if current is not None and current.strip() != args["applied"]:
        return  # someone set another time since the fault: theirs stands
    _write_atomic(path, args["previous"] if args["previous"] is not None else "+0\n")


class ClockSkewParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timestamp_file: str = Field(
        description="the FAKETIME_TIMESTAMP_FILE the target was started with (LD_PRELOAD=libfaketime.so.1, "
        "FAKETIME_NO_CACHE=1 or a short FAKETIME_CACHE_DURATION)"
    )
    offset_seconds: int = Field(
        ge=-315_360_000, le=315_360_000, description="how far the process's clock jumps (negative: back)"
    )
    duration_seconds: HoldSeconds = None


@action("hostres", "clock_skew", ClockSkewParams, fault_type="error")
async def clock_skew(ctx: ActivityContext, p: ClockSkewParams) -> dict[str, Any]:
    """Shift the clock of processes running under libfaketime by ``offset_seconds``, by writing their
    timestamp file; they see it at their next clock read (with FAKETIME_NO_CACHE=1). Rollback writes back
    what the file held (``+0`` if there was none). Other processes and the host clock are untouched."""
    path = Path(p.timestamp_file)
    if not path.parent.is_dir():
        raise DriverError(f"timestamp_file: directory {str(path.parent)!r} does not exist")
    if path.exists() and not path.is_file():
        raise DriverError(f"timestamp_file: {p.timestamp_file!r} is not a regular file")
    previous = path.read_text() if path.exists() else None
    applied = f"{p.offset_seconds:+d}"
    entry = leased_revert(
        ctx,
        label=f"hostres: restore faketime {p.timestamp_file}",
        driver="hostres",
        revert="restore_faketime",
        args={"timestamp_file": str(path), "previous": previous, "applied": applied},
    )
    try:
        _write_atomic(path, applied + "\n")
    except OSError as exc:
        from faultplane.drivers.leases import withdraw

        withdraw(ctx, entry)  # the file was not replaced
        raise DriverError(f"timestamp_file: cannot write {p.timestamp_file!r}: {exc.strerror}") from None
    result: dict[str, Any] = {
        "timestamp_file": str(path),
        "offset_seconds": p.offset_seconds,
        "previous": previous,
    }
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        result["restored_after_s"] = p.duration_seconds
    return result


# --- PID exhaustion (pids cgroup) -----------------------------------------------------------------------------

_CGROUP_PREFIX = "faultplane-pids-"


def _hierarchy(v1: str, v2: str) -> tuple[Path, int]:
    """Where a cgroup controller is mounted (``v1`` its cgroup v1 name, ``v2`` its unified-hierarchy name)
    and the cgroup version: a v1 hierarchy of its own wins, as the kernel then keeps it out of v2."""
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]
    for m in mounts:
        sep = m.index("-")
        fstype, opts = m[sep + 1], m[sep + 3].split(",") if len(m) > sep + 3 else []
        if fstype == "cgroup" and v1 in opts:
            return Path(m[4]), 1
    for m in mounts:
        sep = m.index("-")
        if m[sep + 1] == "cgroup2":
            root = Path(m[4])
            if v2 in (root / "cgroup.controllers").read_text().split():
                if v2 not in (root / "cgroup.subtree_control").read_text().split():
                    raise DriverError(
                        f"pid: enable the {v2} controller first (echo +{v2} > {root}/cgroup.subtree_control)"
                    )
                return root, 2
    raise DriverError(f"pid: this host has no {v1} cgroup controller (mount it, or use cgroup v2)")


def _pids_hierarchy() -> tuple[Path, int]:
    return _hierarchy("pids", "pids")


def _cgroup_of(pid: int, version: int, v1: str = "pids") -> str:
    """The cgroup path of ``pid`` relative to the hierarchy's root, from /proc/<pid>/cgroup."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (version == 1 and v1 in controllers.split(",")) or (version == 2 and controllers == ""):
            return path
    raise DriverError(f"pid: process {pid} is in no {v1} cgroup")


def _move(root: Path, cgroup: str, pids: list[int]) -> None:
    procs = root / cgroup.lstrip("/") / "cgroup.procs"
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
            procs.write_text(f"{pid}\n")


def _family(pid: int) -> list[psutil.Process]:
    """The process and its descendants, as a cgroup fault moves them."""
    with _process_errors(pid):
        proc = psutil.Process(pid)
        return [proc, *proc.children(recursive=True)]


async def _confine(
    ctx: ActivityContext,
    pid: int,
    family: list[psutil.Process],
    *,
    controller: tuple[str, str],
    prefix: str,
    what: str,
    label: str,
    configure: Callable[[Path, int], object],
    failure: str,
    report: dict[str, Any],
    duration_seconds: float | None,
) -> dict[str, Any]:
    """Move ``family`` into a fresh cgroup of Faultplane's that ``configure`` limits, with a lease that moves
    every member back to ``pid``'s own cgroup and removes ours, and hold it for ``duration_seconds``.
    ``controller`` is its (cgroup v1, v2) name; ``configure`` gets our cgroup's folder and the cgroup version.
    A failure reverts what was done and names the cause: ``what`` the cgroup in the mkdir error, ``failure``
    (``{cgroup}`` filled in) the configure/move error. The result names the members and the cgroup around the
    fault's own ``report``."""
    v1, v2 = controller
    root, version = _hierarchy(v1, v2)
    previous = _cgroup_of(pid, version, v1)
    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    try:
        (root / name).mkdir()
    except OSError as exc:
        raise DriverError(f"pid: cannot create {what} in {root}: {exc.strerror} (run as root)") from None
    entry = leased_revert(
        ctx,
        label=f"hostres: release pid {pid} from {label} {name}",
        driver="hostres",
        revert="release_pids",
        args={"root": str(root), "cgroup": name, "previous": previous},
    )
    try:
        configure(root / name, version)
        _move(root, name, [x.pid for x in family])
    except BaseException as exc:
        await revert_now(ctx, entry)
        if isinstance(exc, OSError):
            raise DriverError(f"pid: {failure.format(cgroup=root / name)}: {exc.strerror}") from None
        raise
    result: dict[str, Any] = {
        "pid": pid,
        "processes": [x.pid for x in family],
        **report,
        "cgroup": str(root / name),
    }
    if await hold_then_revert(ctx, entry, duration_seconds):
        result["restored_after_s"] = duration_seconds
    return result


@revert_recipe("hostres", "release_pids")
def _recipe_release_pids(args: dict[str, Any]) -> None:
    root, ours = Path(args["root"]), Path(args["root"]) / args["cgroup"]
    if not ours.is_dir():
        return  # already released
    for _ in range(100):  # a process forking right now may add one after we read the list
        pids = [int(x) for x in (ours / "cgroup.procs").read_text().split()]
        if not pids:
            break
        _move(root, args["previous"], pids)
    with contextlib.suppress(FileNotFoundError):
        ours.rmdir()


class PidsParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pid: int = Field(ge=1, description="the process (with its descendants) that may create no more tasks")
    headroom: int = Field(
        default=0, ge=0, le=100_000, description="new processes/threads it may still create (0: fork fails)"
    )
    duration_seconds: HoldSeconds = None


@action("hostres", "exhaust_pids", PidsParams, fault_type="resource_exhaustion")
async def exhaust_pids(ctx: ActivityContext, p: PidsParams) -> dict[str, Any]:
    """Move a process and its descendants into a pids cgroup of Faultplane's whose ``pids.max`` is the tasks
    they have now + ``headroom``: their next fork()/clone()/pthread_create() fails with EAGAIN, like a host out
    of PIDs, without touching other processes. Rollback moves them (and any child they made) back to their
    own cgroup and removes it. Needs root."""
    family = _family(p.pid)
    with _process_errors(p.pid):
        tasks = sum(x.num_threads() for x in family)
    limit = tasks + p.headroom
    return await _confine(
        ctx,
        p.pid,
        family,
        controller=("pids", "pids"),
        prefix=_CGROUP_PREFIX,
        what="a pids cgroup",
        label="pids cgroup",
        configure=lambda path, _version: (path / "pids.max").write_text(f"{limit}\n"),
        failure=f"cannot move process {p.pid} into {{cgroup}}",
        report={"tasks": tasks, "pids_max": limit},
        duration_seconds=p.duration_seconds,
    )


# --- IO throttling (blkio / io cgroup) ------------------------------------------------------------------------

_IO_CGROUP_PREFIX = "faultplane-io-"


def _disk_of(directory: Path) -> str:
    """MAJ:MIN of the whole disk holding ``directory`` (a partition's parent disk: throttling applies to
    disks)."""
    st = os.stat(directory)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    sys_dev = Path(f"/sys/dev/block/{dev}")
    if not sys_dev.exists():
        raise DriverError(
            f"directory: {str(directory)!r} is not on a block device (device {dev}: tmpfs, overlay or a "
            "network filesystem cannot be throttled here)"
        )
    if (sys_dev / "partition").exists():
        dev = (sys_dev.resolve().parent / "dev").read_text().strip()
    return dev


class ThrottleIoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pid: int = Field(ge=1, description="the process (with its descendants) whose disk IO is slowed")
    directory: str = Field(description="a directory on the disk to throttle (its whole disk is)")
    read_bytes_per_second: int | None = Field(default=None, ge=4096, le=10**12)
    write_bytes_per_second: int | None = Field(default=None, ge=4096, le=10**12)
    read_iops: int | None = Field(default=None, ge=1, le=10**7)
    write_iops: int | None = Field(default=None, ge=1, le=10**7)
    duration_seconds: HoldSeconds = None

    @model_validator(mode="after")
    def _some(self) -> ThrottleIoParams:
        if not any(
            (self.read_bytes_per_second, self.write_bytes_per_second, self.read_iops, self.write_iops)
        ):
            raise ValueError(
                "give read_bytes_per_second, write_bytes_per_second, read_iops and/or write_iops"
            )
        return self


@action("hostres", "throttle_io", ThrottleIoParams, fault_type="latency")
async def throttle_io(ctx: ActivityContext, p: ThrottleIoParams) -> dict[str, Any]:
    """Slow one process's disk IO: it and its descendants move into a blkio (cgroup v1) / io (v2) cgroup of
    Faultplane's whose throttle limits the bytes or operations per second on the disk holding ``directory``.
    Other processes keep full speed. Under cgroup v1 reads and direct/synchronous writes are throttled
    (buffered writeback is the flusher's); under v2 all of them. Rollback moves every member back and
    removes the cgroup. Needs root."""
    directory = Path(p.directory)
    if not directory.is_dir():
        raise DriverError(f"directory: {p.directory!r} is not a directory")
    disk = _disk_of(directory)
    family = _family(p.pid)
    limits = {
        "read_bps": p.read_bytes_per_second,
        "write_bps": p.write_bytes_per_second,
        "read_iops": p.read_iops,
        "write_iops": p.write_iops,
    }

    def configure(path: Path, version: int) -> None:
        if version == 1:
            for key, value in limits.items():
                if value is not None:
                    (path / f"blkio.throttle.{key}_device").write_text(f"{disk} {value}\n")
        else:
            v2 = {"read_bps": "rbps", "write_bps": "wbps", "read_iops": "riops", "write_iops": "wiops"}
            spec = " ".join(f"{v2[k]}={v}" for k, v in limits.items() if v is not None)
            (path / "io.max").write_text(f"{disk} {spec}\n")

    return await _confine(
        ctx,
        p.pid,
        family,
        controller=("blkio", "io"),
        prefix=_IO_CGROUP_PREFIX,
        what="a cgroup",
        label="IO-throttled cgroup",
        configure=configure,
        failure=f"cannot throttle IO of process {p.pid} on {disk}",
        report={"disk": disk, "limits": {k: v for k, v in limits.items() if v is not None}},
        duration_seconds=p.duration_seconds,
    )


# --- IO stress ------------------------------------------------------------------------------------------------

_IO_PREFIX = ".faultplane-io-"


@revert_recipe("hostres", "stop_io")
def _recipe_stop_io(args: dict[str, Any]) -> None:
    for pid, started in args["processes"]:
        try:
            proc = psutil.Process(int(pid))
            if abs(proc.create_time() - float(started)) < 0.01:
                proc.kill()
                proc.wait(5)
        except (psutil.NoSuchProcess, psutil.TimeoutExpired):
            pass
    for path in args["files"]:
        if Path(path).name.startswith(_IO_PREFIX):
            Path(path).unlink(missing_ok=True)


class IoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    directory: str = Field(description="a directory on the filesystem (and disk) to load")
    workers: int = Field(default=1, ge=1, le=64, description="writer processes, each with its own file")
    file_megabytes: int = Field(default=64, ge=1, le=65_536, description="each worker's file size")
    block_kilobytes: int = Field(default=1024, ge=4, le=65_536, description="size of each write")
    read: bool = Field(default=True, description="also read each file back, past the page cache")
    duration_seconds: float = Field(gt=0, le=3600, description="the stress stops by itself after this")
    wait: bool = Field(
        default=True, description="block until it ends; else return at once (rollback stops it)"
    )


def _spawn_io(p: IoParams, files: list[Path]) -> list[psutil.Popen]:
    procs = []
    for path in files:
        procs.append(
            psutil.Popen(
                [sys.executable, "-m", "faultplane.drivers.hostres", "io-worker", str(path),
                 str(p.file_megabytes), str(p.block_kilobytes), str(p.duration_seconds), str(int(p.read))],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        )  # fmt: skip
    return procs


@action("hostres", "stress_io", IoParams, fault_type="resource_exhaustion")
async def stress_io(ctx: ActivityContext, p: IoParams) -> dict[str, Any]:
    """Load a disk: ``workers`` processes each rewrite their own file (``.faultplane-io-*``) in ``directory``
    block by block with fdatasync, and read it back past the page cache, until ``duration_seconds``. Other
    IO on that disk queues behind theirs. Rollback (or the watchdog) kills the workers and deletes the files;
    the result gives the bytes the kernel counted for them (/proc/<pid>/io)."""
    directory = Path(p.directory)
    if not directory.is_dir():
        raise DriverError(f"directory: {p.directory!r} is not a directory")
    vfs = os.statvfs(directory)
    need = p.workers * p.file_megabytes * 1024 * 1024
    if need > vfs.f_bavail * vfs.f_frsize * 0.9:
        raise DriverError(
            f"file_megabytes: {p.workers} x {p.file_megabytes} MiB would take over 90% of the free space in "
            f"{p.directory!r}; lower it"
        )
    if not os.access(directory, os.W_OK):
        raise DriverError(f"directory: cannot write in {p.directory!r}")
    tag = uuid.uuid4().hex[:10]
    files = [directory / f"{_IO_PREFIX}{tag}-{i}" for i in range(p.workers)]
    procs = _spawn_io(p, files)
    entry = leased_revert(
        ctx,
        label=f"hostres: stop {p.workers} IO stress worker(s) in {p.directory}",
        driver="hostres",
        revert="stop_io",
        args={"processes": [[x.pid, x.create_time()] for x in procs], "files": [str(f) for f in files]},
    )
    result: dict[str, Any] = {"pids": [x.pid for x in procs], "files": [str(f) for f in files]}
    if not p.wait:
        return result
    counted = {"read_bytes": 0, "write_bytes": 0}

    def sample() -> None:
        for x in procs:
            with contextlib.suppress(psutil.Error):
                io = x.io_counters()
                counted[f"read_bytes_{x.pid}"] = io.read_bytes
                counted[f"write_bytes_{x.pid}"] = io.write_bytes

    try:
        failed = await wait_workers(procs, p.duration_seconds + 30, 0.2, sample)
        if failed:
            raise DriverError(f"directory: IO worker exited with {failed[0]}: {failed[1][-300:].strip()}")
    finally:
        await revert_now(ctx, entry)
    for kind in ("read_bytes", "write_bytes"):
        counted[kind] = sum(v for k, v in counted.items() if k.startswith(kind + "_"))
    return {**result, "read_bytes": counted["read_bytes"], "write_bytes": counted["write_bytes"]}


def _io_worker(path: str, megabytes: int, block_kb: int, seconds: float, read: bool) -> int:
    deadline = time.monotonic() + seconds
    block = os.urandom(block_kb * 1024)  # random: no filesystem compresses or dedups it away
    size = megabytes * 1024 * 1024
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while time.monotonic() < deadline:
            os.lseek(fd, 0, os.SEEK_SET)
            done = 0
            while done < size and time.monotonic() < deadline:
                done += os.write(fd, block[: min(len(block), size - done)])
                os.fdatasync(fd)  # each block reaches the device, not just the page cache
            if read:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # drop it from the cache: reads hit disk
                os.lseek(fd, 0, os.SEEK_SET)
                while time.monotonic() < deadline and os.read(fd, len(block)):
                    pass
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return 0


def _main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m faultplane.drivers.hostres")
    ap.add_argument("kind", choices=["io-worker"])
    ap.add_argument("path")
    ap.add_argument("megabytes", type=int)
    ap.add_argument("block_kb", type=int)
    ap.add_argument("seconds", type=float)
    ap.add_argument("read", type=int)
    a = ap.parse_args(argv)
    return _io_worker(a.path, a.megabytes, a.block_kb, min(a.seconds, 3600.0), bool(a.read))


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
