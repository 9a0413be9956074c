"""Redis faults and probes (redis-py, blocking calls in worker threads).

Connection exhaustion holds its connections in a separate holder process (see
:mod:`faultplane.drivers.holder`): the revert kills it, which needs no free connection slot. Evicted keys are
``DUMP``-ed first and ``RESTORE``-d on rollback, unless the application re-created them meanwhile.
"""

from __future__ import annotations

import base64
import contextlib
import statistics
import threading
import time
import uuid
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
import redis
from pydantic import BaseModel, ConfigDict, Field

from faultplane.drivers.base import ActivityContext, DriverError, action, probe
from faultplane.drivers.blast import BlastRadius, select_targets
from faultplane.drivers.endpoints import RedisUrl
from faultplane.drivers.holder import hold_connections, kill_holder
from faultplane.drivers.leases import (
    apply_or_revert,
    hold_then_revert,
    lease_ttl,
    leased_revert,
    revert_recipe,
    withdraw,
)
from faultplane.drivers.params import HoldSeconds, WaitSeconds
from faultplane.drivers.sealing import mask_text

__all__: list[str] = []

_TIMEOUT_S = 5.0


class _Url(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: RedisUrl = Field(description="redis://[user:password@]host:port/db")


def _client(url: str, **kw: Any) -> redis.Redis:
    try:
        return redis.Redis.from_url(
            url, socket_connect_timeout=_TIMEOUT_S, socket_timeout=kw.pop("timeout", _TIMEOUT_S), **kw
        )
    except (ValueError, TypeError) as exc:
        raise DriverError(
            f"url: not a Redis URL ({mask_text(str(exc))}); expected redis://[user:password@]host:port/db"
        ) from None


def _address(url: str) -> str:
    try:
        parts = urlsplit(url)
        return f"{parts.hostname or '?'}:{parts.port or 6379}"
    except ValueError:
        return "?"


def _err(what: str, exc: Exception, url: str | None = None, timeout: float = _TIMEOUT_S) -> DriverError:
    """One line naming the field, the address and the cause (never the password)."""
    where = f" at {_address(url)}" if url else ""
    if isinstance(exc, redis.AuthenticationError) or "WRONGPASS" in str(exc) or "NOAUTH" in str(exc):
        cause = (
            f"the server refused the credentials ({mask_text(str(exc))}); check the user and password in url"
        )
    elif isinstance(exc, redis.TimeoutError):
        cause = (
            f"no reply within {timeout:g}s (the port accepts connections but nothing answers: is it a Redis "
            "server, or is it paused or blocked?)"
        )
    elif isinstance(exc, redis.ConnectionError):
        cause = f"cannot connect: {mask_text(str(exc))}"
    else:
        cause = mask_text(str(exc))
    return DriverError(f"url: redis {what}{where}: {cause}")


def _connected(url: str, **kw: Any) -> redis.Redis:
    """A client that has connected, authenticated and answered PING: a fault applied after this reached the
    server, one that fails here has applied nothing (so it leaves no lease)."""
    client = _client(url, **kw)
    try:
        client.ping()
    except redis.RedisError as exc:
        client.close()
        raise _err("PING", exc, url) from None
    return client


# --- CLIENT PAUSE ---------------------------------------------------------------------------------------------


@revert_recipe("redis", "unpause")
def _recipe_unpause(args: dict[str, Any]) -> None:
    # Some servers (Redis 7.0 under PAUSE ALL) hold even CLIENT UNPAUSE until the pause ends; the pause is
    # bounded by its own timeout, so a revert that cannot get through in time is not a failure.
    try:
        with _client(args["url"], timeout=1.0) as r:
            r.execute_command("CLIENT", "UNPAUSE")
    except redis.TimeoutError:
        pass


class PauseParams(_Url):
    timeout_ms: int = Field(ge=1, le=3_600_000, description="Redis ends the pause by itself after this")
    mode: Literal["ALL", "WRITE"] = Field(
        default="ALL", description="ALL blocks every command, WRITE only writes"
    )


@action("redis", "client_pause", PauseParams, fault_type="timeout")
async def client_pause(ctx: ActivityContext, p: PauseParams) -> dict[str, Any]:
    """CLIENT PAUSE: clients block for ``timeout_ms``; rollback sends CLIENT UNPAUSE (Redis >= 6.2).

    Under mode ALL, Redis 7.0 also holds CLIENT UNPAUSE, so the pause then lasts its full ``timeout_ms``.
    """
    client = await anyio.to_thread.run_sync(_connected, p.url)  # fails before anything is applied
    try:
        leased_revert(
            ctx, label=f"redis: CLIENT UNPAUSE {p.url}", driver="redis", revert="unpause", args={"url": p.url}
        )
        try:
            await anyio.to_thread.run_sync(client.execute_command, "CLIENT", "PAUSE", p.timeout_ms, p.mode)
        except redis.RedisError as exc:
            raise _err("CLIENT PAUSE", exc, p.url) from None
    finally:
        client.close()
    return {"paused_ms": p.timeout_ms, "mode": p.mode}


# --- DEBUG SLEEP ----------------------------------------------------------------------------------------------


class SleepParams(_Url):
    seconds: float = Field(
        gt=0, le=300, description="the server is blocked for this long (cannot be cut short)"
    )
    wait: bool = Field(default=False, description="return only when the server wakes up")


@action("redis", "debug_sleep", SleepParams, fault_type="timeout")
async def debug_sleep(ctx: ActivityContext, p: SleepParams) -> dict[str, Any]:
    """DEBUG SLEEP: the whole server stops answering for ``seconds`` (needs enable-debug-command).

    Bounded by construction, so there is nothing to revert: the server resumes when the sleep ends.
    """
    started = threading.Event()
    errors: list[BaseException] = []

    def sleep() -> None:
        try:
            with _client(p.url, timeout=p.seconds + _TIMEOUT_S) as r:
                r.ping()
                started.set()
                r.execute_command("DEBUG", "SLEEP", p.seconds)
        except BaseException as exc:
            errors.append(exc)
            started.set()

    t = threading.Thread(target=sleep, name="faultplane-redis-debug-sleep", daemon=True)
    t.start()
    await anyio.to_thread.run_sync(started.wait, _TIMEOUT_S)
    await anyio.sleep(0.05)  # let the DEBUG command reach the server before returning
    if errors:
        raise _err("DEBUG SLEEP", errors[0], p.url) from None  # type: ignore[arg-type]
    if p.wait:
        await anyio.to_thread.run_sync(t.join, p.seconds + 2 * _TIMEOUT_S)
        if errors:
            raise _err("DEBUG SLEEP", errors[0], p.url) from None  # type: ignore[arg-type]
    return {"slept_s": p.seconds}


# --- connection exhaustion ------------------------------------------------------------------------------------


def _kill_named(url: str, name: str) -> int:
    killed = 0
    with _client(url) as r:
        for c in r.client_list():
            if c.get("name") == name:
                try:
                    r.execute_command("CLIENT", "KILL", "ID", c["id"])
                    killed += 1
                except redis.ResponseError:
                    pass
    return killed


def _named_left(url: str, name: str) -> int | None:
    """How many clients named ``name`` the server still lists; None when it cannot be asked right now."""
    try:
        with _client(url, timeout=2.0) as r:
            return sum(1 for c in r.client_list() if c.get("name") == name)
    except redis.RedisError:
        return None


@revert_recipe("redis", "kill_named")
def _recipe_kill_named(args: dict[str, Any]) -> None:
    # Killing the holder process needs no free slot: the kernel closes its sockets and Redis drops the clients.
    # With no holder left its sockets are already closed; named clients still listed (a holder from an older
    # version, a client that reused the name) are CLIENT KILLed if the server can be reached.
    killed = kill_holder(args["name"])
    deadline = time.monotonic() + (5.0 if killed else 1.0)
    while time.monotonic() < deadline:
        left = _named_left(args["url"], args["name"])
        if left == 0 or (left is None and not killed):
            return
        if left and not killed:
            with contextlib.suppress(redis.RedisError):
                _kill_named(args["url"], args["name"])
        time.sleep(0.02)


class ExhaustParams(_Url):
    connections: int | None = Field(
        default=None, ge=1, le=100_000, description="connections to hold; omit to fill up to maxclients"
    )
    leave_free: int = Field(
        default=0,
        ge=0,
        description="slots to leave free when filling up to maxclients (the revert does not need one)",
    )
    require_all: bool = Field(
        default=False,
        description="fail (and release them) when the server gives fewer connections than requested",
    )
    duration_seconds: HoldSeconds = None


@action("redis", "exhaust_connections", ExhaustParams, fault_type="resource_exhaustion")
async def exhaust_connections(ctx: ActivityContext, p: ExhaustParams) -> dict[str, Any]:
    """Hold connections open (client name tagged) from a holder process, filling up to maxclients by default.

    Rollback kills the holder; its sockets close and Redis frees the slots, so the revert works even when
    every slot is taken, and the lease watchdog can run it when the controller is dead or hung.
    """
    await anyio.to_thread.run_sync(lambda: _connected(p.url).close())  # fails before anything is applied
    name = f"faultplane-hold-{uuid.uuid4().hex[:10]}"
    what = p.connections if p.connections is not None else "maxclients"
    result = await hold_connections(
        ctx,
        "redis",
        p.url,
        name,
        p,
        label=f"redis: close held connections ({name}, up to {what})",
        revert="kill_named",
        revert_args={"url": p.url, "name": name},
    )
    return {**result, "client_name": name}


# --- key eviction ---------------------------------------------------------------------------------------------


@revert_recipe("redis", "restore_keys")
def _recipe_restore(args: dict[str, Any]) -> dict[str, int]:
    """RESTORE each evicted key that is still absent. No REPLACE: a key the application wrote again during
    the fault holds newer data than our snapshot, so Redis refuses it with BUSYKEY and the app's value stays."""
    restored = kept = 0
    with _client(args["url"]) as r:
        pipe = r.pipeline(transaction=False)
        for key_b64, ttl, dump_b64 in args["keys"]:
            key, dump = base64.b64decode(key_b64), base64.b64decode(dump_b64)
            pipe.restore(key, max(0, int(ttl)), dump)
        for res in pipe.execute(raise_on_error=False):
            if not isinstance(res, Exception):
                restored += 1
            elif str(res).startswith("BUSYKEY") or "Target key name already exists" in str(res):
                kept += 1
            else:
                raise res
    return {"restored": restored, "kept_app_value": kept}


class EvictParams(_Url, BlastRadius):
    pattern: str = Field(default="*", description="SCAN MATCH pattern selecting candidate keys")
    max_keys: int = Field(default=10_000, ge=1, le=1_000_000, description="refuse above this many candidates")


def _evict(url: str, p: EvictParams, rng: Any) -> tuple[list[list[Any]], int]:
    with _client(url) as r:
        keys = sorted(r.scan_iter(match=p.pattern, count=1000))
        if len(keys) > p.max_keys:
            raise DriverError(
                f"pattern: {p.pattern!r} matches {len(keys)} keys, more than max_keys={p.max_keys}; "
                "narrow the pattern or raise max_keys"
            )
        chosen = select_targets(keys, count=p.count, percentage=p.percentage, rng=rng)
        pipe = r.pipeline(transaction=False)
        for k in chosen:
            pipe.dump(k)
            pipe.pttl(k)
        res = pipe.execute()
        saved = []
        for i, k in enumerate(chosen):
            dump, ttl = res[2 * i], res[2 * i + 1]
            if dump is None:
                continue  # expired meanwhile
            saved.append(
                [base64.b64encode(k).decode(), ttl if ttl and ttl > 0 else 0, base64.b64encode(dump).decode()]
            )
    return saved, len(keys)


@action("redis", "evict_keys", EvictParams, fault_type="error")
async def evict_keys(ctx: ActivityContext, p: EvictParams) -> dict[str, Any]:
    """Delete matching keys (blast radius: count or percentage) as if evicted; rollback RESTOREs them."""
    try:
        saved, matched = await anyio.to_thread.run_sync(_evict, p.url, p, ctx.rng)
    except redis.RedisError as exc:
        raise _err("SCAN/DUMP", exc, p.url) from None
    leased_revert(
        ctx,
        label=f"redis: restore {len(saved)} evicted keys",
        driver="redis",
        revert="restore_keys",
        args={"url": p.url, "keys": saved},
    )

    def delete() -> int:
        with _client(p.url) as r:
            return int(r.delete(*[base64.b64decode(k) for k, _, _ in saved])) if saved else 0

    deleted = await anyio.to_thread.run_sync(delete)
    return {
        "matched": matched,
        "evicted": deleted,
        "keys": [base64.b64decode(k).decode(errors="replace") for k, _, _ in saved][:100],
    }


# --- mass expiry ----------------------------------------------------------------------------------------------


@revert_recipe("redis", "unexpire")
def _recipe_unexpire(args: dict[str, Any]) -> dict[str, int]:
    """Put back each key's original TTL; RESTORE the ones that expired (without REPLACE: a key the application
    re-created meanwhile keeps the application's value and TTL)."""
    restored = reset = 0
    with _client(args["url"]) as r:
        for key_b64, ttl, dump_b64, expire_at_ms in args["keys"]:
            key = base64.b64decode(key_b64)
            if r.exists(key):
                # ours only while it still carries the TTL the fault gave it
                if abs(int(r.pexpiretime(key)) - int(expire_at_ms)) <= 5:
                    r.persist(key) if not ttl else r.pexpire(key, int(ttl))
                    reset += 1
                continue
            try:
                r.restore(key, max(0, int(ttl)), base64.b64decode(dump_b64))
                restored += 1
            except redis.ResponseError as exc:
                if "BUSYKEY" not in str(exc) and "already exists" not in str(exc):
                    raise
    return {"restored": restored, "ttl_reset": reset}


class ExpireParams(EvictParams):
    seconds: float = Field(default=1.0, gt=0, le=86_400, description="every chosen key expires after this")


@action("redis", "mass_expire", ExpireParams, fault_type="error")
async def mass_expire(ctx: ActivityContext, p: ExpireParams) -> dict[str, Any]:
    """Give matching keys (blast radius) one TTL so they all expire at the same moment: a cache stampede.
    Rollback RESTOREs the expired ones and puts back every key's own TTL."""
    try:
        saved, matched = await anyio.to_thread.run_sync(_evict, p.url, p, ctx.rng)
    except redis.RedisError as exc:
        raise _err("SCAN/DUMP", exc, p.url) from None
    expire_at_ms = int((time.time() + p.seconds) * 1000)
    entry = leased_revert(
        ctx,
        label=f"redis: restore {len(saved)} mass-expired keys",
        driver="redis",
        revert="unexpire",
        args={"url": p.url, "keys": [[k, ttl, d, expire_at_ms] for k, ttl, d in saved]},
    )

    def expire() -> int:
        with _client(p.url) as r:
            pipe = r.pipeline(transaction=True)  # one moment for all of them
            for k, _, _ in saved:
                pipe.pexpireat(base64.b64decode(k), expire_at_ms)
            return sum(1 for ok in pipe.execute() if ok)

    try:
        done = await apply_or_revert(ctx, entry, expire)
    except redis.RedisError as exc:
        raise _err("PEXPIREAT", exc, p.url) from None
    return {"matched": matched, "expiring": done, "expire_at_ms": expire_at_ms}


# --- maxmemory pressure ---------------------------------------------------------------------------------------


@revert_recipe("redis", "restore_config")
def _recipe_restore_config(args: dict[str, Any]) -> None:
    with _client(args["url"]) as r:
        current = r.config_get(*args["applied"])
        # a value someone changed again since the fault is theirs: put back only what is still ours
        back = {k: v for k, v in args["previous"].items() if str(current.get(k)) == str(args["applied"][k])}
        if back:
            r.execute_command("CONFIG", "SET", *[x for kv in back.items() for x in kv])


class MaxmemoryParams(_Url):
    maxmemory_bytes: int | None = Field(
        default=None, ge=1_048_576, description="the new limit; omit to set it just above what is used now"
    )
    headroom_bytes: int = Field(
        default=1_048_576, ge=0, description="with maxmemory_bytes omitted: used memory + this much"
    )
    policy: Literal[
        "allkeys-lru",
        "allkeys-lfu",
        "allkeys-random",
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
        "noeviction",
    ] = Field(default="allkeys-lru", description="noeviction makes writes fail with OOM instead of evicting")
    duration_seconds: HoldSeconds = None


@action("redis", "maxmemory_pressure", MaxmemoryParams, fault_type="resource_exhaustion")
async def maxmemory_pressure(ctx: ActivityContext, p: MaxmemoryParams) -> dict[str, Any]:
    """CONFIG SET maxmemory (default: just above current use) and maxmemory-policy, so new writes evict keys
    (or fail with OOM under noeviction). Rollback restores both values."""
    client = await anyio.to_thread.run_sync(_connected, p.url)
    try:

        def read() -> tuple[dict[str, str], int]:
            prev = client.config_get("maxmemory", "maxmemory-policy")
            used = int(client.info("memory")["used_memory"])
            return {str(k): str(v) for k, v in prev.items()}, used

        try:
            previous, used = await anyio.to_thread.run_sync(read)
        except redis.RedisError as exc:
            raise _err("CONFIG GET", exc, p.url) from None
        limit = p.maxmemory_bytes if p.maxmemory_bytes is not None else used + p.headroom_bytes
        applied = {"maxmemory": str(limit), "maxmemory-policy": p.policy}
        entry = leased_revert(
            ctx,
            label=f"redis: restore maxmemory {previous.get('maxmemory')} ({previous.get('maxmemory-policy')})",
            driver="redis",
            revert="restore_config",
            args={"url": p.url, "previous": previous, "applied": applied},
        )
        try:
            await anyio.to_thread.run_sync(
                lambda: client.execute_command(
                    "CONFIG", "SET", "maxmemory", limit, "maxmemory-policy", p.policy
                )
            )
        except redis.ResponseError as exc:
            withdraw(ctx, entry)  # CONFIG SET is atomic: refused means nothing changed
            raise _err("CONFIG SET", exc, p.url) from None
    finally:
        client.close()
    result: dict[str, Any] = {
        "maxmemory": limit,
        "used_memory": used,
        "policy": p.policy,
        "previous": previous,
    }
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        result["restored_after_s"] = p.duration_seconds
    return result


# --- CLIENT KILL ----------------------------------------------------------------------------------------------


class ClientKillParams(_Url, BlastRadius):
    name_pattern: str | None = Field(default=None, description="regex on the client name (CLIENT SETNAME)")
    addr_pattern: str | None = Field(default=None, description="regex on the client's ip:port")
    user: str | None = Field(default=None, description="only clients authenticated as this ACL user")


@action("redis", "client_kill", ClientKillParams, fault_type="error")
def client_kill(ctx: ActivityContext, p: ClientKillParams) -> dict[str, Any]:
    """CLIENT KILL the application's connections (normal clients matching the filters; blast radius: count or
    percentage), never this action's own. Nothing to revert: a killed connection is gone; the fault tests
    whether the application reconnects."""
    import re

    if p.name_pattern is None and p.addr_pattern is None and p.user is None:
        raise DriverError(
            "name_pattern: give name_pattern, addr_pattern or user: killing every client is refused"
        )
    try:
        name_rx = re.compile(p.name_pattern) if p.name_pattern else None
        addr_rx = re.compile(p.addr_pattern) if p.addr_pattern else None
    except re.error as exc:
        raise DriverError(f"name_pattern/addr_pattern: not a regex: {exc}") from None
    with _connected(p.url) as r:
        own = r.client_id()
        matched = [
            c
            for c in r.client_list(_type="normal")
            if int(c["id"]) != own
            and (name_rx is None or name_rx.search(c.get("name", "")))
            and (addr_rx is None or addr_rx.search(c.get("addr", "")))
            and (p.user is None or c.get("user") == p.user)
        ]
        chosen = select_targets(
            sorted(matched, key=lambda c: int(c["id"])), count=p.count, percentage=p.percentage, rng=ctx.rng
        )
        killed = []
        for c in chosen:
            try:
                r.execute_command("CLIENT", "KILL", "ID", c["id"])
                killed.append({"id": int(c["id"]), "addr": c.get("addr"), "name": c.get("name")})
            except redis.ResponseError:
                pass  # it left on its own meanwhile
    return {"matched": len(matched), "killed": killed}


# --- replica promotion (no Sentinel) --------------------------------------------------------------------------


@revert_recipe("redis", "follow_master")
def _recipe_follow_master(args: dict[str, Any]) -> None:
    with _client(args["url"]) as r:
        info = r.info("replication")
        if info.get("role") == "slave" and (
            str(info.get("master_host")),
            int(info.get("master_port", 0)),
        ) == (
            args["master_host"],
            int(args["master_port"]),
        ):
            return  # already following its master again
        r.execute_command("REPLICAOF", args["master_host"], str(args["master_port"]))


class PromoteParams(_Url):
    duration_seconds: HoldSeconds = Field(default=None, description="follow the master again after this long")


@action("redis", "promote_replica", PromoteParams, fault_type="error")
async def promote_replica(ctx: ActivityContext, p: PromoteParams) -> dict[str, Any]:
    """``REPLICAOF NO ONE`` on a replica (``url``): it stops following its master and takes writes — a
    failover without Sentinel, or a split brain when the master still runs. Rollback makes it follow the same
    master again (a full resync: what was written on it meanwhile is discarded)."""
    client = await anyio.to_thread.run_sync(_connected, p.url)
    try:
        try:
            info = await anyio.to_thread.run_sync(lambda: client.info("replication"))
        except redis.RedisError as exc:
            raise _err("INFO", exc, p.url) from None
        if info.get("role") != "slave":
            raise DriverError(f"url: {_address(p.url)} is not a replica (role {info.get('role')})")
        master = {"master_host": str(info["master_host"]), "master_port": int(info["master_port"])}
        entry = leased_revert(
            ctx,
            label=f"redis: {_address(p.url)} follows {master['master_host']}:{master['master_port']} again",
            driver="redis",
            revert="follow_master",
            args={"url": p.url, **master},
        )
        try:
            await apply_or_revert(ctx, entry, client.execute_command, "REPLICAOF", "NO", "ONE")
        except redis.RedisError as exc:
            raise _err("REPLICAOF", exc, p.url) from None
    finally:
        client.close()
    result: dict[str, Any] = {
        "promoted": _address(p.url),
        "was_replica_of": f"{master['master_host']}:{master['master_port']}",
    }
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        result["restored_after_s"] = p.duration_seconds
    return result


# --- Sentinel failover ----------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _sentinel_master(r: redis.Redis, name: str) -> str:
    addr = r.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)
    if not addr:
        raise DriverError(f"master_name: the Sentinel monitors no master named {name!r}")
    host, port = (_text(x) for x in addr)
    return f"{host}:{port}"


