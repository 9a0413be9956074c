"""Host resource faults: a filesystem filled up, a process's file-descriptor limit lowered.

Both are undone by anyone who can read the lease: the fill is one file of Faultplane's (deleted by the revert,
and only if it is still the file we created), the limit is put back to what it was (only if it is still ours).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import anyio
import psutil
from pydantic import BaseModel, ConfigDict, Field, model_validator

from faultplane.drivers.base import ActivityContext, DriverError, action
from faultplane.drivers.leases import hold_then_revert, leased_revert, revert_now, revert_recipe

__all__: list[str] = []

_FILL_PREFIX = ".faultplane-fill-"


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
    duration_seconds: float | None = Field(default=None, gt=0, le=3600)

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
    try:
        taken = await anyio.to_thread.run_sync(_fill, size, path)
    except BaseException:
        await revert_now(ctx, entry)
        raise
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
    duration_seconds: float | None = Field(default=None, gt=0, le=3600)


@action("hostres", "exhaust_fds", FdParams, fault_type="resource_exhaustion")
async def exhaust_fds(ctx: ActivityContext, p: FdParams) -> dict[str, Any]:
    """Lower a running process's RLIMIT_NOFILE to its open descriptors + ``headroom`` (prlimit), so its next
    open()/accept()/socket() fails with EMFILE. Rollback puts the old limit back. Needs the right to change
    the process's limits (same user raising back needs CAP_SYS_RESOURCE: run as root)."""
    try:
        proc = psutil.Process(p.pid)
        previous = proc.rlimit(psutil.RLIMIT_NOFILE)
        opened = proc.num_fds()
        started = proc.create_time()
    except psutil.NoSuchProcess:
        raise DriverError(f"pid: no process {p.pid}") from None
    except psutil.AccessDenied:
        raise DriverError(f"pid: not allowed to read the limits of process {p.pid} (run as root)") from None
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
    duration_seconds: float | None = Field(default=None, gt=0, le=3600)


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
