"""hostnet.netem through the userspace NFQUEUE engine (this kernel has no sch_netem), measured by a client in
namespace A against echo servers in namespace B, with the fault on B's outgoing interface: round trips for
delay and jitter, copies of each reply for duplication, arrival order for reordering, payload bytes and the
kernel's checksum-error counter for corruption. Reverts are checked in the kernel (iptables chain, helper
process) and on the wire."""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from lease_helpers import controller, reverted_after_kill
from test_hostnet import _has_netem

from clihelp import start_run
from faultplane.drivers import leases, nfqueue
from faultplane.drivers.base import ActivityContext, DriverError, get_activity
from policy_helpers import use_lab_policy

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

# One datagram at a time, each waiting for its echo: round-trip times in seconds (None: no answer in 3 s).
UDP_RTT = r"""
import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
out = []
for i in range(int(sys.argv[3])):
    t0 = time.perf_counter()
    s.sendto(b"%d" % i, (sys.argv[1], int(sys.argv[2])))
    try:
        while s.recv(64) != b"%d" % i:
            pass
        out.append(time.perf_counter() - t0)
    except socket.timeout:
        out.append(None)
print(json.dumps(out))
"""

# N datagrams `gap` seconds apart, then every reply until a second of silence: the order the replies arrived
# in, each as [sequence number, bits that differ from what was sent], and the kernel's UDP checksum errors.
UDP_BURST = r"""
import json, socket, sys, time
v6 = len(sys.argv) > 5 and sys.argv[5] == "6"
def csum_errors():
    if v6:
        return int(next(l.split()[1] for l in open("/proc/net/snmp6") if l.startswith("Udp6InCsumErrors")))
    rows = [l.split() for l in open("/proc/net/snmp") if l.startswith("Udp:")]
    return int(rows[1][rows[0].index("InCsumErrors")])
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
dst, n, gap = (sys.argv[1], int(sys.argv[2])), int(sys.argv[3]), float(sys.argv[4])
def payload(i):
    return b"%06d:" % i + bytes((i * 7 + k) % 256 for k in range(57))
errors0 = csum_errors()
got = []
def drain(timeout):
    s.settimeout(timeout)
    try:
        while True:
            data = s.recv(2048)
            i = int(data[:6]) if data[:6].isdigit() else -1
            sent = payload(i) if 0 <= i < n else b""
            diff = sum(bin(a ^ b).count("1") for a, b in zip(data, sent)) if len(data) == len(sent) else -1
            got.append([i, diff])
            s.settimeout(timeout)
    except socket.timeout:
        pass
for i in range(n):
    s.sendto(payload(i), dst)
    drain(gap)
drain(1.0)
print(json.dumps({"sent": n, "got": got, "csum_errors": csum_errors() - errors0}))
"""

CONNECT_ECHO = r"""
import json, socket, sys, time
t0 = time.perf_counter()
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10) as s:
    s.sendall(b"ping"); got = s.recv(4)
print(json.dumps({"ok": got == b"ping", "s": time.perf_counter() - t0}))
"""


@pytest.fixture
def lab_policy() -> Path:
    # the run's CLI reads the user's policy: a lab one, without gates
    return use_lab_policy("gates: {required: false}\n")


@pytest.fixture
def pair(netns_pair):  # type: ignore[no-untyped-def]
    if _has_netem():
        pytest.skip("this kernel has sch_netem: engine auto picks netem (test_hostnet measures it)")
    return netns_pair


def _rtts(pair, n: int = 30) -> list[float]:  # type: ignore[no-untyped-def]
    out = pair.client(UDP_RTT, pair.ip_b, "7003", str(n), timeout=120)
    assert None not in out, out
    return sorted(out)


