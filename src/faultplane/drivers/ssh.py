"""Remote faults over SSH (asyncssh): kill or suspend processes on another host, run a command; CPU/memory
stress, disk fill, service stop and packet drop on several hosts at once, with a blast radius over the hosts.

Processes are listed with ``ps`` on the remote host and matched here with a Python regex, so the SSH session's
own shell never matches its own pattern. Leases hold the connection parameters (host, port, user, key
paths, known_hosts, and a password sealed with the controller's key: see :mod:`faultplane.drivers.sealing`),
so the watchdog can revert a fault applied with password authentication too.
"""

from __future__ import annotations

import functools
import random
import re
import shlex
import uuid
from typing import Any, Literal, Self

import anyio
import asyncssh
from pydantic import BaseModel, ConfigDict, Field, model_validator

from faultplane.drivers.base import ActivityContext, DriverError, action, probe
from faultplane.drivers.blast import BlastRadius, select_targets
from faultplane.drivers.leases import hold_then_revert, leased_revert, revert_now, revert_recipe
from faultplane.drivers.params import HoldSeconds

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


async def _run(
    t: SshTarget, command: str, *, check: bool = True, stdin: str | None = None
) -> asyncssh.SSHCompletedProcess:
    async with await _connect(t) as conn:
        try:
            with anyio.fail_after(t.command_timeout_seconds):
                res = await conn.run(command, check=False, input=stdin)
        except TimeoutError:
            raise DriverError(
                f"{t.host}: `{command}` did not finish in {t.command_timeout_seconds:g}s"
            ) from None
    if check and res.exit_status != 0:
        raise DriverError(f"{t.host}: `{command}` exited {res.exit_status}: {str(res.stderr).strip()[-500:]}")
    return res


async def _undo(t: SshTarget, command: str) -> None:
    """A fault's revert command, run on its host: the lease's revert in this process."""
    await _run(t, command)


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


async def _run_on(
    conn: asyncssh.SSHClientConnection, t: SshTarget, command: str, stdin: str | None = None
) -> asyncssh.SSHCompletedProcess:
    try:
        with anyio.fail_after(t.command_timeout_seconds):
            return await conn.run(command, check=False, input=stdin)
    except TimeoutError:
        raise DriverError(
            f"{t.host}: `{command[:120]}` did not finish in {t.command_timeout_seconds:g}s"
        ) from None
    except (OSError, asyncssh.Error) as exc:
        raise DriverError(f"{t.host}: the SSH session broke: {_cause(t, exc)}") from None


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
        _revert_by_command(ctx, p, p.restart_command)
    pids = [pid for pid, _ in chosen]
    await _run(p, f"kill -s {p.signal} {' '.join(map(str, pids))}", check=False)
    return {"host": p.host, "signal": p.signal, "pids": pids, "commands": [c for _, c in chosen]}


class SuspendParams(ProcessParams):
    duration_seconds: HoldSeconds = None


def _lease_or_plain(
    ctx: ActivityContext, p: SshTarget, *, label: str, revert: str, args: dict[str, Any], fn: Any
) -> Any:
    return leased_revert(ctx, label=label, driver="ssh", revert=revert, args=args, fn=fn)


def _revert_by_command(ctx: ActivityContext, p: SshTarget, command: str) -> None:
    """Rollback (or the lease watchdog) runs `command` on the host."""
    _lease_or_plain(
        ctx,
        p,
        label=f"ssh {p.host}: {command}",
        revert="run",
        args={"target": p.conn_args(), "command": command},
        fn=lambda: _run(p, command),
    )


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
        _revert_by_command(ctx, p, p.revert_command)
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


# --- faults on several hosts ----------------------------------------------------------------------------------
#
# Each fault runs one command per chosen host and leases, per host, a revert command (idempotent, exit 0 when
# there is nothing left to undo), so a run that stops half-way reverts exactly the hosts it reached. What the
# fault starts or creates on a host carries a tag naming the run's fault and the host's index, and the revert
# finds it by that tag only.


class HostsParams(BlastRadius):
    model_config = ConfigDict(extra="forbid")
    hosts: list[SshTarget] = Field(min_length=1, max_length=1000, description="the candidate hosts")
    duration_seconds: HoldSeconds = Field(
        default=None, description="revert after this long; omit to hold until rollback"
    )


def _where(i: int, t: SshTarget) -> str:
    return f"hosts[{i}] ({t.username + '@' if t.username else ''}{t.host}:{t.port})"


def _grep_safe(tag: str) -> str:
    """A regex for ``tag`` that does not match its own text: pgrep/pkill in the revert's shell then never
    finds the shell that runs them (whose command line holds the pattern)."""
    return f"[{tag[0]}]{tag[1:]}"


