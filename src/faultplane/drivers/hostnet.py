"""Host network faults without a proxy: packets dropped or rejected by nftables, bandwidth shaped by tc tbf, and
delay, jitter, loss, corruption, duplication and reordering by tc netem or, on kernels without sch_netem, by
Faultplane's userspace NFQUEUE engine (:mod:`faultplane.drivers.nfqueue`), in a network namespace or the
host's own.

Each fault is one kernel object named after its lease (an nftables table ``inet fp_<id>``, a root qdisc with
Faultplane's handle, or an iptables mangle chain ``fpq_<id>`` plus the helper process reading its queue), so
the revert removes exactly that object and nothing an operator set up, and a revert of an object that is
already gone is a no-op. nftables and iptables-restore apply a table or chain in one transaction: a fault is
either fully in place or not at all. Needs CAP_NET_ADMIN (root) in the namespace."""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any, Literal, Self

import anyio
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from faultplane.drivers.base import ActivityContext, DriverError, action, probe
from faultplane.drivers.leases import hold_then_revert, leased_revert, revert_now, revert_recipe, withdraw
from faultplane.drivers.params import HoldSeconds

__all__: list[str] = []

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_IFACE = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")
_TIMEOUT_S = 10.0
# Faultplane's qdisc handles: the revert deletes a root qdisc only when it carries one of these.
_HANDLES = {"tbf": "fa17:", "netem": "fa18:"}


class _Where(BaseModel):
    model_config = ConfigDict(extra="forbid")
    netns: str | None = Field(
        default=None, description="network namespace (`ip netns list`); omit for the host's own (careful)"
    )

    @field_validator("netns")
    @classmethod
    def _ns(cls, v: str | None) -> str | None:
        if v is not None and not _NAME.match(v):
            raise ValueError("a namespace name of letters, digits, '_', '.', '-' (as `ip netns add` takes)")
        return v


def _run(netns: str | None, argv: list[str], *, stdin: str | None = None, check: bool = True) -> str:
    exe = shutil.which(argv[0])
    if exe is None:
        raise DriverError(f"{argv[0]}: not installed (apt-get install -y iproute2 nftables)")
    if netns is not None and not Path(f"/run/netns/{netns}").exists():
        raise DriverError(f"netns: no network namespace {netns!r} (see `ip netns list`)")
    cmd = (["ip", "netns", "exec", netns] if netns else []) + [exe, *argv[1:]]
    try:
        res = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise DriverError(f"{argv[0]}: `{' '.join(argv)}` did not finish in {_TIMEOUT_S:g}s") from None
    if check and res.returncode != 0:
        err = " ".join(res.stderr.split())[:400]
        if "Operation not permitted" in err:
            err += " (needs CAP_NET_ADMIN: run as root)"
        where = f" in netns {netns}" if netns else ""
        raise DriverError(f"{argv[0]}{where}: `{' '.join(argv[1:])[:120]}` failed: {err}")
    return res.stdout


# --- nftables: drop / reject ----------------------------------------------------------------------------------


@revert_recipe("hostnet", "delete_table")
def _recipe_delete_table(args: dict[str, Any]) -> None:
    out = _run(args.get("netns"), ["nft", "delete", "table", "inet", args["table"]], check=False)
    del out  # an absent table (already reverted, namespace re-created) is the state we want


class DropParams(_Where):
    direction: Literal["ingress", "egress", "both"] = Field(
        default="ingress", description="packets arriving (input hook), leaving (output hook), or both"
    )
    cidr: str | None = Field(
        default=None, description="remote peer network: source on ingress, destination on egress"
    )
    port: int | None = Field(default=None, ge=1, le=65535, description="destination port of the packets")
    protocol: Literal["tcp", "udp", "any"] = Field(
        default="any", description="tcp, udp or any (with a port: both)"
    )
    percent: float = Field(
        default=100, gt=0, le=100, description="share of matching packets dropped (100 = blackhole)"
    )
    reject: bool = Field(
        default=False, description="answer with a TCP reset / ICMP unreachable instead of a silent drop"
    )
    duration_seconds: HoldSeconds = None

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            return str(ipaddress.ip_network(v, strict=False))
        except ValueError as exc:
            raise ValueError(f"not an IP network like 10.0.0.0/8 or 2001:db8::/32: {exc}") from None

    @model_validator(mode="after")
    def _scope(self) -> Self:
        if self.cidr is None and self.port is None:
            raise ValueError("give cidr and/or port: a fault that drops every packet of the host is refused")
        return self