def _burst(pair, n: int, gap: float = 0.003) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return pair.client(UDP_BURST, pair.ip_b, "7003", str(n), str(gap), timeout=120)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _chains(pair) -> list[str]:  # type: ignore[no-untyped-def]
    out = []
    for tool in ("iptables", "ip6tables"):
        res = subprocess.run(
            ["ip", "netns", "exec", pair.b, tool, "-w", "-t", "mangle", "-S"], capture_output=True, text=True
        )
        out += [line for line in res.stdout.splitlines() if "fpq_" in line]
    return out


async def _apply(pair, run_id: str, **effects: Any) -> tuple[ActivityContext, dict[str, Any]]:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id=run_id)
    out = await get_activity("hostnet", "netem").invoke(
        ctx, {"netns": pair.b, "interface": pair.veth_b, **effects}
    )
    assert out["engine"] == "nfqueue" and _alive(out["helper_pid"])
    # IPv4 and IPv6 each get the chain and the jump to it
    assert len(_chains(pair)) == 6, _chains(pair)
    return ctx, out


async def _revert(ctx: ActivityContext, pair, out: dict[str, Any]) -> None:  # type: ignore[no-untyped-def]
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert _chains(pair) == []
    assert not _alive(out["helper_pid"])
    assert leases.list_leases() == []