def _settled_master(r: redis.Redis, name: str) -> str | None:
    """The master once no failover is in progress, else None. GET-MASTER-ADDR-BY-NAME names the promoted
    replica as soon as it is promoted, while Sentinel still reconfigures the other replicas and clients
    asking SENTINEL MASTERS (redis-py's Sentinel) still get the old one."""
    raw = r.execute_command("SENTINEL", "MASTER", name)
    pairs = list(raw.items()) if isinstance(raw, dict) else list(zip(raw[0::2], raw[1::2], strict=False))
    info = {_text(k): _text(v) for k, v in pairs}
    if "failover_in_progress" in info.get("flags", ""):
        return None
    return f"{info.get('ip')}:{info.get('port')}"


def _sentinel_replicas(r: redis.Redis, name: str) -> list[dict[str, str]]:
    """The replicas Sentinel knows of ``name``, each a dict of its fields (ip, port, flags, ...)."""
    out = []
    for raw in r.execute_command("SENTINEL", "REPLICAS", name) or []:
        pairs = list(raw.items()) if isinstance(raw, dict) else list(zip(raw[0::2], raw[1::2], strict=False))
        item = {_text(k): _text(v) for k, v in pairs}
        out.append(item)
    return out


def _healthy(replica: dict[str, str]) -> bool:
    flags = replica.get("flags", "")
    return not any(f in flags for f in ("s_down", "o_down", "disconnected")) and (
        replica.get("master-link-status") == "ok"
    )