def _rule(p: DropParams, hook: str) -> str:
    parts: list[str] = []
    if p.cidr is not None:
        fam = "ip6" if ipaddress.ip_network(p.cidr).version == 6 else "ip"
        parts.append(f"{fam} {'saddr' if hook == 'input' else 'daddr'} {p.cidr}")
    if p.port is not None:
        proto = "{ tcp, udp }" if p.protocol == "any" else p.protocol
        parts.append(f"meta l4proto {proto} th dport {p.port}")
    elif p.protocol != "any":
        parts.append(f"meta l4proto {p.protocol}")
    if p.percent < 100:
        parts.append(f"numgen random mod 10000 < {round(p.percent * 100)}")
    verdict = (
        "reject with tcp reset" if p.reject and p.protocol == "tcp" else ("reject" if p.reject else "drop")
    )
    return " ".join([*parts, "counter", verdict])


def _table_script(table: str, p: DropParams) -> str:
    hooks = {"ingress": ["input"], "egress": ["output"], "both": ["input", "output"]}[p.direction]
    chains = "\n".join(
        f"  chain {h} {{ type filter hook {h} priority -10; policy accept; {_rule(p, h)}; }}" for h in hooks
    )
    return f"table inet {table} {{\n{chains}\n}}\n"


def _counters(netns: str | None, table: str) -> int:
    out = _run(netns, ["nft", "-j", "list", "table", "inet", table], check=False)
    total = 0
    try:
        for item in json.loads(out or "{}").get("nftables", []):
            for expr in (item.get("rule") or {}).get("expr", []):
                if "counter" in expr:
                    total += int(expr["counter"]["packets"])
    except ValueError:
        return 0
    return total


@action("hostnet", "drop_packets", DropParams, fault_type="network_partition")
async def drop_packets(ctx: ActivityContext, p: DropParams) -> dict[str, Any]:
    """Drop (or reject) a share of the packets to/from a CIDR and/or port with an nftables table of its own;
    100% is a blackhole. Rollback deletes the table."""
    table = f"fp_{uuid.uuid4().hex[:12]}"
    script = _table_script(table, p)
    entry = leased_revert(
        ctx,
        label=f"hostnet: delete nftables table {table}" + (f" in netns {p.netns}" if p.netns else ""),
        driver="hostnet",
        revert="delete_table",
        args={"netns": p.netns, "table": table},
    )
    try:
        # one transaction: the table exists whole or not at all
        await anyio.to_thread.run_sync(lambda: _run(p.netns, ["nft", "-f", "-"], stdin=script))
    except DriverError:
        withdraw(ctx, entry)  # nft refused the script: nothing applied
        raise
    except BaseException:
        await revert_now(ctx, entry)
        raise
    out: dict[str, Any] = {
        "table": table,
        "rules": [r.strip() for r in script.splitlines()[1:-2]],
        "netns": p.netns,
    }
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        out["removed_after_s"] = p.duration_seconds
    return out


class CountParams(_Where):
    table: str = Field(description="the table a drop_packets fault reported")


@probe("hostnet", "dropped_packets", CountParams)
def dropped_packets(ctx: ActivityContext, p: CountParams) -> int:
    """Packets the fault's rules matched so far (0 once the fault is reverted)."""
    if not _NAME.match(p.table):
        raise DriverError("table: not a table name")
    return _counters(p.netns, p.table)


# --- tc qdiscs: bandwidth and netem ---------------------------------------------------------------------------


