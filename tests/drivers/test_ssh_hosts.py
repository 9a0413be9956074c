"""SSH faults on several hosts: three OpenSSH sshd instances on loopback stand for three hosts (they share this
machine, so each fault's tag or the server port in $SSH_CONNECTION tells which host did what), and the blast
radius picks among them."""

from __future__ import annotations

import contextlib
import os
import pwd
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import psutil
import pytest

from faultplane.drivers import leases
from faultplane.drivers.base import ActivityContext, DriverError, get_activity
from proc_helpers import free_port
from servers import _stop, sshd_keys, start_sshd

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def hosts() -> Iterator[list[dict[str, object]]]:
    """Three sshd instances (one host key, one client key), each a 'host' for the driver."""
    base = Path(tempfile.mkdtemp(prefix="faultplane-sshhosts-"))
    procs, out = [], []
    try:
        host_key, user_key, auth = sshd_keys(base)
        for n in range(3):
            proc, port, known = start_sshd(base, host_key, auth, f"sshd{n}")
            procs.append(proc)
            out.append(
                {
                    "host": "127.0.0.1",
                    "port": port,
                    "username": pwd.getpwuid(os.geteuid()).pw_name,
                    "client_keys": [str(user_key)],
                    "known_hosts": str(known),
                }
            )
        yield out
    finally:
        for proc in procs:
            _stop(proc)
        shutil.rmtree(base, ignore_errors=True)


def _tagged(tag: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if tag in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return found


def _until(pred, timeout: float = 20) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(psutil.NoSuchProcess):  # a process looked at may exit meanwhile
            if pred():
                return True
        time.sleep(0.1)
    return False


async def test_cpu_stress_on_two_of_three_hosts_burns_cpu_until_rollback(hosts) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="sshcpu", rng=random.Random(7))
    out = await get_activity("ssh", "stress").invoke(ctx, {"hosts": hosts, "count": 2, "workers": 1})
    assert out["candidates"] == 3 and len(out["hosts"]) == 2
    assert len({h["index"] for h in out["hosts"]}) == 2
    assert len(leases.list_leases()) == 2  # one per host reached
    for h in out["hosts"]:
        procs = _tagged(h["tag"])
        assert procs, h
        # The loop really runs: the kernel counts CPU time for it (generous bound on a loaded machine).
        assert _until(lambda procs=procs: sum(sum(p.cpu_times()[:2]) for p in procs if p.is_running()) > 0.05)
    untouched = {0, 1, 2} - {h["index"] for h in out["hosts"]}
    (spared,) = untouched
    assert _tagged(out["hosts"][0]["tag"].rsplit("-", 1)[0] + f"-{spared}") == []
    assert [e for _, e in await ctx.revert_all()] == [None, None]
    for h in out["hosts"]:
        assert _until(lambda h=h: _tagged(h["tag"]) == [])
    assert leases.list_leases() == []


async def test_memory_stress_holds_resident_memory_and_the_lease_recipe_ends_it(hosts) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="sshmem")
    out = await get_activity("ssh", "stress").invoke(
        ctx, {"hosts": hosts[:1], "kind": "memory", "megabytes": 64}
    )
    (h,) = out["hosts"]
    (leader,) = [p for p in _tagged(h["tag"]) if p.name() == "timeout"]
    group = os.getpgid(leader.pid)

    def resident() -> int:
        total = 0
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.NoSuchProcess):  # one may exit between the two looks
                if _pgid(p.pid) == group:
                    total += p.memory_info().rss
        return total

    assert _until(lambda: resident() >= 64 * 2**20)
    # What the watchdog runs after a SIGKILLed controller: the recipe from the lease file alone.
    (lease,) = leases.list_leases()
    await anyio.to_thread.run_sync(leases.run_recipe, lease.driver, lease.revert, lease.args)
    assert _until(lambda: resident() == 0)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


@pytest.fixture
def small_fs() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="faultplane-sshfill-"))
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(d)], capture_output=True)
    if res.returncode != 0:
        d.rmdir()
        pytest.skip("cannot mount a tmpfs here")
    yield d
    subprocess.run(["umount", str(d)], capture_output=True)
    d.rmdir()


def _free(d: Path) -> int:
    st = os.statvfs(d)
    return st.f_bavail * st.f_frsize


