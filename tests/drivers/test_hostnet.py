"""Host network faults (nftables, tc) in namespaces the test creates, measured by a client in the other
namespace: connections, datagrams and bytes on the wire, not Faultplane's own account."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from faultplane.drivers import leases
from faultplane.drivers.base import ActivityContext, DriverError, get_activity

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

CONNECT = r"""
import json, socket, sys, time
t0 = time.perf_counter()
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])) as s:
        s.sendall(b"ping"); got = s.recv(4)
    print(json.dumps({"ok": got == b"ping", "error": None, "s": time.perf_counter() - t0}))
except OSError as e:
    print(json.dumps({"ok": False, "error": type(e).__name__, "s": time.perf_counter() - t0}))
"""

UDP_LOSS = r"""
import json, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.05)  # a veth round trip takes well under a millisecond
n = int(sys.argv[3])
seen = set()
for i in range(n):
    s.sendto(str(i).encode(), (sys.argv[1], int(sys.argv[2])))
    try:
        while True:
            data, _ = s.recvfrom(64)
            seen.add(data)
            if data == str(i).encode():
                break
    except socket.timeout:
        pass
print(json.dumps({"sent": n, "received": len(seen)}))
"""

DOWNLOAD = r"""
import json, socket, sys, time
t0 = time.perf_counter()
got = 0
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20) as s:
    while data := s.recv(65536):
        got += len(data)