def _root_qdisc(netns: str | None, iface: str) -> dict[str, Any] | None:
    out = _run(netns, ["tc", "-j", "qdisc", "show", "dev", iface])
    for q in json.loads(out or "[]"):
        if q.get("root"):
            return dict(q)
    return None


@revert_recipe("hostnet", "delete_qdisc")
def _recipe_delete_qdisc(args: dict[str, Any]) -> None:
    try:
        root = _root_qdisc(args.get("netns"), args["interface"])
    except DriverError as exc:
        if "Cannot find device" in str(exc) or "no network namespace" in str(exc):
            return  # the interface or namespace is gone, and the qdisc with it
        raise
    # only our own qdisc: one an operator put there since is not ours to remove
    if root and root.get("kind") == args["kind"] and root.get("handle") == _HANDLES[args["kind"]]:
        _run(args.get("netns"), ["tc", "qdisc", "del", "dev", args["interface"], "root"])


class _Iface(_Where):
    interface: str = Field(description="network interface whose outgoing traffic is shaped, e.g. veth0")
    duration_seconds: HoldSeconds = None

    @field_validator("interface")
    @classmethod
    def _if(cls, v: str) -> str:
        if not _IFACE.match(v):
            raise ValueError("an interface name (up to 15 letters, digits, '_', '.', ':', '@', '-')")
        return v


class _NoQdisc(DriverError):
    """The kernel lacks the qdisc (no module, none built in): nothing was applied."""


async def _add_qdisc(ctx: ActivityContext, p: _Iface, kind: str, spec: list[str]) -> dict[str, Any]:
    handle = _HANDLES[kind]
    try:
        root = await anyio.to_thread.run_sync(_root_qdisc, p.netns, p.interface)
    except DriverError as exc:
        if "Cannot find device" in str(exc):
            where = f" in netns {p.netns}" if p.netns else ""
            raise DriverError(
                f"interface: no interface {p.interface!r}{where} (tc: Cannot find device; see `ip link`)"
            ) from None
        raise
    if root and root.get("handle") == handle:
        raise DriverError(f"interface: {p.interface} already carries a Faultplane {root.get('kind')} fault")
    entry = leased_revert(
        ctx,
        label=f"hostnet: remove {kind} qdisc from {p.interface}"
        + (f" in netns {p.netns}" if p.netns else ""),
        driver="hostnet",
        revert="delete_qdisc",
        args={"netns": p.netns, "interface": p.interface, "kind": kind},
    )
    argv = ["tc", "qdisc", "add", "dev", p.interface, "root", "handle", handle, kind, *spec]
    try:
        await anyio.to_thread.run_sync(lambda: _run(p.netns, argv))
    except BaseException as exc:
        if not isinstance(exc, DriverError):
            await revert_now(ctx, entry)
            raise
        withdraw(ctx, entry)  # `tc qdisc add` failed: nothing changed
        if "qdisc kind is unknown" in str(exc):
            raise _NoQdisc(
                f"interface: this kernel has no sch_{kind} (tc: qdisc kind is unknown); load the module "
                f"(modprobe sch_{kind}) or use a kernel built with it"
            ) from None
        if "Exclusivity flag on" in str(exc) or "File exists" in str(exc):
            raise DriverError(
                f"interface: {p.interface} already has a root qdisc ({root.get('kind') if root else '?'}); "
                "Faultplane does not replace an operator's qdisc"
            ) from None
        raise
    out: dict[str, Any] = {"interface": p.interface, "qdisc": f"{kind} {' '.join(spec)}", "netns": p.netns}
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        out["removed_after_s"] = p.duration_seconds
    return out


class BandwidthParams(_Iface):
    rate_kbit: int = Field(ge=8, le=100_000_000, description="outgoing rate limit in kbit/s")
    burst_bytes: int = Field(default=16_384, ge=1_600, le=100_000_000, description="token bucket size")
    latency_ms: int = Field(
        default=100, ge=1, le=60_000, description="longest a packet may queue before drop"
    )


