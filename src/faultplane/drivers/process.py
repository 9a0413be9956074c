"""Process faults on this host: kill, terminate or suspend matching processes; CPU and memory stress.

Targets are selected by exact name, pid(s) or a regex over the command line, then narrowed to the blast
radius (a count or a percentage) with the run's seeded RNG. The controller itself and its ancestors are
never targets. Reverts identify a process by (pid, start time), so a recycled pid is never signalled.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from typing import Any, Self

import anyio
import psutil
from pydantic import BaseModel, ConfigDict, Field, model_validator

from faultplane.drivers.base import ActivityContext, DriverError, action, probe
from faultplane.drivers.blast import BlastRadius, select_targets
from faultplane.drivers.leases import hold_then_revert, leased_revert, revert_now, revert_recipe
from faultplane.drivers.workers import wait_workers

__all__ = ["ProcessSelector", "find_processes"]

MAX_STRESS_S = 3600.0


class ProcessSelector(BlastRadius):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, description="exact process name (as in `ps -o comm`)")
    pid: int | None = Field(default=None, ge=1, description="a single pid")
    pids: list[int] | None = Field(default=None, description="several pids")
    cmdline_pattern: str | None = Field(
        default=None, description="Python regex searched in the space-joined command line"
    )

    @model_validator(mode="after")
    def _some_selector(self) -> Self:
        if not (self.name or self.pid or self.pids or self.cmdline_pattern):
            raise ValueError("select processes with at least one of name, pid, pids or cmdline_pattern")
        if self.cmdline_pattern:
            try:
                re.compile(self.cmdline_pattern)
            except re.error as exc:
                raise ValueError(f"cmdline_pattern is not a valid regex: {exc}") from None
        return self


def _protected_pids() -> set[int]:
    """This process and its ancestors: killing them would kill the run that must revert the fault."""
    pids = {os.getpid()}
    try:
        for p in psutil.Process().parents():
            pids.add(p.pid)
    except psutil.Error:
        pass
    return pids


def find_processes(sel: ProcessSelector) -> list[psutil.Process]:
    """Every live process matching all the given criteria, by pid order."""
    protected = _protected_pids()
    wanted_pids = set(sel.pids or []) | ({sel.pid} if sel.pid else set())
    pattern = re.compile(sel.cmdline_pattern) if sel.cmdline_pattern else None
    out = []
    for proc in psutil.process_iter(["pid", "name", "cmdline", "status"]):
        info = proc.info
        if info["pid"] in protected or info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if wanted_pids and info["pid"] not in wanted_pids:
            continue
        if sel.name and info["name"] != sel.name:
            continue
        if pattern is not None and not pattern.search(" ".join(info["cmdline"] or [])):
            continue
        out.append(proc)
    return sorted(out, key=lambda p: p.pid)


def _identity(proc: psutil.Process) -> list[float]:
    return [proc.pid, proc.create_time()]


def _same_process(ident: list[float]) -> psutil.Process | None:
    pid, created = int(ident[0]), float(ident[1])
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - created) > 0.01:
            return None
        return proc
    except psutil.Error:
        return None


def _select(ctx: ActivityContext, sel: ProcessSelector) -> list[psutil.Process]:
    matches = find_processes(sel)
    if not matches:
        raise DriverError(f"no process matches {sel.model_dump(exclude_none=True)}")
    return select_targets(matches, count=sel.count, percentage=sel.percentage, rng=ctx.rng, what="processes")


# --- reverts (recipes run by the controller, the watchdog, or `faultplane drivers leases reap`) ---


@revert_recipe("process", "resume")
def _resume(args: dict[str, Any]) -> None:
    for ident in args["processes"]:
        proc = _same_process(ident)
        if proc is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.resume()


@revert_recipe("process", "restart")
def _restart(args: dict[str, Any]) -> None:
    subprocess.Popen(
        args["command"],
        cwd=args.get("cwd"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@revert_recipe("process", "kill_processes")
def _kill_processes(args: dict[str, Any]) -> None:
    for ident in args["processes"]:
        proc = _same_process(ident)
        if proc is not None:
            try:
                proc.kill()
                proc.wait(5)
            except (psutil.NoSuchProcess, psutil.TimeoutExpired):
                pass


# --- actions ---


class KillParams(ProcessSelector):
    restart_command: list[str] | None = Field(
        default=None,
        description="argv run (once, detached) on rollback to bring the service back, e.g. ['systemctl','start','x']",
    )
    restart_cwd: str | None = None


def _signal_action(ctx: ActivityContext, p: KillParams, sig: signal.Signals) -> dict[str, Any]:
    targets = _select(ctx, p)
    if p.restart_command:
        leased_revert(
            ctx,
            label=f"process: restart `{shlex.join(p.restart_command)}`",
            driver="process",
            revert="restart",
            args={"command": p.restart_command, "cwd": p.restart_cwd},
        )
    done = []
    for proc in targets:
        try:
            proc.send_signal(sig)
            done.append({"pid": proc.pid, "name": proc.name()})
        except psutil.NoSuchProcess:
            continue
    gone, _alive = psutil.wait_procs(targets, timeout=5 if sig == signal.SIGKILL else 0.5)
    return {"signal": sig.name, "processes": done, "exited": sorted(g.pid for g in gone)}


@action("process", "kill", KillParams, fault_type="error")
def kill(ctx: ActivityContext, p: KillParams) -> dict[str, Any]:
    """SIGKILL matching processes (blast radius: count or percentage). Rollback runs restart_command."""
    return _signal_action(ctx, p, signal.SIGKILL)


@action("process", "terminate", KillParams, fault_type="error")
def terminate(ctx: ActivityContext, p: KillParams) -> dict[str, Any]:
    """SIGTERM matching processes (blast radius: count or percentage). Rollback runs restart_command."""
    return _signal_action(ctx, p, signal.SIGTERM)


class SuspendParams(ProcessSelector):
    duration_seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_STRESS_S,
        description="resume after this long; omit to stay suspended until rollback",
    )


@action("process", "suspend", SuspendParams, fault_type="timeout")
async def suspend(ctx: ActivityContext, p: SuspendParams) -> dict[str, Any]:
    """SIGSTOP matching processes; rollback (or the lease watchdog) sends SIGCONT."""
    targets = await anyio.to_thread.run_sync(_select, ctx, p)
    idents = [_identity(t) for t in targets]
    entry = leased_revert(
        ctx,
        label=f"process: resume pids {[t.pid for t in targets]}",
        driver="process",
        revert="resume",
        args={"processes": idents},
    )
    for proc in targets:
        try:
            proc.suspend()
        except psutil.NoSuchProcess:
            continue
    result = {"suspended": [t.pid for t in targets]}
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        result["resumed_after_s"] = p.duration_seconds  # type: ignore[assignment]
    return result


class StressCpuParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workers: int = Field(default=1, ge=1, le=256, description="busy processes; one saturates one core")
    duration_seconds: float = Field(
        gt=0, le=MAX_STRESS_S, description="the stress stops by itself after this"
    )
    wait: bool = Field(default=True, description="block until the stress ends; else return at once")


class StressMemoryParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    megabytes: int = Field(ge=1, le=1024 * 1024, description="resident memory to allocate and touch")
    duration_seconds: float = Field(gt=0, le=MAX_STRESS_S, description="the memory is freed after this")
    wait: bool = Field(default=True, description="block until the stress ends; else return at once")


def _spawn_stress(kind: str, amount: str, seconds: float, n: int) -> list[psutil.Popen]:
    procs = []
    for _ in range(n):
        procs.append(
            psutil.Popen(
                [sys.executable, "-m", "faultplane.drivers.process", kind, amount, str(seconds)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        )
    return procs


async def _run_stress(ctx: ActivityContext, label: str, procs: list[psutil.Popen], p: Any) -> dict[str, Any]:
    entry = leased_revert(
        ctx,
        label=label,
        driver="process",
        revert="kill_processes",
        args={"processes": [_identity(pr) for pr in procs]},
    )
    result: dict[str, Any] = {"pids": [pr.pid for pr in procs], "duration_seconds": p.duration_seconds}
    if not p.wait:
        return result
    try:
        failed = await wait_workers(procs, p.duration_seconds + 10, 0.05)
        if failed:
            raise DriverError(f"{label}: worker exited with {failed[0]}: {failed[1][-500:]}")
    finally:
        await revert_now(ctx, entry)
    return result


@action("process", "stress_cpu", StressCpuParams, fault_type="resource_exhaustion")
async def stress_cpu(ctx: ActivityContext, p: StressCpuParams) -> dict[str, Any]:
    """Burn CPU with ``workers`` busy processes for a bounded duration."""
    # Apply the lease before the processes run: spawn, then lease immediately (they self-stop anyway).
    procs = _spawn_stress("stress-cpu", "0", p.duration_seconds, p.workers)
    return await _run_stress(ctx, f"process: stop {p.workers} cpu stress worker(s)", procs, p)


@action("process", "stress_memory", StressMemoryParams, fault_type="resource_exhaustion")
async def stress_memory(ctx: ActivityContext, p: StressMemoryParams) -> dict[str, Any]:
    """Hold ``megabytes`` of resident memory in a helper process for a bounded duration."""
    avail_mb = psutil.virtual_memory().available // (1024 * 1024)
    if p.megabytes > avail_mb * 0.9:
        raise DriverError(
            f"process.stress_memory: megabytes={p.megabytes} exceeds 90% of available memory "
            f"({avail_mb} MiB); lower it"
        )
    procs = _spawn_stress("stress-memory", str(p.megabytes), p.duration_seconds, 1)
    return await _run_stress(ctx, f"process: free {p.megabytes} MiB memory stress", procs, p)


# --- probes ---


@probe("process", "count", ProcessSelector)
def count(ctx: ActivityContext, p: ProcessSelector) -> int:
    """How many processes match (the blast radius fields are ignored)."""
    return len(find_processes(p))


@probe("process", "list", ProcessSelector)
def list_processes(ctx: ActivityContext, p: ProcessSelector) -> list[dict[str, Any]]:
    """Matching processes with pid, name and status (``stopped`` when suspended)."""
    out = []
    for proc in find_processes(p):
        try:
            out.append({"pid": proc.pid, "name": proc.name(), "status": proc.status()})
        except psutil.Error:
            continue
    return out


# --- stress workers: `python -m faultplane.drivers.process stress-cpu 0 SECONDS` ---


def _worker(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["stress-cpu", "stress-memory"])
    ap.add_argument("amount", type=int)
    ap.add_argument("seconds", type=float)
    a = ap.parse_args(argv)
    deadline = time.monotonic() + min(a.seconds, MAX_STRESS_S)
    if a.kind == "stress-cpu":
        x = 0
        while time.monotonic() < deadline:
            for _ in range(10000):
                x += 1
        return 0
    block = bytearray(a.amount * 1024 * 1024)
    for i in range(0, len(block), 4096):  # touch every page so it is resident
        block[i] = 1
    while time.monotonic() < deadline:
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    return 0 if block[0] == 1 else 1


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1:]))