def _failover_to(r: redis.Redis, name: str, want: str | None, deadline: float) -> str:
    """SENTINEL FAILOVER until the master is ``want`` (any other master when ``want`` is None). Sentinel refuses while a failover is in progress or no replica qualifies yet (a
    demoted master is reconfigured as a replica within seconds): both are retried until ``deadline``."""
    start = _sentinel_master(r, name)
    last = ""
    while time.monotonic() < deadline:
        current = _settled_master(r, name)
        if current is not None and ((want is None and current != start) or current == want):
            return current
        try:
            r.execute_command("SENTINEL", "FAILOVER", name)
        except redis.ResponseError as exc:
            last = str(exc)  # INPROG / NOGOODSLAVE: wait and try again
        time.sleep(0.5)
    raise DriverError(
        f"master_name: Sentinel did not move {name!r} {'to ' + want if want else 'off ' + start} "
        f"in time ({last or 'master unchanged'})"
    )


def _steer(want: str, replicas: list[dict[str, str]], password: str | None) -> dict[str, str]:
    """Make ``want`` the only replica Sentinel may promote: replica-priority 0 on the others. Returns their
    earlier priorities, {addr: priority}, to put back."""
    earlier: dict[str, str] = {}
    for rep in replicas:
        addr = f"{rep.get('ip')}:{rep.get('port')}"
        if addr == want or not _healthy(rep):
            continue
        host, port = addr.rsplit(":", 1)
        with redis.Redis(
            host=host, port=int(port), password=password, socket_timeout=_TIMEOUT_S, socket_connect_timeout=2
        ) as node:
            earlier[addr] = str(node.config_get("replica-priority")["replica-priority"])
            node.config_set("replica-priority", 0)
    return earlier