@action("hostnet", "limit_bandwidth", BandwidthParams, fault_type="latency")
async def limit_bandwidth(ctx: ActivityContext, p: BandwidthParams) -> dict[str, Any]:
    """Shape an interface's outgoing traffic to ``rate_kbit`` (tc tbf); rollback removes the qdisc."""
    spec = ["rate", f"{p.rate_kbit}kbit", "burst", str(p.burst_bytes), "latency", f"{p.latency_ms}ms"]
    return await _add_qdisc(ctx, p, "tbf", spec)


class NetemParams(_Iface):
    delay_ms: float = Field(default=0, ge=0, le=60_000)
    jitter_ms: float = Field(default=0, ge=0, le=60_000, description="+/- around delay_ms")
    loss_percent: float = Field(default=0, ge=0, le=100)
    corrupt_percent: float = Field(default=0, ge=0, le=100, description="flip a random bit in this share")
    duplicate_percent: float = Field(default=0, ge=0, le=100)
    reorder_percent: float = Field(default=0, ge=0, le=100, description="sent at once, ahead of delayed ones")
    engine: Literal["auto", "netem", "nfqueue"] = Field(
        default="auto",
        description="netem: the kernel's tc netem qdisc; nfqueue: Faultplane's userspace queue (iptables "
        "NFQUEUE, for kernels without sch_netem); auto: netem when the kernel has it, else nfqueue",
    )
    fix_checksums: bool = Field(
        default=False,
        description="nfqueue engine: recompute the checksum of corrupted packets so the altered bytes reach "
        "the application (default: leave it wrong, so the receiving kernel drops them, as with netem)",
    )

    @model_validator(mode="after")
    def _some(self) -> Self:
        check_netem(self)
        if self.fix_checksums and not self.corrupt_percent:
            raise ValueError("fix_checksums: only has a meaning with corrupt_percent")
        if self.fix_checksums and self.engine == "netem":
            raise ValueError("fix_checksums: netem cannot fix checksums; use engine nfqueue (or auto)")
        return self


def check_netem(p: Any) -> None:
    """The netem fields (delay_ms, jitter_ms, *_percent, optional rate_kbit) make one coherent fault."""
    if not any(
        (
            p.delay_ms,
            p.loss_percent,
            p.corrupt_percent,
            p.duplicate_percent,
            p.reorder_percent,
            getattr(p, "rate_kbit", None),
        )
    ):
        raise ValueError(
            "give at least one of delay_ms, loss_percent, corrupt_percent, duplicate_percent, reorder_percent"
            + (", rate_kbit" if hasattr(p, "rate_kbit") else "")
        )
    if p.reorder_percent and not p.delay_ms:
        raise ValueError("reorder_percent needs delay_ms (reordered packets skip the delay)")
    if p.jitter_ms and not p.delay_ms:
        raise ValueError("jitter_ms needs delay_ms")


def netem_spec(p: Any) -> list[str]:
    """The `tc ... netem` arguments for the netem fields of ``p``."""
    spec: list[str] = []
    if p.delay_ms:
        spec += ["delay", f"{p.delay_ms}ms"] + ([f"{p.jitter_ms}ms"] if p.jitter_ms else [])
    for word, pct in (
        ("loss", p.loss_percent),
        ("corrupt", p.corrupt_percent),
        ("duplicate", p.duplicate_percent),
        ("reorder", p.reorder_percent),
    ):
        if pct:
            spec += [word, f"{pct}%"]
    if getattr(p, "rate_kbit", None):
        spec += ["rate", f"{p.rate_kbit}kbit"]
    return spec


@action("hostnet", "netem", NetemParams, fault_type="latency")
async def netem(ctx: ActivityContext, p: NetemParams) -> dict[str, Any]:
    """Delay (with jitter), lose, corrupt, duplicate or reorder an interface's outgoing packets, with tc netem
    or, on a kernel without sch_netem, Faultplane's userspace NFQUEUE engine (``engine``); rollback removes the
    qdisc, or the queue rule and its helper process."""
    if p.engine == "netem" or (p.engine == "auto" and not p.fix_checksums):
        try:
            return {**await _add_qdisc(ctx, p, "netem", netem_spec(p)), "engine": "netem"}
        except _NoQdisc:
            if p.engine == "netem":
                raise
    return await _nfqueue_fault(ctx, p)


