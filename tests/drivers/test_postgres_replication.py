"""Replication faults on a real primary and a streaming replica started here (pg_basebackup): replay lag seen
by an application reading the replica, failover seen by an application with a multi-host DSN, and the
restart lease bringing a stopped server back with its own options."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from faultplane.drivers import leases
from faultplane.drivers.base import ActivityContext, DriverError, get_activity
from proc_helpers import free_port
from servers import _pg_bindir

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]


@dataclass(frozen=True)
class Pair:
    primary_dir: Path
    replica_dir: Path
    primary_port: int
    replica_port: int

    @property
    def primary(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.primary_port}/postgres"

    @property
    def replica(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.replica_port}/postgres"


def _run(prefix: list[str], *cmd: str) -> None:
    res = subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=180)
    if res.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {res.stdout}\n{res.stderr}")


def _wait_sql(dsn: str, query: str, want: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        with (
            contextlib.suppress(psycopg.OperationalError),
            psycopg.connect(dsn, autocommit=True, connect_timeout=2) as c,
        ):
            last = c.execute(query).fetchone()[0]  # type: ignore[index]
        if last == want:
            return
        time.sleep(0.1)
    raise AssertionError(f"{query} on {dsn}: {last!r}, wanted {want!r}")


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    """A primary (wal_log_hints on, so a failover can be rewound) and a streaming replica of it, started once
    for the module as the `postgres` user with pg_ctl (so postmaster.opts holds their ports)."""
    bindir = _pg_bindir()
    if bindir is None or not (bindir / "pg_basebackup").exists():
        pytest.skip("PostgreSQL server tools are not installed (run `make services`)")
    base = Path(tempfile.mkdtemp(prefix="faultplane-pgpair-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(base, pw.pw_uid, pw.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    os.chmod(base, 0o755)
    primary_dir, replica_dir = base / "primary", base / "replica"
    pp, rp = free_port(), free_port()
    opts = "-c listen_addresses=127.0.0.1 -k {sock} -c fsync=off -c wal_log_hints=on -c wal_keep_size=256MB"
    ctl = str(bindir / "pg_ctl")
    try:
        _run(prefix, str(bindir / "initdb"), "-D", str(primary_dir), "-U", "postgres", "-A", "trust",
             "--no-sync", "--no-instructions")  # fmt: skip
        _run(prefix, ctl, "-D", str(primary_dir), "start", "-w", "-l", str(base / "primary.log"),
             "-o", f"-p {pp} " + opts.format(sock=base))  # fmt: skip
        _run(prefix, str(bindir / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(pp), "-U", "postgres",
             "-D", str(replica_dir), "-R", "-X", "stream", "--no-sync")  # fmt: skip
        _run(prefix, ctl, "-D", str(replica_dir), "start", "-w", "-l", str(base / "replica.log"),
             "-o", f"-p {rp} " + opts.format(sock=base))  # fmt: skip
        p = Pair(primary_dir, replica_dir, pp, rp)
        _wait_sql(p.primary, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'", 1)
        with psycopg.connect(p.primary, autocommit=True) as c:
            c.execute("CREATE TABLE orders (id text PRIMARY KEY)")
        yield p
    finally:
        for d in (replica_dir, primary_dir):
            if (d / "PG_VERSION").exists():
                subprocess.run([*prefix, ctl, "-D", str(d), "stop", "-m", "immediate"], capture_output=True)
        if not os.environ.get("KEEP_PGPAIR"):  # keep the servers' logs to debug a failure
            shutil.rmtree(base, ignore_errors=True)


def _insert(dsn: str) -> str:
    key = uuid.uuid4().hex
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("INSERT INTO orders VALUES (%s)", [key])
    return key


def _on_replica(pair: Pair, key: str) -> bool:
    with psycopg.connect(pair.replica, autocommit=True) as c:
        try:
            return c.execute("SELECT count(*) FROM orders WHERE id = %s", [key]).fetchone() == (1,)
        except psycopg.errors.UndefinedTable:
            return False  # the replica has not replayed the CREATE TABLE yet: not there yet either


def _eventually_on_replica(pair: Pair, key: str, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _on_replica(pair, key):
            return True
        time.sleep(0.1)
    return False


async def test_paused_replay_leaves_replica_reads_stale_until_rollback(pair: Pair) -> None:
    assert _eventually_on_replica(pair, _insert(pair.primary))  # replicating before the fault
    ctx = ActivityContext(run_id="lag")
    out = await get_activity("postgres", "replication_lag").invoke(ctx, {"replica_dsn": pair.replica})
    assert out == {"mode": "pause"}
    assert [lease.revert for lease in leases.list_leases()] == ["resume_replay"]
    key = _insert(pair.primary)
    with psycopg.connect(pair.primary, autocommit=True) as c:  # more WAL than one row, so lag is plain
        c.execute("INSERT INTO orders SELECT md5(g::text) || %s FROM generate_series(1, 2000) g", [key])
    time.sleep(1.0)
    assert not _on_replica(pair, key)  # an application reading the replica does not see the order
    probe = get_activity("postgres", "replica_lag")
    lag = await probe.invoke(ctx, {"replica_dsn": pair.replica, "primary_dsn": pair.primary})
    assert lag["replay_paused"] is True and lag["lag_bytes"] > 50_000
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert _eventually_on_replica(pair, key)
    assert leases.list_leases() == []
    caught_up = await probe.invoke(ctx, {"replica_dsn": pair.replica})
    assert caught_up["replay_paused"] is False


async def test_apply_delay_makes_commits_arrive_late_and_is_restored(pair: Pair) -> None:
    ctx = ActivityContext(run_id="delay")
    out = await get_activity("postgres", "replication_lag").invoke(
        ctx, {"replica_dsn": pair.replica, "delay_seconds": 3600}
    )
    assert out == {"mode": "delay", "recovery_min_apply_delay": "3600000ms"}
    _wait_sql(pair.replica, "SHOW recovery_min_apply_delay", "1h")
    key = _insert(pair.primary)
    time.sleep(1.0)
    assert not _on_replica(pair, key)  # the commit is received but not applied for an hour
    assert [e for _, e in await ctx.revert_all()] == [None]
    _wait_sql(pair.replica, "SHOW recovery_min_apply_delay", "0")
    assert _eventually_on_replica(pair, key)  # the waiting commit is applied once the delay is gone
    assert leases.list_leases() == []


async def test_replication_lag_refuses_a_primary_and_leaves_nothing(pair: Pair) -> None:
    ctx = ActivityContext(run_id="lag-bad")
    with pytest.raises(DriverError, match=r"^replica_dsn: the server at 127.0.0.1:\d+ is not a replica"):
        await get_activity("postgres", "replication_lag").invoke(ctx, {"replica_dsn": pair.primary})
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    with pytest.raises(
        DriverError, match=r"^replica_dsn: cannot connect to PostgreSQL at 127.0.0.1:\d+: .*refused"
    ):
        await get_activity("postgres", "replication_lag").invoke(ctx, {"replica_dsn": closed})
    with pytest.raises(DriverError, match=r"^primary_dsn: cannot connect to PostgreSQL at 127.0.0.1:\d+: "):
        await get_activity("postgres", "failover").invoke(
            ctx,
            {"primary_dsn": closed, "replica_dsn": pair.replica, "replica_data_dir": str(pair.replica_dir)},
        )
    assert ctx.reverts == [] and leases.list_leases() == []


async def test_failover_promotes_the_replica_and_rollback_rejoins_it(pair: Pair) -> None:
    # The application connects to whichever server takes writes, as a client of a primary/replica pair does.
    app_dsn = (
        f"host=127.0.0.1,127.0.0.1 port={pair.primary_port},{pair.replica_port} user=postgres "
        "dbname=postgres target_session_attrs=read-write connect_timeout=3"
    )
    with psycopg.connect(app_dsn, autocommit=True) as c:
        assert c.execute("SELECT inet_server_port()").fetchone() == (pair.primary_port,)
    ctx = ActivityContext(run_id="fo")
    out = await get_activity("postgres", "failover").invoke(
        ctx,
        {
            "primary_dsn": pair.primary,
            "replica_dsn": pair.replica,
            "replica_data_dir": str(pair.replica_dir),
            "primary_data_dir": str(pair.primary_dir),
        },
    )
    assert out["primary_stopped"] is True and out["promoted"] == f"127.0.0.1:{pair.replica_port}"
    with psycopg.connect(app_dsn, autocommit=True) as c:  # writes now land on the promoted replica
        assert c.execute("SELECT inet_server_port()").fetchone() == (pair.replica_port,)
        c.execute("INSERT INTO orders VALUES ('written-during-failover')")
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert leases.list_leases() == []
    # The primary takes writes again, the old replica is a replica again and replicates them.
    with psycopg.connect(app_dsn, autocommit=True) as c:
        assert c.execute("SELECT inet_server_port()").fetchone() == (pair.primary_port,)
    _wait_sql(pair.replica, "SELECT pg_is_in_recovery()", True)
    assert _eventually_on_replica(pair, _insert(pair.primary))
    assert not _on_replica(pair, "written-during-failover")  # rewound onto the primary's history


async def test_failover_refuses_a_pair_that_is_not_one(pair: Pair, postgres_server) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="fo-bad")
    args = {
        "primary_dsn": pair.primary,
        "replica_dsn": pair.replica,
        "replica_data_dir": str(pair.replica_dir),
    }
    failover = get_activity("postgres", "failover")
    with pytest.raises(
        DriverError, match=r"^replica_dsn: .* is not a replica of .*system identifiers differ"
    ):
        await failover.invoke(ctx, {**args, "primary_dsn": postgres_server.dsn})
    with pytest.raises(DriverError, match=r"^replica_dsn: the server at .* is not a replica"):
        await failover.invoke(ctx, {**args, "replica_dsn": pair.primary})
    with pytest.raises(DriverError, match=r"^replica_data_dir: '/nonexistent' is not a PostgreSQL data"):
        await failover.invoke(ctx, {**args, "replica_data_dir": "/nonexistent"})
    assert ctx.reverts == [] and leases.list_leases() == []
    with psycopg.connect(pair.replica, autocommit=True) as c:
        assert c.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)


def test_restart_lease_starts_a_stopped_server_with_its_own_options(pair: Pair) -> None:
    """What the watchdog runs when a restart's controller died with the server down: the server comes back
    on its own port (postmaster.opts), not on pg_ctl's default."""
    from faultplane.drivers import postgres

    res = postgres._pg_ctl(pair.replica_dir, "stop", "-m", "fast", "-w")
    assert res.returncode == 0, res.stderr
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(pair.replica, connect_timeout=2)
    leases.run_recipe("postgres", "ensure_running", {"data_dir": str(pair.replica_dir)})
    _wait_sql(pair.replica, "SELECT pg_is_in_recovery()", True)
    assert _eventually_on_replica(pair, _insert(pair.primary))
