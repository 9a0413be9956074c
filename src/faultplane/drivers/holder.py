"""Connection holders: a detached process that keeps a server's connection slots taken for an exhaustion fault.

Why a separate process: a fault that takes *every* slot leaves none for a revert that needs to connect
(``CLIENT KILL``, ``pg_terminate_backend``), and a non-superuser cannot use PostgreSQL's reserved slots either.
Ending the holder needs no connection at all: once the process is killed the kernel closes its sockets and the
server frees the slots. So the lease recipe is "kill the holder of this tag" (found by its command line, which
carries the fault's unique tag, so no other process is ever hit), which the lease watchdog can run when the
controller is dead or hung, and which works before the controller even learnt the holder's pid.

Protocol: ``python -m faultplane.drivers.holder KIND TAG`` reads ``{"target", "count", "leave_free"}`` as JSON
on stdin (the URL/DSN may carry a password: not on the command line), opens up to ``count`` connections
(``0`` = until the server refuses one), closes ``leave_free`` of them again, prints one JSON line
``{"held": n, "stopped_by": "..."}`` and then sleeps until it is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from typing import Any

import psutil

from faultplane.drivers.base import DriverError
from faultplane.drivers.sealing import mask_text

__all__ = ["hold_connections", "kill_holder", "spawn_holder"]

_FILL_CAP = 100_000
_SPAWN_TIMEOUT_S = 120.0


def _raise_fd_limit() -> None:
    # Filling a server with maxclients 10000 needs more descriptors than the usual soft limit of 1024.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard)
            )


def _open_redis(url: str, tag: str, n: int) -> tuple[list[Any], str]:
    import redis

    held: list[Any] = []
    while len(held) < n:
        try:
            # A single-connection client connects (and names itself) right here.
            c = redis.Redis.from_url(
                url,
                socket_connect_timeout=5,
                socket_timeout=5,
                single_connection_client=True,
                client_name=tag,
            )
        except redis.RedisError as exc:
            return held, str(exc)
        held.append(c)
    return held, "count reached"


def _open_postgres(dsn: str, tag: str, n: int, fill: bool) -> tuple[list[Any], str]:
    import psycopg

    held: list[Any] = []
    why = "count reached"
    while len(held) < n:
        try:
            held.append(psycopg.connect(dsn, connect_timeout=5, application_name=tag, autocommit=True))
        except psycopg.OperationalError as exc:
            why = str(exc).strip()
            break
    if fill and held:
        # A superuser DSN also gets the superuser-reserved slots; give those back so the fault looks like the
        # app's pool exhaustion ("remaining connection slots are reserved") and an operator can still get in.
        row = (
            held[0]
            .execute(
                "SELECT rolsuper, current_setting('superuser_reserved_connections')::int"
                " FROM pg_roles WHERE rolname = current_user"
            )
            .fetchone()
        )
        if row and row[0]:
            for c in held[len(held) - min(row[1], len(held)) :]:
                c.close()
            held = held[: len(held) - min(row[1], len(held))]
            why += f"; {row[1]} superuser-reserved slot(s) left free"
    return held, why


def _child(kind: str, tag: str) -> int:
    args = json.loads(sys.stdin.read())
    target, count, leave_free = str(args["target"]), int(args["count"]), int(args["leave_free"])
    # Killed by the lease's revert; SIGTERM/SIGINT end it the same way (the sockets close on exit).
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    _raise_fd_limit()
    n = count if count > 0 else _FILL_CAP
    try:
        if kind == "redis":
            held, why = _open_redis(target, tag, n)
        else:
            held, why = _open_postgres(target, tag, n, fill=count <= 0)
    except Exception as exc:  # a bad URL/DSN: report it, hold nothing
        print(json.dumps({"held": 0, "stopped_by": f"error: {exc}"}), flush=True)
        return 1
    opened = len(held)
    for c in held[opened - min(leave_free, opened) :]:
        with contextlib.suppress(Exception):
            c.close()
    held = held[: opened - min(leave_free, opened)]
    print(json.dumps({"held": len(held), "opened": opened, "stopped_by": why}), flush=True)
    sys.stdout.close()
    if not held:
        return 0  # nothing to hold
    while True:
        time.sleep(3600)


def spawn_holder(kind: str, target: str, tag: str, count: int | None, leave_free: int = 0) -> dict[str, Any]:
    """Start a holder and wait until it holds its connections; returns its report ``{"held", "stopped_by"}``.

    Blocking: call from a worker thread."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultplane.drivers.holder", kind, tag],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        # Its own session: a Ctrl-C aimed at the controller's terminal does not end the fault behind the
        # controller's back; the revert (or the lease watchdog) ends it.
        start_new_session=True,
        close_fds=True,
    )
    _CHILDREN[proc.pid] = proc
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps({"target": target, "count": count or 0, "leave_free": leave_free}))
    proc.stdin.close()
    line = _readline(proc, _SPAWN_TIMEOUT_S)
    proc.stdout.close()
    field_name = "dsn" if kind == "postgres" else "url"
    if not line:
        kill_holder(tag)
        raise NothingApplied(
            f"{field_name}: {kind}: the connection holder exited before holding any connection"
        )
    report: dict[str, Any] = json.loads(line)
    why = mask_text(str(report.get("stopped_by", "")))
    report["stopped_by"] = why
    if why.startswith("error:") or report.get("opened", 0) == 0:
        kill_holder(tag)
        raise NothingApplied(
            f"{field_name}: {kind}: cannot open a single connection: {why.removeprefix('error: ')}"
        )
    return report