# --- the NFQUEUE engine: netem's effects from a userspace helper ------------------------------------------------
#
# The kernel here has no nft `queue` expression (CONFIG_NFT_QUEUE unset) but has the xtables NFQUEUE target, so
# the rule goes in with iptables/ip6tables (nft backend or legacy alike): a chain of our own in the mangle table,
# jumped to from POSTROUTING for the interface. `--queue-bypass`: with no helper bound, packets pass.

_MARK = 0xFA170000  # carried by the helper's duplicates, so the rule does not queue them again
_IPT = ("iptables", "ip6tables")


def _chain_rules(chain: str, iface: str, queue: int) -> str:
    return (
        f"*mangle\n:{chain} - [0:0]\n"
        f"-A {chain} -m mark ! --mark {_MARK:#x} -j NFQUEUE --queue-num {queue} --queue-bypass\n"
        f"-I POSTROUTING 1 -o {iface} -j {chain}\nCOMMIT\n"
    )


def _remove_chain(netns: str | None, chain: str, iface: str) -> None:
    """Idempotent: each step may find its object already gone."""
    for tool in _IPT:
        _run(netns, [tool, "-w", "-t", "mangle", "-D", "POSTROUTING", "-o", iface, "-j", chain], check=False)
        _run(netns, [tool, "-w", "-t", "mangle", "-F", chain], check=False)
        _run(netns, [tool, "-w", "-t", "mangle", "-X", chain], check=False)


# helpers this process started, reaped by its own revert (the watchdog only finds them by pid)
_HELPERS: dict[int, subprocess.Popen[str]] = {}


def _stop_helper(pid: int, started: float) -> None:
    import psutil

    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - started) < 1.0:  # not a recycled pid
            proc.terminate()  # SIGTERM: it lets every held packet go, then exits
            try:
                proc.wait(5)
            except psutil.TimeoutExpired:
                proc.kill()
                proc.wait(5)
    except psutil.NoSuchProcess:
        pass
    own = _HELPERS.pop(pid, None)
    if own is not None:
        own.wait(5)
        for f in (own.stdin, own.stdout):
            if f is not None:
                f.close()


@revert_recipe("hostnet", "stop_queue")
def _recipe_stop_queue(args: dict[str, Any]) -> None:
    try:
        # the rule first: new packets pass untouched before the helper lets the held ones go
        _remove_chain(args.get("netns"), args["chain"], args["interface"])
    except DriverError as exc:
        if "no network namespace" not in str(exc):
            raise  # a namespace that is gone took the rule with it
    finally:
        _stop_helper(int(args["pid"]), float(args["started"]))


def _spawn_helper(p: NetemParams) -> tuple[subprocess.Popen[str], int, float]:
    import os
    import random
    import select
    import sys

    import psutil

    import faultplane

    effects = {
        k: getattr(p, k)
        for k in (
            "delay_ms",
            "jitter_ms",
            "loss_percent",
            "corrupt_percent",
            "duplicate_percent",
            "reorder_percent",
            "fix_checksums",
        )
    }
    src = str(Path(faultplane.__file__).resolve().parents[1])  # the helper runs this very code
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable, "-m", "faultplane.drivers.nfqueue", "--interface", p.interface]
    argv += ["--queue", str(random.randrange(0xF000, 0xFFFF)), "--mark", hex(_MARK)]
    argv += ["--effects", json.dumps(effects)]
    if p.netns is not None:
        argv = ["ip", "netns", "exec", p.netns, *argv]  # exec, not fork: the pid is the helper's
    with tempfile.TemporaryFile() as errors:  # a file, not a pipe: nobody reads it once the helper runs
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,  # its lifeline: EOF when this process ends, however it ends
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env=env,
            start_new_session=True,  # a Ctrl-C for the controller is the controller's to handle
        )
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30.0)
        line = proc.stdout.readline() if ready else ""
        try:
            info = json.loads(line) if line else {}
        except ValueError:
            info = {}
        if not info.get("ready"):
            proc.kill()
            proc.wait(5)
            errors.seek(0)
            last = (errors.read().decode(errors="replace").strip().splitlines() or [""])[-1][:300]
            why = info.get("error") or (
                "did not start in 30 s" if not ready else f"exited with {proc.returncode}: {last}"
            )
            raise DriverError(f"engine: the nfqueue helper {why}")
    _HELPERS[proc.pid] = proc
    return proc, int(info["queue"]), psutil.Process(proc.pid).create_time()