async def test_fill_disk_on_a_share_of_hosts_and_to_full(hosts, small_fs: Path) -> None:  # type: ignore[no-untyped-def]
    before = _free(small_fs)
    ctx = ActivityContext(run_id="sshfill", rng=random.Random(3))
    out = await get_activity("ssh", "fill_disk").invoke(
        ctx, {"hosts": hosts, "percentage": 50, "directory": str(small_fs), "fill_bytes": 2**20}
    )
    assert len(out["hosts"]) == 2  # 50% of 3, rounded up
    assert len(list(small_fs.iterdir())) == 2 and before - _free(small_fs) >= 2 * 2**20
    assert [e for _, e in await ctx.revert_all()] == [None, None]
    assert list(small_fs.iterdir()) == [] and _free(small_fs) == before
    # To full: an ordinary writer gets ENOSPC, and can write again after the rollback.
    out = await get_activity("ssh", "fill_disk").invoke(ctx, {"hosts": hosts[:1], "directory": str(small_fs)})
    assert int(out["hosts"][0]["output"]) < 64 * 1024
    with pytest.raises(OSError, match="No space left"), open(small_fs / "app.dat", "wb") as f:
        f.write(b"x" * 2**20)
        f.flush()
    (small_fs / "app.dat").unlink(missing_ok=True)
    assert [e for _, e in await ctx.revert_all()] == [None]
    (small_fs / "app.dat").write_bytes(b"x" * 2**20)
    (small_fs / "app.dat").unlink()
    with pytest.raises(
        DriverError, match=r"^hosts\[0\] .*: fill failed \(exit 3\): fill_bytes: 67108864 requested but only"
    ):
        await get_activity("ssh", "fill_disk").invoke(
            ctx, {"hosts": hosts[:1], "directory": str(small_fs), "fill_bytes": 64 * 2**20}
        )
    assert list(small_fs.iterdir()) == [] and leases.list_leases() == []


_SERVICE = textwrap.dedent(
    """
    import socket, sys, time
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
    while True:
        c, _ = s.accept(); c.sendall(b"hi\\n"); c.close()
    """
)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
            return c.recv(3) == b"hi\n"
    except OSError:
        return False


async def test_stop_service_on_chosen_hosts_and_start_on_rollback(hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # One "service" per host: the host is told apart by its sshd port ($SSH_CONNECTION's last field).
    script = tmp_path / "svc.py"
    script.write_text(_SERVICE)
    app_port = {h["port"]: free_port() for h in hosts}
    (tmp_path / "ports").write_text("".join(f"{k} {v}\n" for k, v in app_port.items()))
    me = "p=$(awk -v h=\"${SSH_CONNECTION##* }\" '$1==h{print $2}' " + str(tmp_path / "ports") + ")"
    pidfile = str(tmp_path) + "/{service}-$p.pid"
    start = (
        f"{me}; setsid nohup {sys.executable} {script} $p </dev/null >/dev/null 2>&1 & echo $! > {pidfile}; "
        f"for i in $(seq 100); do {sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', $p))\" "
        "2>/dev/null && exit 0; sleep 0.1; done; exit 1"
    )
    commands = {
        "service": "demo",
        "start_command": start,
        "stop_command": f"{me}; kill $(cat {pidfile}) && rm -f {pidfile}",
        "status_command": f"{me}; test -f {pidfile} && kill -0 $(cat {pidfile})",
    }
    setup = ActivityContext(run_id="svc-setup")
    for h in hosts[:2]:  # the service runs on hosts 0 and 1, not on host 2
        await get_activity("ssh", "run").invoke(setup, {**h, "command": start.replace("{service}", "demo")})
    assert [_answers(app_port[h["port"]]) for h in hosts] == [True, True, False]
    ctx = ActivityContext(run_id="svc")
    out = await get_activity("ssh", "stop_service").invoke(ctx, {"hosts": hosts, **commands})
    assert [h["output"] for h in out["hosts"]] == ["stopped", "stopped", "not-running"]
    assert len(leases.list_leases()) == 2  # nothing to start again where it was not running
    assert [_answers(app_port[h["port"]]) for h in hosts] == [False, False, False]
    assert [e for _, e in await ctx.revert_all()] == [None, None]
    assert [_answers(app_port[h["port"]]) for h in hosts] == [True, True, False]
    assert leases.list_leases() == []
    stop = ActivityContext(run_id="svc-teardown")
    await get_activity("ssh", "stop_service").invoke(stop, {"hosts": hosts, **commands})


async def test_drop_packets_on_a_host_blackholes_its_port_until_rollback(hosts) -> None:  # type: ignore[no-untyped-def]
    if shutil.which("nft") is None:
        pytest.skip("nftables is not installed (run `make services`)")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]

    def connects() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    try:
        assert connects()
        ctx = ActivityContext(run_id="sshdrop")
        out = await get_activity("ssh", "drop_packets").invoke(
            ctx, {"hosts": hosts[:1], "port": port, "protocol": "tcp"}
        )
        table = out["hosts"][0]["output"]
        assert table in subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
        assert not connects()  # SYNs vanish: the connect times out
        assert [e for _, e in await ctx.revert_all()] == [None]
        assert table not in subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
        assert connects()
    finally:
        srv.close()