async def _on_hosts(
    ctx: ActivityContext,
    p: HostsParams,
    kind: str,
    step: Any,
) -> dict[str, Any]:
    """Apply ``step(i, target, tag) -> (command, stdin, revert_command | None)`` on each chosen host: lease its
    revert, run the command, and on any failure revert the hosts done so far (this one too) and name the host.
    A step whose revert is None applied nothing there (no lease)."""
    indexed = list(enumerate(p.hosts))
    chosen = select_targets(indexed, count=p.count, percentage=p.percentage, rng=ctx.rng)
    run_tag = uuid.uuid4().hex[:8]
    entries = []
    done: list[dict[str, Any]] = []
    try:
        for i, t in chosen:
            tag = f"fp-{kind}-{run_tag}-{i}"
            command, stdin, revert_command = await step(i, t, tag)
            try:  # connect before leasing: a host that cannot be reached has nothing to revert
                conn = await _connect(t)
            except DriverError as exc:
                raise DriverError(f"{_where(i, t)}: {exc}") from None
            if revert_command is not None:
                entry = leased_revert(
                    ctx,
                    label=f"ssh {t.host}:{t.port}: undo {kind} ({tag})",
                    driver="ssh",
                    revert="run",
                    args={"target": t.conn_args(), "command": revert_command},
                    fn=functools.partial(_undo, t, revert_command),
                )
                entries.append(entry)
            try:
                res = await _run_on(conn, t, command, stdin)
            except DriverError as exc:
                raise DriverError(f"{_where(i, t)}: {exc}") from None
            finally:
                conn.close()
            if res.exit_status != 0:
                err = " ".join(str(res.stderr).split())[-300:]
                raise DriverError(f"{_where(i, t)}: {kind} failed (exit {res.exit_status}): {err}")
            done.append(
                {"host": f"{t.host}:{t.port}", "index": i, "tag": tag, "output": str(res.stdout).strip()}
            )
    except BaseException as exc:
        failed = []
        for entry in reversed(entries):
            try:
                await revert_now(ctx, entry)
            except Exception as rexc:  # the lease stays for the watchdog; the cause comes first
                failed.append(f"{entry.label}: {rexc}")
        if failed and isinstance(exc, DriverError):
            raise DriverError(
                f"{exc} (and reverting failed, left to the lease watchdog: {'; '.join(failed)})"
            ) from None
        raise
    result: dict[str, Any] = {"hosts": done, "candidates": len(p.hosts)}
    if p.duration_seconds:
        try:
            await anyio.sleep(p.duration_seconds)
        finally:
            for entry in reversed(entries):
                await revert_now(ctx, entry)
        result["reverted_after_s"] = p.duration_seconds
    return result


class StressParams(HostsParams):
    kind: Literal["cpu", "memory"] = Field(default="cpu", description="busy loops, or resident memory")
    workers: int = Field(default=1, ge=1, le=256, description="cpu: busy processes per host (one per core)")
    megabytes: int = Field(default=256, ge=1, le=1024 * 1024, description="memory: resident MiB per host")
    stop_after_seconds: float = Field(
        default=3600,
        gt=0,
        le=86_400,
        description="the stress ends by itself after this (coreutils timeout), even if nothing reverts it",
    )


@action("ssh", "stress", StressParams, fault_type="resource_exhaustion")
async def stress(ctx: ActivityContext, p: StressParams) -> dict[str, Any]:
    """CPU (``workers`` busy shell loops) or memory (``megabytes`` held resident by ``dd``) stress on each
    chosen host, each under ``timeout`` so it ends by itself. Rollback kills the stress's process groups, found
    by their tag. Needs sh, timeout, setsid, pgrep/pkill (coreutils, util-linux, procps) on the hosts."""
    secs = f"{p.stop_after_seconds:g}"

    async def step(i: int, t: SshTarget, tag: str) -> tuple[str, None, str]:
        if p.kind == "cpu":
            body = "while :; do :; done"
            count = p.workers
        else:  # dd reads its whole block into memory, then blocks writing to a pipe nobody reads
            body = f"dd if=/dev/zero bs={p.megabytes}M count=1 2>/dev/null | sleep {secs}"
            count = 1
        one = f"setsid nohup timeout {secs} sh -c {shlex.quote(body)} {tag} </dev/null >/dev/null 2>&1 &"
        command = (
            f"for n in $(seq {count}); do {one} done; sleep 0.2; pgrep -c -f {shlex.quote(_grep_safe(tag))}"
        )
        pattern = shlex.quote(_grep_safe(tag))
        revert = f'g=$(pgrep -d, -f {pattern}); [ -z "$g" ] || pkill -KILL -g "$g"; true'
        return command, None, revert

    return await _on_hosts(ctx, p, f"stress-{p.kind}", step)