async def _nfqueue_fault(ctx: ActivityContext, p: NetemParams) -> dict[str, Any]:
    where = f" in netns {p.netns}" if p.netns else ""

    def check() -> None:
        res = _run(p.netns, ["ip", "-o", "link", "show"])
        if not re.search(rf"^\d+: {re.escape(p.interface)}[@:]", res, re.M):
            # an `-o IF` rule for a missing interface would apply and match nothing
            raise DriverError(f"interface: no interface {p.interface!r}{where} (see `ip link`)")
        for tool in _IPT:
            if shutil.which(tool) is None:
                raise DriverError(f"{tool}: not installed (apt-get install -y iptables)")
        if re.search(
            rf"-o {re.escape(p.interface)} -j fpq_", _run(p.netns, ["iptables", "-w", "-t", "mangle", "-S"])
        ):
            raise DriverError(f"interface: {p.interface} already carries a Faultplane netem fault (nfqueue)")

    await anyio.to_thread.run_sync(check)
    proc, queue, started = await anyio.to_thread.run_sync(_spawn_helper, p)
    chain = f"fpq_{uuid.uuid4().hex[:12]}"
    args = {"netns": p.netns, "chain": chain, "interface": p.interface, "pid": proc.pid, "started": started}
    entry = leased_revert(
        ctx,
        label=f"hostnet: remove NFQUEUE rule {chain} from {p.interface}{where} and stop its helper",
        driver="hostnet",
        revert="stop_queue",
        args=args,
    )
    applied: list[str] = []

    def apply() -> None:
        for tool in _IPT:
            _run(
                p.netns, [f"{tool}-restore", "-w", "--noflush"], stdin=_chain_rules(chain, p.interface, queue)
            )
            applied.append(tool)

    try:
        await anyio.to_thread.run_sync(apply)
    except DriverError:
        if applied:  # IPv4 went in, IPv6 did not: take it all back
            await revert_now(ctx, entry)
        else:
            withdraw(ctx, entry)
            await anyio.to_thread.run_sync(_stop_helper, proc.pid, started)
        raise
    except BaseException:
        await revert_now(ctx, entry)
        raise
    out: dict[str, Any] = {
        "interface": p.interface,
        "engine": "nfqueue",
        "queue": queue,
        "chain": chain,
        "helper_pid": proc.pid,
        "netns": p.netns,
        "effects": " ".join(netem_spec(p)) + (" fix_checksums" if p.fix_checksums else ""),
    }
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        out["removed_after_s"] = p.duration_seconds
    return out


class QueueParams(_Where):
    queue: int = Field(ge=0, le=65535, description="the queue a netem fault with the nfqueue engine reported")


@probe("hostnet", "queued_packets", QueueParams)
def queued_packets(ctx: ActivityContext, p: QueueParams) -> dict[str, int]:
    """The kernel's account of an nfqueue netem fault (/proc/net/netfilter/nfnetlink_queue in its namespace):
    packets handed to the engine so far, awaiting a verdict in the kernel now (near 0: the engine keeps delayed
    packets itself), and passed by fail-open because the queue or socket overflowed
    (0 for all once the fault is reverted and its queue unbound)."""
    text = _run(p.netns, ["cat", "/proc/net/netfilter/nfnetlink_queue"])
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 8 and cols[0] == str(p.queue):
            return {
                "queued": int(cols[7]),
                "held": int(cols[2]),
                "overflowed": int(cols[5]) + int(cols[6]),
            }
    return {"queued": 0, "held": 0, "overflowed": 0}
