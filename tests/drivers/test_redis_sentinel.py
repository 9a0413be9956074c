"""redis.sentinel_failover on a real master, two replicas and a redis-sentinel started here: clients that ask
Sentinel move to the new master, a client pinned to the old one is refused writes, and the rollback fails
back to the original master (not to the other replica). And redis.promote_replica on a master/replica pair
without Sentinel."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from redis.sentinel import Sentinel

from faultplane.drivers import leases
from faultplane.drivers.base import ActivityContext, DriverError, get_activity
from proc_helpers import free_port
from servers import _stop, _wait_port

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]


@dataclass(frozen=True)
class Group:
    master: int
    replicas: tuple[int, ...]
    sentinel: int

    @property
    def sentinel_url(self) -> str:
        return f"redis://127.0.0.1:{self.sentinel}"


def _role(port: int) -> str:
    with redis.Redis(port=port, socket_timeout=5) as r:
        return str(r.info("replication")["role"])


def _until(pred, timeout: float = 60) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return True
        except redis.RedisError:
            pass
        time.sleep(0.2)
    return False


@pytest.fixture(scope="module")
def group() -> Iterator[Group]:
    server = shutil.which("redis-server")
    sentinel = shutil.which("redis-sentinel")
    if server is None or sentinel is None:
        pytest.skip("redis-server / redis-sentinel are not installed (run `make services`)")
    base = Path(tempfile.mkdtemp(prefix="faultplane-sentinel-"))
    procs: list[subprocess.Popen[bytes]] = []
    ports = [free_port() for _ in range(3)]
    try:
        for i, port in enumerate(ports):
            cmd = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            cmd += ["--dir", str(base), "--logfile", str(base / f"redis-{port}.log")]
            if i:
                cmd += ["--replicaof", "127.0.0.1", str(ports[0])]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            _wait_port(port, procs[-1], "redis-server", base / f"redis-{port}.log")
        sport = free_port()
        # Sentinel rewrites its config file: it must be its own and writable. A long down-after keeps a slow
        # PING on a loaded machine from starting a failover of Sentinel's own in the middle of a test.
        conf = base / "sentinel.conf"
        conf.write_text(
            f"port {sport}\nbind 127.0.0.1\ndir {base}\nlogfile {base / 'sentinel.log'}\n"
            f"sentinel monitor mymaster 127.0.0.1 {ports[0]} 1\n"
            "sentinel down-after-milliseconds mymaster 30000\nsentinel failover-timeout mymaster 10000\n"
        )
        procs.append(
            subprocess.Popen([sentinel, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
        _wait_port(sport, procs[-1], "redis-sentinel", base / "sentinel.log")
        g = Group(ports[0], (ports[1], ports[2]), sport)
        with redis.Redis(port=sport) as s:  # Sentinel has found both replicas, in sync
            assert _until(
                lambda: (
                    sum(
                        1
                        for rep in s.sentinel_slaves("mymaster")
                        if rep["master-link-status"] == "ok" and not rep["is_disconnected"]
                    )
                    == 2
                )
            )
        yield g
    finally:
        for proc in reversed(procs):
            _stop(proc)
        shutil.rmtree(base, ignore_errors=True)


async def test_sentinel_failover_moves_the_master_and_rollback_fails_back(group: Group) -> None:
    app = Sentinel([("127.0.0.1", group.sentinel)], socket_timeout=5)
    app.master_for("mymaster").set("k", "before")
    ctx = ActivityContext(run_id="sent")
    out = await get_activity("redis", "sentinel_failover").invoke(
        ctx, {"sentinel_url": group.sentinel_url, "master_name": "mymaster"}
    )
    new_port = int(out["new_master"].rsplit(":", 1)[1])
    assert out["old_master"] == f"127.0.0.1:{group.master}" and new_port in group.replicas
    assert [lease.revert for lease in leases.list_leases()] == ["sentinel_failback"]
    # Measured from outside: the promoted server says it is a master; the old one becomes a replica and a
    # client pinned to it cannot write; a client that asks Sentinel writes to the new master.
    assert _role(new_port) == "master"
    assert _until(lambda: _role(group.master) == "slave")
    with redis.Redis(port=group.master) as pinned, pytest.raises(redis.ReadOnlyError):
        pinned.set("k", "pinned")
    assert app.discover_master("mymaster") == ("127.0.0.1", new_port)
    app.master_for("mymaster").set("k", "during")
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert leases.list_leases() == []
    assert app.discover_master("mymaster") == ("127.0.0.1", group.master)  # the original, not the other one
    assert _role(group.master) == "master"
    assert redis.Redis(port=group.master).get("k") == b"during"  # failed back with the data written meanwhile
    with redis.Redis(port=group.replicas[0]) as r1, redis.Redis(port=group.replicas[1]) as r2:
        assert (
            r1.config_get("replica-priority")
            == r2.config_get("replica-priority")
            == {"replica-priority": "100"}
        )
    for port in group.replicas:  # both replicas follow the original master again
        assert _until(lambda port=port: _role(port) == "slave")


async def test_sentinel_failover_refuses_bad_targets_and_leaves_nothing(group: Group, redis_server) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="sent-bad")
    act = get_activity("redis", "sentinel_failover")
    with pytest.raises(DriverError, match=r"^master_name: the Sentinel monitors no master named 'nope'"):
        await act.invoke(ctx, {"sentinel_url": group.sentinel_url, "master_name": "nope"})
    with pytest.raises(DriverError, match=rf"^sentinel_url: 127.0.0.1:{redis_server.port} is not a Sentinel"):
        await act.invoke(ctx, {"sentinel_url": redis_server.url, "master_name": "mymaster"})
    port = free_port()
    with pytest.raises(
        DriverError, match=rf"^sentinel_url: redis SENTINEL at 127.0.0.1:{port}: cannot connect"
    ):
        await act.invoke(ctx, {"sentinel_url": f"redis://127.0.0.1:{port}", "master_name": "mymaster"})
    assert ctx.reverts == [] and leases.list_leases() == []
    assert _role(group.master) == "master"


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[int, int]]:
    """A master and a replica of it, without Sentinel."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (run `make services`)")
    base = Path(tempfile.mkdtemp(prefix="faultplane-redispair-"))
    procs: list[subprocess.Popen[bytes]] = []
    ports = [free_port(), free_port()]
    try:
        for i, port in enumerate(ports):
            cmd = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(base)]
            cmd += ["--logfile", str(base / f"{port}.log")] + (
                ["--replicaof", "127.0.0.1", str(ports[0])] if i else []
            )
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            _wait_port(port, procs[-1], "redis-server", base / f"{port}.log")
        with redis.Redis(port=ports[1]) as r:
            assert _until(lambda: r.info("replication")["master_link_status"] == "up")
        yield ports[0], ports[1]
    finally:
        for proc in reversed(procs):
            _stop(proc)
        shutil.rmtree(base, ignore_errors=True)


