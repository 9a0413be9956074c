"""The ``netproxy`` driver: a TCP fault proxy (after Toxiproxy) driven from experiments and the fault registry.

Routes run in-process (they live as long as the controller's event loop: fine for tests and for a controller
that also owns the traffic) or in a standalone proxy process (``faultplane drivers proxy`` /
``python -m faultplane.drivers.netproxy``) driven through its loopback control API when an action is given
``control_url``. Faults on a standalone proxy are leased: if the controller dies, the watchdog removes them.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from faultplane.drivers.base import ActivityContext, DriverError, action, probe
from faultplane.drivers.leases import hold_then_revert, leased_revert, revert_now, revert_recipe, withdraw
from faultplane.drivers.netproxy.control import ProxyManager
from faultplane.drivers.netproxy.proxy import Route, parse_hostport
from faultplane.drivers.netproxy.toxics import (
    Latency,
    NetworkPartition,
    Timeout,
    Toxic,
    parse_toxic,
)
from faultplane.drivers.params import HoldSeconds

__all__ = ["ProxyManager", "Route", "in_process_manager", "parse_hostport", "parse_toxic"]

_MANAGERS: dict[int, tuple[asyncio.AbstractEventLoop, ProxyManager]] = {}


def in_process_manager() -> ProxyManager:
    """The routes of the running event loop (routes are bound to the loop that created them)."""
    loop = asyncio.get_running_loop()
    for key in [k for k, (lp, _) in _MANAGERS.items() if lp.is_closed()]:
        del _MANAGERS[key]
    hit = _MANAGERS.get(id(loop))
    if hit is None or hit[0] is not loop:
        from faultplane.drivers.netproxy.registry import registry_available

        hit = (loop, ProxyManager(fault_source=True if registry_available() else None))
        _MANAGERS[id(loop)] = hit
    mgr = hit[1]
    return mgr


def _control(url: str) -> str:
    url = url.rstrip("/")
    return url if url.startswith(("http://", "https://")) else f"http://{url}"


_CONTROL_TIMEOUT_S = 10.0


class NotApplied(DriverError):
    """The control API refused the request or was never reached: the proxy changed nothing."""


def _unreachable(url: str, method: str, path: str, exc: Exception) -> DriverError:
    """One line naming the field, the address and the cause of a failed control call."""
    where = f"control_url: netproxy control API at {_control(url)} ({method} {path})"
    if isinstance(exc, httpx.ConnectTimeout):
        return NotApplied(
            f"{where}: no connection within {_CONTROL_TIMEOUT_S:g}s (host unreachable or filtered)"
        )
    if isinstance(exc, httpx.ConnectError):
        root: BaseException | None = exc  # httpx says "all connection attempts failed"; the OS says why
        while root is not None and not (isinstance(root, OSError) and root.errno):
            root = root.__cause__ or root.__context__
        errno = root.errno if isinstance(root, OSError) else None
        cause = os.strerror(errno) if errno else str(exc) or type(exc).__name__
        return NotApplied(f"{where}: cannot connect: {cause.lower()} (is the proxy running there?)")
    if isinstance(exc, httpx.TimeoutException):
        # the request may have been read: the change may have been applied
        return DriverError(f"{where}: connected but no reply within {_CONTROL_TIMEOUT_S:g}s")
    if isinstance(exc, (httpx.UnsupportedProtocol, httpx.InvalidURL)):
        return NotApplied(f"control_url: {url!r} is not an http(s) URL: {exc}")
    return DriverError(f"{where}: {type(exc).__name__}: {exc or 'connection lost'}")


async def _call(method: str, url: str, path: str, json: Any = None) -> Any:
    try:
        async with httpx.AsyncClient(timeout=_CONTROL_TIMEOUT_S) as client:
            resp = await client.request(method, _control(url) + path, json=json)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise _unreachable(url, method, path, exc) from None
    if resp.status_code >= 400:
        detail = (
            resp.json().get("error", resp.text)
            if resp.headers.get("content-type", "").startswith("application/json")
            else resp.text
        )
        # a refused request changed nothing
        raise NotApplied(f"proxy at {url}: {method} {path} -> {resp.status_code}: {detail}")
    return resp.json()


def _call_sync(method: str, url: str, path: str) -> Any:
    try:
        resp = httpx.request(method, _control(url) + path, timeout=_CONTROL_TIMEOUT_S)
    except httpx.ConnectError:
        # A standalone proxy keeps its routes in memory: with nothing listening on its control port, the
        # process is gone and its routes and toxics with it, so there is nothing left to remove.
        return None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise _unreachable(url, method, path, exc) from None
    if resp.status_code >= 400 and resp.status_code != 404:  # 404: already gone, which is what we want
        raise DriverError(f"proxy at {url}: {method} {path} -> {resp.status_code}: {resp.text}")
    return resp.json()


async def _apply_leased(ctx: ActivityContext, entry: Any, method: str, url: str, path: str, body: Any) -> Any:
    """Send a change to a standalone proxy whose revert is already leased; a request the proxy never got
    or refused takes its lease back, one that may have landed is reverted now."""
    try:
        return await _call(method, url, path, body)
    except NotApplied:
        withdraw(ctx, entry)
        raise
    except BaseException:
        await revert_now(ctx, entry)
        raise


@revert_recipe("netproxy", "remove_toxic")
def _recipe_remove_toxic(args: dict[str, Any]) -> None:
    _call_sync("DELETE", args["control_url"], f"/routes/{args['route']}/toxics/{args['toxic']}")


@revert_recipe("netproxy", "remove_route")
def _recipe_remove_route(args: dict[str, Any]) -> None:
    _call_sync("DELETE", args["control_url"], f"/routes/{args['name']}")


class _Where(BaseModel):
    model_config = ConfigDict(extra="forbid")
    control_url: str | None = Field(
        default=None,
        description="control API of a standalone proxy (e.g. http://127.0.0.1:8474); omit for in-process",
    )


class CreateRouteParams(_Where):
    name: str = Field(description="route name; registry faults target it as netproxy:<name>")
    upstream: str = Field(description="host:port the route forwards to")
    listen: str = Field(default="127.0.0.1:0", description="host:port to listen on (port 0 = any free port)")
    seed: int | None = Field(default=None, description="seed for toxicity rolls and jitter")


@action("netproxy", "create_route", CreateRouteParams)
async def create_route(ctx: ActivityContext, p: CreateRouteParams) -> dict[str, Any]:
    """Start proxying ``listen`` -> ``upstream``; rollback removes the route."""
    parse_hostport(p.upstream, field_name="upstream")
    parse_hostport(p.listen, field_name="listen")
    seed = p.seed if p.seed is not None else ctx.rng.randrange(2**31)
    if p.control_url:
        entry = leased_revert(
            ctx,
            label=f"netproxy: remove route {p.name}",
            driver="netproxy",
            revert="remove_route",
            args={"control_url": p.control_url, "name": p.name},
        )
        body = {"name": p.name, "listen": p.listen, "upstream": p.upstream}
        return await _apply_leased(ctx, entry, "POST", p.control_url, "/routes", body)
    mgr = in_process_manager()

    async def _remove() -> None:
        await mgr.remove_route(p.name)

    # In-process routes die with the controller, so they need no lease.
    ctx.on_revert(_remove, label=f"netproxy: remove route {p.name}")
    route = await mgr.create_route(p.name, p.listen, p.upstream, seed=seed)
    return route.describe()


class RouteParams(_Where):
    name: str


@action("netproxy", "remove_route", RouteParams)
async def remove_route(ctx: ActivityContext, p: RouteParams) -> dict[str, Any]:
    """Stop a route and reset its connections (a cleanup, not a fault: nothing to revert)."""
    if p.control_url:
        return await _call("DELETE", p.control_url, f"/routes/{p.name}")
    return {"removed": await in_process_manager().remove_route(p.name)}


class AddToxicParams(_Where):
    route: str = Field(description="route name")
    toxic: Toxic = Field(description="the toxic; its `type` picks the fields")
    duration_seconds: HoldSeconds = Field(
        default=None, description="remove the toxic after this long; omit to keep until rollback"
    )


async def _add_toxic(
    ctx: ActivityContext, route: str, toxic: Toxic, control_url: str | None, duration: float | None
) -> dict[str, Any]:
    label = f"netproxy: remove toxic {toxic.name} from route {route}"
    if control_url:
        entry = leased_revert(
            ctx,
            label=label,
            driver="netproxy",
            revert="remove_toxic",
            args={"control_url": control_url, "route": route, "toxic": toxic.name},
        )
        out = await _apply_leased(
            ctx, entry, "POST", control_url, f"/routes/{route}/toxics", toxic.model_dump()
        )
    else:
        mgr = in_process_manager()
        r = mgr.get(route)
        if toxic.name in r.toxics:
            raise DriverError(
                f"toxic.name: route {route!r} already has a toxic {toxic.name!r}; pick another name"
            )

        async def _remove() -> None:
            await mgr.remove_toxic(route, toxic.name)

        entry = ctx.on_revert(_remove, label=label)
        await r.add_toxic(toxic)
        out = toxic.model_dump()
    if await hold_then_revert(ctx, entry, duration):  # the run's live view counts the hold down
        out = {**out, "removed_after_s": duration}
    return out


@action("netproxy", "add_toxic", AddToxicParams)
async def add_toxic(ctx: ActivityContext, p: AddToxicParams) -> dict[str, Any]:
    """Add a toxic (latency, bandwidth, slow_close, timeout, reset_peer, slicer, limit_data,
    network_partition) to a route; rollback removes it."""
    return await _add_toxic(ctx, p.route, p.toxic, p.control_url, p.duration_seconds)


class ToxicRef(_Where):
    route: str
    toxic: str = Field(description="toxic name")


@action("netproxy", "remove_toxic", ToxicRef)
async def remove_toxic(ctx: ActivityContext, p: ToxicRef) -> dict[str, Any]:
    """Remove a toxic by name (a cleanup: nothing to revert)."""
    if p.control_url:
        return await _call("DELETE", p.control_url, f"/routes/{p.route}/toxics/{p.toxic}")
    return {"removed": await in_process_manager().remove_toxic(p.route, p.toxic)}


class LatencyParams(_Where):
    route: str
    latency_ms: float = Field(ge=0, le=3_600_000)
    jitter_ms: float = Field(default=0, ge=0, le=3_600_000)
    stream: str = Field(default="downstream", pattern="^(upstream|downstream)$")
    toxicity: float = Field(default=1.0, ge=0, le=1)
    duration_seconds: HoldSeconds = None


@action("netproxy", "latency", LatencyParams, fault_type="latency")
async def latency(ctx: ActivityContext, p: LatencyParams) -> dict[str, Any]:
    """Add latency (+/- jitter) to a route's stream; rollback removes it."""
    t = Latency(stream=p.stream, latency_ms=p.latency_ms, jitter_ms=p.jitter_ms, toxicity=p.toxicity)
    return await _add_toxic(ctx, p.route, t, p.control_url, p.duration_seconds)