@revert_recipe("redis", "sentinel_failback")
def _recipe_sentinel_failback(args: dict[str, Any]) -> None:
    name, want = args["master_name"], args["original_master"]
    deadline = time.monotonic() + float(args.get("timeout_seconds", 60))
    with _client(args["sentinel_url"]) as r:
        if _sentinel_master(r, name) == want:
            return  # already back (or never moved)
        while True:  # the old master must first be known, and in sync, as a replica of the new one
            reps = _sentinel_replicas(r, name)
            if any(f"{x.get('ip')}:{x.get('port')}" == want and _healthy(x) for x in reps):
                break
            if time.monotonic() > deadline:
                raise DriverError(
                    f"master_name: {want} is not a healthy replica of {name!r}; cannot fail back"
                )
            time.sleep(0.5)
        earlier = _steer(want, reps, args.get("node_password"))
        try:
            _failover_to(r, name, want, deadline)
        finally:
            for addr, prio in earlier.items():
                host, port = addr.rsplit(":", 1)
                with (
                    contextlib.suppress(redis.RedisError),
                    redis.Redis(
                        host=host,
                        port=int(port),
                        password=args.get("node_password"),
                        socket_timeout=_TIMEOUT_S,
                    ) as node,
                ):
                    node.config_set("replica-priority", int(prio))


class SentinelFailoverParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sentinel_url: RedisUrl = Field(description="one Sentinel: redis://[:password@]host:26379")
    master_name: str = Field(
        min_length=1, description="the monitored master's name (sentinel monitor <name>)"
    )
    node_password: str | None = Field(
        default=None,
        description="password of the Redis servers themselves (the revert sets replica-priority on the "
        "replicas that must not take over); use a secret",
    )
    timeout_seconds: WaitSeconds = 60
    duration_seconds: HoldSeconds = Field(
        default=None, description="fail back after this long; omit to hold until rollback"
    )


@action("redis", "sentinel_failover", SentinelFailoverParams, fault_type="error")
async def sentinel_failover(ctx: ActivityContext, p: SentinelFailoverParams) -> dict[str, Any]:
    """``SENTINEL FAILOVER``: a replica becomes the master and the old master a replica of it, exactly as
    after a real failover (clients that ask Sentinel move; clients pinned to the old master get READONLY).
    Rollback fails back: once the old master is an in-sync replica, the other replicas get replica-priority 0
    for a moment and Sentinel fails over again to it."""

    def check() -> str:
        with _client(p.sentinel_url) as r:
            try:
                master = _sentinel_master(r, p.master_name)
                replicas = _sentinel_replicas(r, p.master_name)
            except redis.ResponseError as exc:
                raise DriverError(
                    f"sentinel_url: {_address(p.sentinel_url)} is not a Sentinel: {exc}"
                ) from None
            except redis.RedisError as exc:
                raise DriverError(f"sentinel_{_err('SENTINEL', exc, p.sentinel_url)}") from None
        if not any(_healthy(x) for x in replicas):
            raise DriverError(
                f"master_name: {p.master_name!r} ({master}) has no healthy replica to fail over to"
            )
        return master

    original = await anyio.to_thread.run_sync(check)
    entry = leased_revert(
        ctx,
        label=f"redis: fail {p.master_name} back to {original} (Sentinel {_address(p.sentinel_url)})",
        driver="redis",
        revert="sentinel_failback",
        args={
            "sentinel_url": p.sentinel_url,
            "master_name": p.master_name,
            "original_master": original,
            "node_password": p.node_password,
            "timeout_seconds": p.timeout_seconds,
        },
        ttl_s=lease_ttl(ctx, at_least=p.timeout_seconds * 2),
    )

    def apply() -> tuple[str, float]:
        t0 = time.monotonic()
        try:
            with _client(p.sentinel_url) as r:
                new = _failover_to(r, p.master_name, None, t0 + p.timeout_seconds)
        except redis.RedisError as exc:
            raise DriverError(f"sentinel_{_err('SENTINEL FAILOVER', exc, p.sentinel_url)}") from None
        return new, time.monotonic() - t0

    new, took = await apply_or_revert(ctx, entry, apply)
    result: dict[str, Any] = {"old_master": original, "new_master": new, "failover_in_s": round(took, 3)}
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        result["failed_back_after_s"] = p.duration_seconds
    return result