print(json.dumps({"bytes": got, "s": time.perf_counter() - t0}))
"""


def _connect(pair, port: int, timeout: float = 1.0) -> dict:  # type: ignore[no-untyped-def,type-arg]
    return pair.client(CONNECT, pair.ip_b, str(port), str(timeout))


async def test_blackhole_a_port_only_that_port_and_rollback_restores(netns_pair) -> None:  # type: ignore[no-untyped-def]
    pair = netns_pair
    assert _connect(pair, 7000)["ok"] and _connect(pair, 7002)["ok"]
    ctx = ActivityContext(run_id="hn1")
    out = await get_activity("hostnet", "drop_packets").invoke(
        ctx, {"netns": pair.b, "port": 7000, "protocol": "tcp"}
    )
    assert out["table"].startswith("fp_")
    cut = _connect(pair, 7000)
    assert not cut["ok"] and cut["error"] in ("TimeoutError", "timeout") and cut["s"] >= 0.9  # silent: no RST
    assert _connect(pair, 7002)["ok"]  # another port of the same host is untouched
    assert (
        await get_activity("hostnet", "dropped_packets").invoke(ctx, {"netns": pair.b, "table": out["table"]})
        >= 1
    )
    assert len(leases.list_leases()) == 1
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert _connect(pair, 7000)["ok"]
    assert leases.list_leases() == []
    # a revert of nothing is a no-op
    leases.run_recipe("hostnet", "delete_table", {"netns": pair.b, "table": out["table"]})


async def test_reject_a_cidr_on_egress_refuses_at_once(netns_pair) -> None:  # type: ignore[no-untyped-def]
    pair = netns_pair
    ctx = ActivityContext(run_id="hn2")
    await get_activity("hostnet", "drop_packets").invoke(
        ctx,
        {
            "netns": pair.a,
            "direction": "egress",
            "cidr": f"{pair.ip_b}/32",
            "protocol": "tcp",
            "reject": True,
        },
    )
    res = _connect(pair, 7002, timeout=3)
    assert not res["ok"] and res["s"] < 0.5  # refused at once, not timed out
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert _connect(pair, 7002)["ok"]


async def test_percent_loss_drops_about_that_share_of_datagrams(netns_pair) -> None:  # type: ignore[no-untyped-def]
    pair = netns_pair
    before = pair.client(UDP_LOSS, pair.ip_b, "7003", "400")
    assert before["received"] >= 396
    ctx = ActivityContext(run_id="hn3")
    await get_activity("hostnet", "drop_packets").invoke(
        ctx, {"netns": pair.b, "port": 7003, "protocol": "udp", "percent": 30}
    )
    during = pair.client(UDP_LOSS, pair.ip_b, "7003", "400")
    lost = 1 - during["received"] / during["sent"]
    assert 0.18 <= lost <= 0.42, lost  # 30% of requests, binomial spread over 400
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert pair.client(UDP_LOSS, pair.ip_b, "7003", "400")["received"] >= 396


async def test_bandwidth_limit_slows_a_download_and_rollback_restores(netns_pair) -> None:  # type: ignore[no-untyped-def]
    pair = netns_pair
    fast = pair.client(DOWNLOAD, pair.ip_b, "7001")
    assert fast["bytes"] == 262144
    ctx = ActivityContext(run_id="hn4")
    await get_activity("hostnet", "limit_bandwidth").invoke(
        ctx, {"netns": pair.b, "interface": pair.veth_b, "rate_kbit": 1024, "latency_ms": 2000}
    )
    slow = pair.client(DOWNLOAD, pair.ip_b, "7001")
    assert slow["bytes"] == 262144
    # 2 Mbit at 1 Mbit/s is ~2 s (less the 16 KiB burst)
    assert 1.4 <= slow["s"] <= 6, slow
    assert slow["s"] > 5 * fast["s"]
    with pytest.raises(DriverError, match="already carries a Faultplane tbf fault"):
        await get_activity("hostnet", "limit_bandwidth").invoke(
            ctx, {"netns": pair.b, "interface": pair.veth_b, "rate_kbit": 64}
        )
    assert len(leases.list_leases()) == 1  # the refused second fault left no lease
    assert [e for _, e in await ctx.revert_all()] == [None]
    again = pair.client(DOWNLOAD, pair.ip_b, "7001")
    assert again["s"] < slow["s"] / 3
    assert leases.list_leases() == []


def _has_netem() -> bool:
    probe = "fp-netem-probe"
    subprocess.run(["ip", "netns", "add", probe], capture_output=True)
    try:
        out = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                probe,
                "tc",
                "qdisc",
                "add",
                "dev",
                "lo",
                "root",
                "netem",
                "delay",
                "1ms",
            ],
            capture_output=True,
        )
        return out.returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)


async def test_netem_on_a_kernel_without_it_fails_clearly_and_leaves_nothing(netns_pair) -> None:  # type: ignore[no-untyped-def]
    if _has_netem():
        pytest.skip("this kernel has sch_netem (the delay test below measures it)")
    ctx = ActivityContext(run_id="hn5")
    with pytest.raises(DriverError, match=r"^interface: this kernel has no sch_netem"):
        await get_activity("hostnet", "netem").invoke(
            ctx, {"netns": netns_pair.b, "interface": netns_pair.veth_b, "delay_ms": 100, "engine": "netem"}
        )
    assert ctx.reverts == [] and leases.list_leases() == []


async def test_netem_delay_with_jitter_is_measured_from_outside(netns_pair) -> None:  # type: ignore[no-untyped-def]
    if not _has_netem():
        pytest.skip("this kernel has no sch_netem (tc: qdisc kind is unknown)")
    pair = netns_pair
    base = _connect(pair, 7002)["s"]
    ctx = ActivityContext(run_id="hn6")
    await get_activity("hostnet", "netem").invoke(
        ctx, {"netns": pair.b, "interface": pair.veth_b, "delay_ms": 150, "jitter_ms": 10, "engine": "netem"}
    )
    slow = _connect(pair, 7002, timeout=5)["s"]  # SYN-ACK and the echo both delayed: ~300 ms
    assert slow >= base + 0.25
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert _connect(pair, 7002)["s"] < 0.1


async def test_bad_arguments_and_missing_namespace_apply_nothing(netns_pair) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="hn7")
    for args, pattern in [
        ({"netns": netns_pair.b}, "give cidr and/or port"),
        ({"netns": netns_pair.b, "cidr": "10.0.0.300/8"}, "not an IP network"),
        ({"netns": "no;such ns", "port": 1}, "namespace name"),
        ({"netns": "fp-no-such-ns", "port": 1}, r"^netns: no network namespace 'fp-no-such-ns'"),
    ]:
        with pytest.raises(DriverError, match=pattern):
            await get_activity("hostnet", "drop_packets").invoke(ctx, args)
    with pytest.raises(DriverError, match="Cannot find device"):
        await get_activity("hostnet", "limit_bandwidth").invoke(
            ctx, {"netns": netns_pair.b, "interface": "nosuchif0", "rate_kbit": 64}
        )
    assert ctx.reverts == [] and leases.list_leases() == []
    assert shutil.which("nft")