class TimeoutParams(_Where):
    route: str
    timeout_ms: float = Field(
        default=0, ge=0, le=3_600_000, description="close connections after this; 0 = hold forever"
    )
    toxicity: float = Field(default=1.0, ge=0, le=1)
    duration_seconds: HoldSeconds = None


@action("netproxy", "timeout", TimeoutParams, fault_type="timeout")
async def timeout(ctx: ActivityContext, p: TimeoutParams) -> dict[str, Any]:
    """Blackhole a route's upstream stream (requests vanish), closing after timeout_ms; rollback removes it."""
    t = Timeout(stream="upstream", timeout_ms=p.timeout_ms, toxicity=p.toxicity)
    return await _add_toxic(ctx, p.route, t, p.control_url, p.duration_seconds)


class PartitionParams(_Where):
    route: str
    mode: str = Field(default="blackhole", pattern="^(refuse|blackhole)$")
    toxicity: float = Field(default=1.0, ge=0, le=1)
    duration_seconds: HoldSeconds = None


@action("netproxy", "partition", PartitionParams, fault_type="network_partition")
async def partition(ctx: ActivityContext, p: PartitionParams) -> dict[str, Any]:
    """Partition a route both ways: refuse connections or blackhole all bytes; rollback heals it."""
    t = NetworkPartition(mode=p.mode, toxicity=p.toxicity)
    return await _add_toxic(ctx, p.route, t, p.control_url, p.duration_seconds)


@probe("netproxy", "routes", _Where)
async def routes(ctx: ActivityContext, p: _Where) -> list[dict[str, Any]]:
    """Every route with its toxics, open connections and byte counts."""
    if p.control_url:
        return await _call("GET", p.control_url, "/routes")
    return [r.describe() for r in in_process_manager().routes.values()]


@probe("netproxy", "route", RouteParams)
async def route(ctx: ActivityContext, p: RouteParams) -> dict[str, Any]:
    """One route's description."""
    if p.control_url:
        return await _call("GET", p.control_url, f"/routes/{p.name}")
    return in_process_manager().get(p.name).describe()