class NothingApplied(DriverError):
    """The holder could not open any connection: the fault applied nothing, so it needs no revert."""


async def hold_connections(
    ctx: Any,
    kind: str,
    target: str,
    tag: str,
    p: Any,
    *,
    label: str,
    revert: str,
    revert_args: dict[str, Any],
) -> dict[str, Any]:
    """The exhaustion fault every driver shares: lease the revert first, start a holder of `p.connections`
    (`p.leave_free` closed again), and release it after `p.duration_seconds` when that is set. The driver's
    own `revert` recipe (`revert_args`) must end the holder of `tag`."""
    import anyio

    from faultplane.drivers.leases import hold_then_revert, leased_revert, revert_now, withdraw

    entry = leased_revert(ctx, label=label, driver=kind, revert=revert, args=revert_args)
    try:
        report = await anyio.to_thread.run_sync(spawn_holder, kind, target, tag, p.connections, p.leave_free)
    except NothingApplied:
        withdraw(ctx, entry)  # the holder is gone and held nothing: no lease left behind to "revert"
        raise
    except BaseException:
        await revert_now(ctx, entry)
        raise
    held, asked = int(report["held"]), p.connections
    result: dict[str, Any] = {
        "requested": asked,
        "held": held,
        "opened": report["opened"],
        "stopped_by": report["stopped_by"],
        # what was achieved against what was asked, in one line a journal reader sees
        "achieved": (
            f"held {held} of {asked} requested connections"
            + ("" if held >= asked else f" ({report['stopped_by']})")
            if asked
            else f"held {held} connections (every slot the server gave: {report['stopped_by']})"
        ),
        "shortfall": max(0, asked - held) if asked else 0,
    }
    if asked and held < asked and getattr(p, "require_all", False):
        await revert_now(ctx, entry)
        raise DriverError(
            f"connections: held only {held} of {asked} requested ({report['stopped_by']}); released them "
            "(require_all is set)"
        )
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        result["released_after_s"] = p.duration_seconds
    return result


def _readline(proc: subprocess.Popen[str], timeout: float) -> str:
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            return ""
    return proc.stdout.readline()


# Popen objects of holders this process started, so it can reap them (no zombies in a long-lived controller).
_CHILDREN: dict[int, subprocess.Popen[str]] = {}


def _holders(tag: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info.get("cmdline") or []
        if tag in cmd and "faultplane.drivers.holder" in cmd:
            found.append(p)
    return found


def kill_holder(tag: str, timeout: float = 10.0) -> int:
    """SIGKILL the holder(s) of ``tag`` and wait until they are gone (their sockets closed); how many."""
    procs = _holders(tag)
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    deadline = time.monotonic() + timeout
    for p in procs:
        child = _CHILDREN.pop(p.pid, None)
        if child is not None:
            child.wait(max(0.1, deadline - time.monotonic()))
            continue
        while True:
            try:
                # Not our child (the controller that started it is gone): as a zombie it has closed its sockets.
                if p.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            if time.monotonic() > deadline:
                raise DriverError(
                    f"connection holder pid {p.pid} did not exit within {timeout:.0f}s of SIGKILL"
                )
            time.sleep(0.01)
    return len(procs)


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2]))