async def test_promote_replica_takes_writes_and_follows_again_after_rollback(pair: tuple[int, int]) -> None:
    master, replica = pair
    m, r = redis.Redis(port=master), redis.Redis(port=replica)
    m.set("order", "1")
    assert _until(lambda: r.get("order") == b"1")
    with pytest.raises(redis.ReadOnlyError):
        r.set("x", "1")  # a replica refuses writes before the fault
    ctx = ActivityContext(run_id="promote")
    out = await get_activity("redis", "promote_replica").invoke(ctx, {"url": f"redis://127.0.0.1:{replica}"})
    assert out["was_replica_of"] == f"127.0.0.1:{master}"
    assert _role(replica) == "master"
    r.set("written-on-replica", "1")  # it takes writes now
    m.set("order", "2")
    time.sleep(0.5)
    assert r.get("order") == b"1"  # and no longer follows the master
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert _role(replica) == "slave"
    assert _until(lambda: r.get("order") == b"2")  # resynced from the master...
    assert r.get("written-on-replica") is None  # ...which discarded the split-brain write
    assert leases.list_leases() == []
    with pytest.raises(DriverError, match=rf"^url: 127.0.0.1:{master} is not a replica \(role master\)"):
        await get_activity("redis", "promote_replica").invoke(ctx, {"url": f"redis://127.0.0.1:{master}"})
    assert ctx.reverts == [] and leases.list_leases() == []
    m.close()
    r.close()