# --- probes ---------------------------------------------------------------------------------------------------


class PingParams(_Url):
    samples: int = Field(default=5, ge=1, le=1000)


@probe("redis", "ping_latency", PingParams)
def ping_latency(ctx: ActivityContext, p: PingParams) -> dict[str, float]:
    """PING round trips: p50/mean/max in milliseconds."""
    out = []
    try:
        with _client(p.url) as r:
            for _ in range(p.samples):
                t0 = time.perf_counter()
                r.ping()
                out.append((time.perf_counter() - t0) * 1000.0)
    except redis.RedisError as exc:
        raise _err("PING", exc, p.url) from None
    return {"p50_ms": statistics.median(out), "mean_ms": statistics.fmean(out), "max_ms": max(out)}


@probe("redis", "connected_clients", _Url)
def connected_clients(ctx: ActivityContext, p: _Url) -> int:
    """INFO clients -> connected_clients (includes the probe's own connection)."""
    try:
        with _client(p.url) as r:
            return int(r.info("clients")["connected_clients"])
    except redis.RedisError as exc:
        raise _err("INFO", exc, p.url) from None


class InfoParams(_Url):
    section: str = Field(default="default")
    field: str | None = Field(default=None, description="return only this field of the section")


@probe("redis", "info", InfoParams)
def info(ctx: ActivityContext, p: InfoParams) -> Any:
    """INFO <section> (or one field of it)."""
    try:
        with _client(p.url) as r:
            data = r.info(p.section)
    except redis.RedisError as exc:
        raise _err("INFO", exc, p.url) from None
    if p.field is None:
        return data
    if p.field not in data:
        raise DriverError(f"field: INFO {p.section} has no field {p.field!r}")
    return data[p.field]


class AvailableParams(_Url):
    timeout_seconds: float = Field(default=2, gt=0, le=60)


@probe("redis", "is_available", AvailableParams)
def is_available(ctx: ActivityContext, p: AvailableParams) -> bool:
    """True when PING answers within ``timeout_seconds``."""
    try:
        with redis.Redis.from_url(
            p.url, socket_timeout=p.timeout_seconds, socket_connect_timeout=p.timeout_seconds
        ) as r:
            return bool(r.ping())
    except (redis.RedisError, OSError):
        return False