async def test_delay_holds_every_packet_at_least_that_long_and_rollback_restores(pair) -> None:  # type: ignore[no-untyped-def]
    assert _rtts(pair, 10)[5] < 0.05
    ctx, out = await _apply(pair, "nq1", delay_ms=100)
    assert len(leases.list_leases()) == 1
    udp = _rtts(pair)
    assert udp[0] >= 0.095, udp  # a held verdict is never released early: a hard lower bound
    assert udp[len(udp) // 2] < 1.0, udp  # generous: the machine is loaded
    tcp = pair.client(CONNECT_ECHO, pair.ip_b, "7002")
    assert tcp["ok"] and tcp["s"] >= 0.19, tcp  # the SYN-ACK and the echo both leave B: two delays
    # the kernel's count: 30 echoes and the TCP exchange's packets went through the queue
    queued = get_activity("hostnet", "queued_packets")
    seen = await queued.invoke(ctx, {"netns": pair.b, "queue": out["queue"]})
    assert seen["queued"] >= 33 and seen["overflowed"] == 0, seen
    await _revert(ctx, pair, out)
    assert await queued.invoke(ctx, {"netns": pair.b, "queue": out["queue"]}) == {
        "queued": 0,
        "held": 0,
        "overflowed": 0,
    }
    assert _rtts(pair, 10)[5] < 0.05


async def test_a_delayed_tcp_flow_is_not_throttled_by_its_held_packets(pair) -> None:  # type: ignore[no-untyped-def]
    from test_hostnet import DOWNLOAD

    ctx, out = await _apply(pair, "nq12", delay_ms=100)
    got = pair.client(DOWNLOAD, pair.ip_b, "7001")
    assert got["bytes"] == 262144 and got["s"] >= 0.1, got
    # Slow start needs ~5 round trips of ~0.1 s for 180 segments. Were the packets held in the kernel, each
    # would count against the socket's TCP small queues budget: ~3 segments per 0.1 s, over 6 s.
    assert got["s"] < 3.0, got
    await _revert(ctx, pair, out)


async def test_jitter_spreads_round_trips_on_both_sides_of_the_delay(pair) -> None:  # type: ignore[no-untyped-def]
    ctx, out = await _apply(pair, "nq2", delay_ms=80, jitter_ms=40)
    udp = _rtts(pair, 40)
    assert udp[0] >= 0.038, udp  # never below delay - jitter
    # below the delay itself only jitter can bring a reply: uniform in [40, 120] ms puts ~40% of them there
    assert sum(r < 0.075 for r in udp) >= 3, udp
    assert sum(r > 0.085 for r in udp) >= 3, udp
    await _revert(ctx, pair, out)


async def test_duplication_sends_about_that_share_twice_and_rollback_stops_it(pair) -> None:  # type: ignore[no-untyped-def]
    ctx, out = await _apply(pair, "nq3", duplicate_percent=30)
    res = _burst(pair, 300)
    seqs = [i for i, _ in res["got"]]
    dups = len(seqs) - len(set(seqs))
    assert 45 <= dups <= 140, dups  # 30% of 300 = 90, binomial sd ~8
    assert all(diff == 0 for _, diff in res["got"])  # copies are exact
    await _revert(ctx, pair, out)
    after = [i for i, _ in _burst(pair, 200)["got"]]
    assert len(after) == len(set(after))  # nothing duplicates on a veth pair by itself


def _late(seqs: list[int]) -> int:
    """Replies that arrived after one with a higher sequence number."""
    late, top = 0, -1
    for i in seqs:
        if i < top:
            late += 1
        top = max(top, i)
    return late


async def test_reordering_lets_some_packets_overtake_delayed_ones(pair) -> None:  # type: ignore[no-untyped-def]
    assert _late([i for i, _ in _burst(pair, 100)["got"]]) <= 2
    ctx, out = await _apply(pair, "nq4", delay_ms=60, reorder_percent=40)
    seqs = [i for i, _ in _burst(pair, 200)["got"]]
    assert sorted(seqs) == list(range(200))  # reordered, not lost or copied
    # 60% are held 60 ms while those sent in the next 60 ms (~20) include reordered ones sent at once
    assert _late(seqs) >= 40, _late(seqs)
    await _revert(ctx, pair, out)
    assert _late([i for i, _ in _burst(pair, 100)["got"]]) <= 2


async def test_corruption_with_wrong_checksums_is_dropped_by_the_receiving_kernel(pair) -> None:  # type: ignore[no-untyped-def]
    ctx, out = await _apply(pair, "nq5", corrupt_percent=30)
    res = _burst(pair, 300)
    lost = res["sent"] - len(res["got"])
    assert 45 <= lost <= 140, lost
    assert all(diff == 0 for _, diff in res["got"])  # no altered byte reached the application
    assert res["csum_errors"] >= lost * 0.9, res["csum_errors"]  # A's kernel counted them as bad checksums
    await _revert(ctx, pair, out)
    after = _burst(pair, 200)
    assert len(after["got"]) >= 198 and after["csum_errors"] == 0


async def test_corruption_with_fixed_checksums_reaches_the_application(pair) -> None:  # type: ignore[no-untyped-def]
    ctx, out = await _apply(pair, "nq6", corrupt_percent=30, fix_checksums=True)
    res = _burst(pair, 300)
    assert len(res["got"]) >= 285 and res["csum_errors"] == 0
    diffs = [diff for _, diff in res["got"]]
    corrupted = [d for d in diffs if d != 0]
    assert 45 <= len(corrupted) <= 140, len(corrupted)
    # one flipped bit each; a flip in the 6-digit sequence number (~1 in 10) makes it read as another or none
    assert sum(d == 1 for d in corrupted) >= len(corrupted) * 0.7
    await _revert(ctx, pair, out)
    assert all(diff == 0 for _, diff in _burst(pair, 100)["got"])


async def test_loss_drops_about_that_share(pair) -> None:  # type: ignore[no-untyped-def]
    ctx, out = await _apply(pair, "nq7", loss_percent=30)
    res = _burst(pair, 300)
    assert 45 <= res["sent"] - len(res["got"]) <= 140
    await _revert(ctx, pair, out)


async def test_a_dead_queue_reader_lets_traffic_through_bypass(pair) -> None:  # type: ignore[no-untyped-def]
    ctx, out = await _apply(pair, "nq8", delay_ms=300)
    assert _rtts(pair, 3)[0] >= 0.29
    os.kill(out["helper_pid"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive(out["helper_pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_chains(pair)) == 6  # the rule is still there, nobody reads its queue
    assert _rtts(pair, 10)[5] < 0.05  # `--queue-bypass`: packets pass, they do not blackhole
    await _revert(ctx, pair, out)  # the helper already gone is not an error


async def test_bad_arguments_name_the_field_and_apply_nothing(pair) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="nq9")
    base = {"netns": pair.b, "interface": pair.veth_b}
    for args, pattern in [
        ({**base, "delay_ms": 10, "engine": "tc"}, r"arguments\.engine: Input should be 'auto', 'netem'"),
        ({**base, "delay_ms": 10, "fix_checksums": True}, r"fix_checksums: only has a meaning with corrupt"),
        ({**base, "corrupt_percent": 5, "fix_checksums": True, "engine": "netem"}, r"fix_checksums: netem"),
        ({**base, "reorder_percent": 5}, "reorder_percent needs delay_ms"),
        ({**base, "delay_ms": -1}, r"arguments\.delay_ms"),
        ({**base, "interface": "nosuchif0", "delay_ms": 10}, r"^interface: no interface 'nosuchif0'"),
        ({**base, "delay_ms": 10, "engine": "netem"}, r"^interface: this kernel has no sch_netem"),
    ]:
        with pytest.raises(DriverError, match=pattern) as err:
            await get_activity("hostnet", "netem").invoke(ctx, args)
        assert "\n" not in str(err.value)
    assert ctx.reverts == [] and leases.list_leases() == [] and _chains(pair) == []
    ctx2, out = await _apply(pair, "nq9b", delay_ms=10)
    with pytest.raises(DriverError, match=r"^interface: .* already carries a Faultplane netem fault"):
        await get_activity("hostnet", "netem").invoke(ctx, {**base, "delay_ms": 20})
    assert ctx.reverts == [] and len(leases.list_leases()) == 1
    await _revert(ctx2, pair, out)


async def test_duration_removes_the_fault_by_itself(pair) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="nq10")
    out = await get_activity("hostnet", "netem").invoke(
        ctx, {"netns": pair.b, "interface": pair.veth_b, "delay_ms": 50, "duration_seconds": 0.5}
    )
    assert out["removed_after_s"] == 0.5
    assert _chains(pair) == [] and not _alive(out["helper_pid"]) and ctx.reverts == []
    assert leases.list_leases() == []


async def test_a_cancelled_hold_reverts_the_fault(pair) -> None:  # type: ignore[no-untyped-def]
    # Ctrl-C reaches an action as cancellation: the hold ends and the revert still runs
    ctx = ActivityContext(run_id="nq11")
    with anyio.move_on_after(3):
        await get_activity("hostnet", "netem").invoke(
            ctx, {"netns": pair.b, "interface": pair.veth_b, "delay_ms": 50, "duration_seconds": 600}
        )
    assert _chains(pair) == [] and leases.list_leases() == [] and ctx.reverts == []
    assert not [p for p in psutil.Process().children() if "faultplane.drivers.nfqueue" in p.cmdline()]


@pytest.mark.usefixtures("lab_policy")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signalled_run_rolls_the_fault_back(pair, tmp_path: Path, signum: int) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "marker.txt"
    doc = {
        "title": "slow network",
        "method": [
            {
                "type": "action",
                "name": "delay",
                "provider": {
                    "type": "driver",
                    "driver": "hostnet",
                    "name": "netem",
                    "arguments": {"netns": pair.b, "interface": pair.veth_b, "delay_ms": 200},
                },
            },
            {
                "type": "action",
                "name": "wait",
                "provider": {
                    "type": "python",
                    "module": "ctk_helpers",
                    "func": "slow",
                    "arguments": {"seconds": 60, "marker": str(marker)},
                },
            },
        ],
    }
    (tmp_path / "exp.json").write_text(json.dumps(doc))
    proc = start_run(tmp_path / "exp.json", marker)
    try:
        assert _rtts(pair, 3)[0] >= 0.19 and len(_chains(pair)) == 6
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, (out, err)
        assert _chains(pair) == []  # rolled back by the controller itself, not left to the watchdog
        assert _rtts(pair, 10)[5] < 0.05
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


UDP6_ECHO = r"""
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 7013))
print("ready", flush=True)
while True:
    data, addr = s.recvfrom(2048)
    s.sendto(data, addr)
"""


async def test_ipv6_packets_are_delayed_duplicated_and_corrupted_too(pair) -> None:  # type: ignore[no-untyped-def]
    a6, b6 = "fd7a:fa17:0:1::1", "fd7a:fa17:0:1::2"

    def sh(*cmd: str) -> None:
        subprocess.run(cmd, check=True, capture_output=True, timeout=10)

    sh("ip", "-n", pair.a, "addr", "add", f"{a6}/64", "dev", pair.veth_a, "nodad")
    sh("ip", "-n", pair.b, "addr", "add", f"{b6}/64", "dev", pair.veth_b, "nodad")
    server = subprocess.Popen(
        ["ip", "netns", "exec", pair.b, sys.executable, "-c", UDP6_ECHO, b6],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        clean = pair.client(UDP_BURST, b6, "7013", "50", "0.003", "6")
        assert len(clean["got"]) == 50
        ctx, out = await _apply(
            pair, "nq13", delay_ms=20, duplicate_percent=30, corrupt_percent=30, fix_checksums=True
        )
        res = pair.client(UDP_BURST, b6, "7013", "300", "0.003", "6", timeout=120)
        seqs = [i for i, _ in res["got"]]
        assert len(set(seqs)) >= 285  # the IPv6 echoes all came back
        assert 45 <= len(seqs) - len(set(seqs)) <= 140  # and about 30% twice
        assert 45 <= sum(d == 1 for _, d in res["got"]) <= 160  # corrupted (duplicates share the flip)
        assert res["csum_errors"] == 0  # the recomputed UDP/IPv6 checksums (with the pseudo-header) hold
        await _revert(ctx, pair, out)
    finally:
        server.kill()
        server.wait(5)
        subprocess.run(
            ["ip", "-n", pair.a, "addr", "del", f"{a6}/64", "dev", pair.veth_a], capture_output=True
        )
        subprocess.run(
            ["ip", "-n", pair.b, "addr", "del", f"{b6}/64", "dev", pair.veth_b], capture_output=True
        )


def test_watchdog_reverts_the_queue_rule_after_the_controller_is_sigkilled(pair, lease_env) -> None:  # type: ignore[no-untyped-def]
    steps = [["hostnet", "netem", {"netns": pair.b, "interface": pair.veth_b, "delay_ms": 200}]]
    with controller(steps, "nq-sigkill", "no-secret-here", lease_env) as ctl:
        assert _rtts(pair, 3)[0] >= 0.19
        (lease,) = leases.list_leases()
        helper = int(lease.args["pid"])
        assert _alive(helper) and len(_chains(pair)) == 6
        rows = reverted_after_kill(ctl, "nq-sigkill", 1)
        assert [r["ok"] for r in rows] == [True], rows
        assert _chains(pair) == []
        assert not _alive(helper)
        assert _rtts(pair, 10)[5] < 0.05


def _ipv4_tcp(payload: bytes) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", 40000, 7000, 1, 1, 5 << 4, 0x10, 65535, 0, 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0, 64, 6, 0, bytes([10, 0, 0, 1]), bytes(4))
    buf = bytearray(ip + tcp)
    nfqueue.fix_checksum(buf)
    return bytes(buf)


def _verifies(pkt: bytes) -> bool:
    """The receiver's check: pseudo-header + segment (checksum included) sums to 0xffff."""
    seg = pkt[20:]
    pseudo = pkt[12:20] + struct.pack("!BBH", 0, 6, len(seg))
    return nfqueue._fold(pseudo + seg) == 0xFFFF


def test_corruption_flips_one_payload_bit_and_leaves_bare_acks_alone() -> None:
    rng = random.Random(7)
    assert nfqueue.corrupt(_ipv4_tcp(b""), True, rng) is None  # no payload: nothing to corrupt
    pkt = _ipv4_tcp(b"hello, world")
    assert _verifies(pkt)
    for fix in (False, True):
        bad = nfqueue.corrupt(pkt, fix, rng)
        assert bad is not None and len(bad) == len(pkt)
        flipped = [i for i, (x, y) in enumerate(zip(pkt, bad, strict=True)) if x != y and i not in (36, 37)]
        assert len(flipped) == 1 and flipped[0] >= 40  # one byte of the payload, never a header
        assert bin(pkt[flipped[0]] ^ bad[flipped[0]]).count("1") == 1
        assert _verifies(bad) is fix  # the checksum still matches only when fixed


class _Verdicts:
    """Stands in for the netlink socket only to record the engine's decisions (the bound is the point)."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int]] = []

    def verdict(self, packet_id: int, verdict: int, payload: bytes | None = None) -> None:
        self.sent.append((packet_id, verdict))


def test_delayed_packets_beyond_the_bound_pass_undelayed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nfqueue, "_MAX_HELD", 3)
    q = _Verdicts()
    engine = nfqueue.Engine(q, "lo", 1, nfqueue.Effects(delay_ms=1000))  # type: ignore[arg-type]
    for i in range(5):
        engine.handle(i, _ipv4_tcp(b"x"), time.monotonic())
    # the first three are taken from the kernel (dropped there, kept here); the rest pass at once
    drop, accept = nfqueue.NF_DROP, nfqueue.NF_ACCEPT
    assert q.sent == [(0, drop), (1, drop), (2, drop), (3, accept), (4, accept)]
    assert engine.stats.overflowed == 2 and engine.stats.delayed == 3


async def test_a_helper_that_cannot_start_fails_clearly_and_leaves_nothing(
    pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    broken = tmp_path / "python"
    broken.write_text(
        "#!/bin/sh\necho 'Traceback ...' >&2\necho 'OSError: no nfnetlink_queue here' >&2\nexit 3\n"
    )
    broken.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(broken))  # the interpreter the helper is started with
    ctx = ActivityContext(run_id="nq14")
    with pytest.raises(
        DriverError, match=r"^engine: the nfqueue helper exited with 3: OSError: no nfnetlink"
    ):
        await get_activity("hostnet", "netem").invoke(
            ctx, {"netns": pair.b, "interface": pair.veth_b, "delay_ms": 10}
        )
    assert ctx.reverts == [] and leases.list_leases() == [] and _chains(pair) == []


async def test_a_rule_that_half_applies_is_taken_back(pair, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from faultplane.drivers import hostnet

    real = hostnet._chain_rules
    calls: list[str] = []

    def ipv6_refused(chain: str, iface: str, queue: int) -> str:
        calls.append(chain)  # iptables first, then ip6tables: the second script names a chain nobody made
        return (
            real(chain, iface, queue)
            if len(calls) == 1
            else "*mangle\n-A fpq_nosuchchain -j ACCEPT\nCOMMIT\n"
        )

    monkeypatch.setattr(hostnet, "_chain_rules", ipv6_refused)
    ctx = ActivityContext(run_id="nq15")
    with pytest.raises(DriverError, match=r"^ip6tables-restore in netns .* failed"):
        await get_activity("hostnet", "netem").invoke(
            ctx, {"netns": pair.b, "interface": pair.veth_b, "delay_ms": 10}
        )
    assert len(calls) == 2
    assert _chains(pair) == []  # the IPv4 half that went in was removed
    assert ctx.reverts == [] and leases.list_leases() == []
    assert not [p for p in psutil.Process().children() if "faultplane.drivers.nfqueue" in p.cmdline()]