class SshFillParams(HostsParams):
    directory: str = Field(description="a directory on the filesystem to fill, on each host")
    fill_bytes: int | None = Field(default=None, ge=1, description="take exactly this much")
    leave_free_bytes: int = Field(default=0, ge=0, description="else: fill until only this much is free")


@action("ssh", "fill_disk", SshFillParams, fault_type="resource_exhaustion")
async def fill_disk(ctx: ActivityContext, p: SshFillParams) -> dict[str, Any]:
    """On each chosen host, one file ``.faultplane-fill-<tag>`` in ``directory`` (fallocate, else zeros
    written until the disk is full) takes ``fill_bytes`` or all but ``leave_free_bytes``; writers get ENOSPC.
    Each host's output is the free bytes left. Rollback deletes the file."""
    d = shlex.quote(p.directory)

    async def step(i: int, t: SshTarget, tag: str) -> tuple[str, None, str]:
        f = shlex.quote(f"{p.directory.rstrip('/')}/.faultplane-fill-{tag}")
        size = (
            str(p.fill_bytes)
            if p.fill_bytes is not None
            else f"$(( $(df -P -B1 {d} | awk 'NR==2{{print $4}}') - {p.leave_free_bytes} ))"
        )
        command = (
            f"test -d {d} -a -w {d} || {{ echo 'directory: not a writable directory' >&2; exit 2; }}; "
            f"free=$(df -P -B1 {d} | awk 'NR==2{{print $4}}'); size={size}; "
            f'[ $size -le $free ] || {{ echo "fill_bytes: $size requested but only $free bytes are free" >&2; '
            "exit 3; }; "
            f"[ $size -gt 0 ] || {{ echo 'leave_free_bytes: nothing free to fill' >&2; exit 3; }}; "
            f"fallocate -l $size {f} 2>/dev/null || head -c $size /dev/zero > {f} 2>/dev/null; "
            f"test -f {f} || exit 4; df -P -B1 {d} | awk 'NR==2{{print $4}}'"
        )
        return command, None, f"rm -f {f}"

    return await _on_hosts(ctx, p, "fill", step)


_SERVICE = r"^[A-Za-z0-9@_.:-]{1,200}$"


class StopServiceParams(HostsParams):
    service: str = Field(pattern=_SERVICE, description="the service's name, e.g. nginx")
    stop_command: str = Field(default="systemctl stop {service}", description="{service} is replaced")
    start_command: str = Field(default="systemctl start {service}", description="run on rollback")
    status_command: str = Field(
        default="systemctl is-active --quiet {service}", description="exit 0 when the service runs"
    )


@action("ssh", "stop_service", StopServiceParams, fault_type="error")
async def stop_service(ctx: ActivityContext, p: StopServiceParams) -> dict[str, Any]:
    """Stop a service on each chosen host (``systemctl stop`` by default); rollback starts it again, on the
    hosts where it was running before (a service already down is left down and leaves no lease). The commands
    are templates: ``{service}`` is the (validated) name."""

    def fill(template: str) -> str:
        return template.replace("{service}", p.service)

    async def step(i: int, t: SshTarget, tag: str) -> tuple[str, None, str | None]:
        try:
            was = await _run(t, fill(p.status_command), check=False)
        except DriverError as exc:
            raise DriverError(f"{_where(i, t)}: {exc}") from None
        if was.exit_status != 0:
            return "echo not-running", None, None
        stop = f"{fill(p.stop_command)} && echo stopped"
        return stop, None, fill(p.start_command)

    return await _on_hosts(ctx, p, "stop", step)


class SshDropParams(HostsParams):
    direction: Literal["ingress", "egress", "both"] = "ingress"
    cidr: str | None = Field(default=None, description="remote peer network")
    port: int | None = Field(default=None, ge=1, le=65535, description="destination port")
    protocol: Literal["tcp", "udp", "any"] = "any"
    percent: float = Field(default=100, gt=0, le=100, description="share of matching packets dropped")
    reject: bool = False

    @model_validator(mode="after")
    def _scope(self) -> Self:
        if self.cidr is None and self.port is None:
            raise ValueError("give cidr and/or port: a fault that drops every packet of the host is refused")
        return self


@action("ssh", "drop_packets", SshDropParams, fault_type="network_partition")
async def drop_packets(ctx: ActivityContext, p: SshDropParams) -> dict[str, Any]:
    """On each chosen host, an nftables table of its own (``inet fp_<tag>``, loaded with ``nft -f -`` in one
    transaction) drops or rejects the matching packets, as :func:`hostnet.drop_packets` does locally.
    Rollback deletes the table. Needs root (CAP_NET_ADMIN) and nft on the hosts."""
    from faultplane.drivers import hostnet

    try:
        local = hostnet.DropParams(
            **p.model_dump(include={"direction", "cidr", "port", "protocol", "percent", "reject"})
        )
    except ValueError as exc:
        raise DriverError(f"cidr: {exc}") from None

    async def step(i: int, t: SshTarget, tag: str) -> tuple[str, str, str]:
        table = tag.replace("-", "_")
        script = hostnet._table_script(table, local)
        return "nft -f - && echo " + table, script, f"nft delete table inet {table} 2>/dev/null; true"

    return await _on_hosts(ctx, p, "drop", step)


