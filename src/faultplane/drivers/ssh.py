"""Remote process faults over SSH (asyncssh): kill or suspend processes on another host, run a command.

Processes are listed with ``ps`` on the remote host and matched here with a Python regex, so the SSH session's
own shell never matches its own pattern. Leases hold the connection parameters (host, port, user, key
paths, known_hosts, and a password sealed with the controller's key: see :mod:`faultplane.drivers.sealing`),
so the watchdog can revert a fault applied with password authentication too.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Literal, Self

import anyio
import asyncssh
from pydantic import BaseModel, ConfigDict, Field, model_validator

from faultplane.drivers.base import ActivityContext, DriverError, action, probe
from faultplane.drivers.blast import BlastRadius, select_targets
from faultplane.drivers.leases import hold_then_revert, leased_revert, revert_recipe

__all__ = ["SshTarget"]

_CONNECT_TIMEOUT_S = 10.0


class SshTarget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    host: str
    port: int = Field(default=22, ge=1, le=65535)
    username: str | None = Field(default=None, description="default: the local user")
    client_keys: list[str] | None = Field(
        default=None, description="private key paths (default: ~/.ssh keys)"
    )
    password: str | None = Field(default=None, description="password auth (then faults are not leased)")
    known_hosts: str | None = Field(
        default=None, description="known_hosts file (default: ~/.ssh/known_hosts)"
    )
    insecure_no_host_check: bool = Field(
        default=False, description="skip host key verification (test rigs only)"
    )
    command_timeout_seconds: float = Field(default=30, gt=0, le=3600)
    connect_timeout_seconds: float = Field(
        default=_CONNECT_TIMEOUT_S, gt=0, le=300, description="give up on a host that does not answer"
    )

    def conn_args(self) -> dict[str, Any]:
        """The connection parameters a lease keeps; the password is sealed by the lease (see sealing.py)."""
        return {k: getattr(self, k) for k in SshTarget.model_fields}


async def _connect(t: SshTarget) -> asyncssh.SSHClientConnection:
    kwargs: dict[str, Any] = {"port": t.port, "connect_timeout": t.connect_timeout_seconds}
    if t.username:
        kwargs["username"] = t.username
    if t.client_keys is not None:
        kwargs["client_keys"] = t.client_keys
    if t.password is not None:
        kwargs["password"] = t.password
    if t.insecure_no_host_check:
        kwargs["known_hosts"] = None
    elif t.known_hosts is not None:
        kwargs["known_hosts"] = t.known_hosts
    try:
        return await asyncssh.connect(t.host, **kwargs)
    except (OSError, asyncssh.Error) as exc:
        raise DriverError(
            f"host: cannot open SSH to {t.username or ''}@{t.host}:{t.port}: {_cause(t, exc)}"
        ) from None


def _cause(t: SshTarget, exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return (
            f"no SSH handshake within {t.connect_timeout_seconds:g}s (the port accepts connections but sends "
            "no SSH banner: is sshd running there?)"
        )
    if isinstance(exc, asyncssh.PermissionDenied):
        return "authentication refused (check username, client_keys or password)"
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return f"host key not verifiable ({exc}); add it to known_hosts"
    text = str(exc).strip()
    return text or type(exc).__name__


async def _run(t: SshTarget, command: str, *, check: bool = True) -> asyncssh.SSHCompletedProcess:
    async with await _connect(t) as conn:
        try:
            with anyio.fail_after(t.command_timeout_seconds):
                res = await conn.run(command, check=False)
        except TimeoutError:
            raise DriverError(
                f"{t.host}: `{command}` did not finish in {t.command_timeout_seconds:g}s"
            ) from None
    if check and res.exit_status != 0:
        raise DriverError(f"{t.host}: `{command}` exited {res.exit_status}: {str(res.stderr).strip()[-500:]}")
    return res


async def _remote_processes(t: SshTarget, pattern: str) -> list[tuple[int, str]]:
    # `exec` replaces the shell with ps, so the one pid printed by `echo $$` is both: skip it.
    res = await _run(t, "echo $$; exec ps -eo pid=,args=")
    lines = str(res.stdout).splitlines()
    own = int(lines[0].strip())
    rx = re.compile(pattern)
    out = []
    for line in lines[1:]:
        pid_s, _, args = line.strip().partition(" ")
        if not pid_s.isdigit() or int(pid_s) == own:
            continue
        if rx.search(args.strip()):
            out.append((int(pid_s), args.strip()))
    return out


def _run_sync(args: dict[str, Any], command: str) -> None:
    target = SshTarget(**args)
    anyio.run(_run, target, command)


@revert_recipe("ssh", "run")
def _recipe_run(args: dict[str, Any]) -> None:
    _run_sync(args["target"], args["command"])


@revert_recipe("ssh", "signal")
def _recipe_signal(args: dict[str, Any]) -> None:
    async def go() -> None:
        t = SshTarget(**args["target"])
        alive = {pid for pid, _ in await _remote_processes(t, args["pattern"])}
        pids = [p for p in args["pids"] if p in alive]  # a pid that no longer matches is not ours to signal
        if pids:
            await _run(t, f"kill -s {args['signal']} {' '.join(map(str, pids))}", check=False)

    anyio.run(go)


class ProcessParams(SshTarget, BlastRadius):
    pattern: str = Field(description="Python regex searched in each remote process's command line")

    @model_validator(mode="after")
    def _check_pattern(self) -> Self:
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ValueError(f"pattern is not a valid regex: {exc}") from None
        return self


async def _select(ctx: ActivityContext, p: ProcessParams) -> list[tuple[int, str]]:
    procs = await _remote_processes(p, p.pattern)
    if not procs:
        raise DriverError(f"pattern: no process on {p.host} matches {p.pattern!r}")
    return select_targets(procs, count=p.count, percentage=p.percentage, rng=ctx.rng)


class KillParams(ProcessParams):
    signal: Literal["KILL", "TERM", "INT", "HUP", "QUIT"] = "KILL"
    restart_command: str | None = Field(default=None, description="remote shell command run on rollback")


@action("ssh", "kill_process", KillParams, fault_type="error")
async def kill_process(ctx: ActivityContext, p: KillParams) -> dict[str, Any]:
    """Signal matching remote processes (default SIGKILL; blast radius: count or percentage).
    Rollback runs restart_command on the host, if given."""
    chosen = await _select(ctx, p)
    if p.restart_command:
        _lease_or_plain(
            ctx,
            p,
            label=f"ssh {p.host}: {p.restart_command}",
            revert="run",
            args={"target": p.conn_args(), "command": p.restart_command},
            fn=lambda: _run(p, p.restart_command or "true"),
        )
    pids = [pid for pid, _ in chosen]
    await _run(p, f"kill -s {p.signal} {' '.join(map(str, pids))}", check=False)
    return {"host": p.host, "signal": p.signal, "pids": pids, "commands": [c for _, c in chosen]}


class SuspendParams(ProcessParams):
    duration_seconds: float | None = Field(default=None, gt=0, le=3600)


def _lease_or_plain(
    ctx: ActivityContext, p: SshTarget, *, label: str, revert: str, args: dict[str, Any], fn: Any
) -> Any:
    return leased_revert(ctx, label=label, driver="ssh", revert=revert, args=args, fn=fn)


@action("ssh", "suspend_process", SuspendParams, fault_type="timeout")
async def suspend_process(ctx: ActivityContext, p: SuspendParams) -> dict[str, Any]:
    """SIGSTOP matching remote processes; rollback (or the lease watchdog) sends SIGCONT."""
    chosen = await _select(ctx, p)
    pids = [pid for pid, _ in chosen]
    args = {"target": p.conn_args(), "pattern": p.pattern, "pids": pids, "signal": "CONT"}
    entry = _lease_or_plain(
        ctx,
        p,
        label=f"ssh {p.host}: resume {pids}",
        revert="signal",
        args=args,
        fn=lambda: _run(p, f"kill -s CONT {' '.join(map(str, pids))}", check=False),
    )
    await _run(p, f"kill -s STOP {' '.join(map(str, pids))}", check=False)
    result: dict[str, Any] = {"host": p.host, "suspended": pids}
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        result["resumed_after_s"] = p.duration_seconds
    return result


class RunParams(SshTarget):
    command: str = Field(description="remote shell command")
    revert_command: str | None = Field(default=None, description="remote shell command run on rollback")


@action("ssh", "run", RunParams)
async def run(ctx: ActivityContext, p: RunParams) -> dict[str, Any]:
    """Run a remote command (non-zero exit fails the action); rollback runs revert_command, if given."""
    if p.revert_command:
        _lease_or_plain(
            ctx,
            p,
            label=f"ssh {p.host}: {p.revert_command}",
            revert="run",
            args={"target": p.conn_args(), "command": p.revert_command},
            fn=lambda: _run(p, p.revert_command or "true"),
        )
    res = await _run(p, p.command)
    return {
        "exit_status": res.exit_status,
        "stdout": str(res.stdout)[-65536:],
        "stderr": str(res.stderr)[-8192:],
    }


@probe("ssh", "process_count", ProcessParams)
async def process_count(ctx: ActivityContext, p: ProcessParams) -> int:
    """How many remote processes match ``pattern``."""
    return len(await _remote_processes(p, p.pattern))


class CommandProbeParams(SshTarget):
    command: str


@probe("ssh", "command", CommandProbeParams)
async def command(ctx: ActivityContext, p: CommandProbeParams) -> dict[str, Any]:
    """Run a remote command and return exit status, stdout and stderr (a non-zero exit is a value, not an
    error)."""
    res = await _run(p, p.command, check=False)
    return {"exit_status": res.exit_status, "stdout": str(res.stdout), "stderr": str(res.stderr)}


def quote(value: str) -> str:
    """Shell-quote a value for a remote command."""
    return shlex.quote(value)