async def test_a_failing_host_reverts_the_hosts_already_done_and_is_named(hosts) -> None:  # type: ignore[no-untyped-def]
    dead = {**hosts[0], "port": free_port()}
    ctx = ActivityContext(run_id="sshbad")
    with pytest.raises(DriverError, match=r"^hosts\[1\] \(.*@127.0.0.1:\d+\): host: cannot open SSH"):
        await get_activity("ssh", "stress").invoke(ctx, {"hosts": [hosts[0], dead], "workers": 1})
    assert leases.list_leases() == []
    assert _until(lambda: _tagged("fp-stress-cpu-") == [])  # host 0's stress was stopped again
    with pytest.raises(
        DriverError, match=r"^hosts\[0\] .*: fill failed \(exit 2\): directory: not a writable"
    ):
        await get_activity("ssh", "fill_disk").invoke(ctx, {"hosts": hosts[:1], "directory": "/nonexistent"})
    assert ctx.reverts == [] and leases.list_leases() == []


async def test_limit_bandwidth_over_ssh_in_a_namespace_is_measured_from_outside(hosts, netns_pair) -> None:  # type: ignore[no-untyped-def]
    from test_hostnet import DOWNLOAD

    pair = netns_pair
    fast = pair.client(DOWNLOAD, pair.ip_b, "7001")
    ctx = ActivityContext(run_id="sshbw")
    out = await get_activity("ssh", "limit_bandwidth").invoke(
        ctx,
        {
            "hosts": hosts[:1],
            "netns": pair.b,
            "interface": pair.veth_b,
            "rate_kbit": 1024,
            "latency_ms": 2000,
        },
    )
    handle = out["hosts"][0]["output"]
    shown = subprocess.run(
        ["ip", "netns", "exec", pair.b, "tc", "qdisc", "show", "dev", pair.veth_b],
        capture_output=True,
        text=True,
    ).stdout
    assert f"qdisc tbf {handle} root" in shown
    slow = pair.client(DOWNLOAD, pair.ip_b, "7001")
    assert slow["bytes"] == 262144 and slow["s"] >= 1.4  # 2 Mbit at 1 Mbit/s, less the 16 KiB burst
    assert slow["s"] > 5 * fast["s"]
    # A second fault on the same interface is refused on the host, and its revert leaves the first alone.
    with pytest.raises(
        DriverError,
        match=r"^hosts\[0\] .*: tbf failed \(exit 2\): fp\w+ already has a root qdisc that is not this fault's",
    ):
        await get_activity("ssh", "limit_bandwidth").invoke(
            ctx, {"hosts": hosts[:1], "netns": pair.b, "interface": pair.veth_b, "rate_kbit": 64}
        )
    assert len(leases.list_leases()) == 1
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert pair.client(DOWNLOAD, pair.ip_b, "7001")["s"] < slow["s"] / 3
    assert leases.list_leases() == []


async def test_netem_over_ssh_names_the_host_when_the_kernel_lacks_it(hosts, netns_pair) -> None:  # type: ignore[no-untyped-def]
    from test_hostnet import _has_netem

    if _has_netem():
        pytest.skip("this kernel has sch_netem; the hostnet tests measure netem itself")
    ctx = ActivityContext(run_id="sshnetem")
    with pytest.raises(
        DriverError, match=r"^hosts\[0\] .*: netem failed \(exit 2\): .*qdisc kind is unknown"
    ):
        await get_activity("ssh", "netem").invoke(
            ctx, {"hosts": hosts[:1], "netns": netns_pair.b, "interface": netns_pair.veth_b, "delay_ms": 100}
        )
    assert ctx.reverts == [] and leases.list_leases() == []
    with pytest.raises(DriverError, match="give at least one of delay_ms"):
        await get_activity("ssh", "netem").invoke(ctx, {"hosts": hosts[:1], "interface": netns_pair.veth_b})