_IFACE = r"^[A-Za-z0-9_.:@-]{1,15}$"
_NETNS = r"^[A-Za-z0-9_.-]{1,64}$"


class SshNetemParams(HostsParams):
    interface: str = Field(pattern=_IFACE, description="the hosts' interface whose outgoing packets suffer")
    netns: str | None = Field(default=None, pattern=_NETNS, description="a network namespace on the hosts")
    delay_ms: float = Field(default=0, ge=0, le=60_000)
    jitter_ms: float = Field(default=0, ge=0, le=60_000, description="+/- around delay_ms")
    loss_percent: float = Field(default=0, ge=0, le=100)
    corrupt_percent: float = Field(default=0, ge=0, le=100)
    duplicate_percent: float = Field(default=0, ge=0, le=100)
    reorder_percent: float = Field(default=0, ge=0, le=100)
    rate_kbit: int | None = Field(default=None, ge=8, le=100_000_000, description="bandwidth limit")

    @model_validator(mode="after")
    def _some(self) -> Self:
        from faultplane.drivers.hostnet import check_netem

        check_netem(self)
        return self


async def _qdisc_on_hosts(ctx: ActivityContext, p: Any, kind: str, qdisc: str) -> dict[str, Any]:
    prefix = f"ip netns exec {shlex.quote(p.netns)} " if p.netns else ""
    dev = shlex.quote(p.interface)

    async def step(i: int, t: SshTarget, tag: str) -> tuple[str, None, str]:
        # A handle of this fault's own: the revert removes the root qdisc only while it is this one, so the
        # revert of an `add` that failed (the interface had a root qdisc) never removes someone else's.
        handle = f"{random.randrange(0x1000, 0xF000):x}:"
        taken = (
            f"{p.interface} already has a root qdisc that is not this fault's; Faultplane does not replace it"
        )
        command = (
            f"out=$({prefix}tc qdisc add dev {dev} root handle {handle} {qdisc} 2>&1) || "
            f'{{ case "$out" in *REPLACE*|*Exclusivity*|*exists*) echo {shlex.quote(taken)} >&2;; '
            f'*) echo "$out" >&2;; esac; exit 2; }}; echo {handle}'
        )
        revert = (
            f"if {prefix}tc qdisc show dev {dev} 2>/dev/null | grep -q '^qdisc {kind} {handle} root'; "
            f"then {prefix}tc qdisc del dev {dev} root; fi"
        )
        return command, None, revert

    return await _on_hosts(ctx, p, kind, step)


@action("ssh", "netem", SshNetemParams, fault_type="latency")
async def netem(ctx: ActivityContext, p: SshNetemParams) -> dict[str, Any]:
    """On each chosen host, a root netem qdisc with a handle of the fault's own on ``interface``: delay
    with jitter, loss, corruption, duplication, reordering and/or a bandwidth limit of its outgoing packets,
    as :func:`hostnet.netem` does locally. Refused on a host whose interface already has a root qdisc.
    Rollback deletes the qdisc only while it is still this fault's. Needs root, tc and sch_netem."""
    from faultplane.drivers.hostnet import netem_spec

    return await _qdisc_on_hosts(ctx, p, "netem", "netem " + " ".join(netem_spec(p)))


class SshBandwidthParams(HostsParams):
    interface: str = Field(
        pattern=_IFACE, description="the hosts' interface whose outgoing traffic is shaped"
    )
    netns: str | None = Field(default=None, pattern=_NETNS, description="a network namespace on the hosts")
    rate_kbit: int = Field(ge=8, le=100_000_000, description="outgoing rate limit in kbit/s")
    burst_bytes: int = Field(default=16_384, ge=1_600, le=100_000_000, description="token bucket size")
    latency_ms: int = Field(default=100, ge=1, le=60_000, description="longest a packet may queue")


@action("ssh", "limit_bandwidth", SshBandwidthParams, fault_type="latency")
async def limit_bandwidth(ctx: ActivityContext, p: SshBandwidthParams) -> dict[str, Any]:
    """On each chosen host, shape ``interface``'s outgoing traffic to ``rate_kbit`` with a root tbf qdisc of
    the fault's own (as :func:`hostnet.limit_bandwidth` does locally); rollback deletes it while it is still
    this fault's. Needs root and tc."""
    qdisc = f"tbf rate {p.rate_kbit}kbit burst {p.burst_bytes} latency {p.latency_ms}ms"
    return await _qdisc_on_hosts(ctx, p, "tbf", qdisc)
