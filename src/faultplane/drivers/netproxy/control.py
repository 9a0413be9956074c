"""Routes by name, and the small loopback HTTP API a standalone proxy exposes so experiments can drive it.

API (JSON): ``GET /health``; ``GET /routes``; ``POST /routes`` ``{name, listen, upstream}``;
``GET|DELETE /routes/{name}``; ``POST /routes/{name}/toxics`` (a toxic); ``DELETE /routes/{name}/toxics/{toxic}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route as HttpRoute

from faultplane.drivers.base import DriverError
from faultplane.drivers.netproxy.proxy import Route, parse_hostport
from faultplane.drivers.netproxy.toxics import Toxic, parse_toxic

__all__ = ["ProxyManager", "build_app", "serve"]


class ProxyManager:
    """The routes of one process. Use from the event loop that runs them."""

    def __init__(self, *, fault_source: Any = None, seed: int | None = None, verbose: bool = False) -> None:
        self.routes: dict[str, Route] = {}
        self.fault_source = fault_source
        self.seed = seed
        self.verbose = verbose

    def _log(self, msg: str) -> None:
        if self.verbose:
            print(msg, file=sys.stderr, flush=True)

    async def create_route(self, name: str, listen: str, upstream: str, *, seed: int | None = None) -> Route:
        if not name or not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise DriverError(f"name: {name!r} must be letters, digits, '-', '_' or '.'")
        if name in self.routes:
            raise DriverError(f"name: a route named {name!r} already exists; remove it or pick another name")
        route = Route(
            name=name,
            listen=parse_hostport(listen, field_name="listen"),
            upstream=parse_hostport(upstream, field_name="upstream"),
            seed=seed if seed is not None else self.seed,
            fault_source=self.fault_source,
            logger=self._log,
        )
        await route.start()
        self.routes[name] = route
        return route

    def get(self, name: str) -> Route:
        try:
            return self.routes[name]
        except KeyError:
            known = ", ".join(sorted(self.routes)) or "none"
            raise DriverError(f"route: no route named {name!r} (routes: {known})") from None

    async def remove_route(self, name: str) -> bool:
        route = self.routes.pop(name, None)
        if route is None:
            return False
        await route.stop()
        return True

    async def add_toxic(self, route: str, toxic: Toxic) -> Toxic:
        return await self.get(route).add_toxic(toxic)

    async def remove_toxic(self, route: str, toxic: str) -> bool:
        r = self.routes.get(route)
        return r is not None and await r.remove_toxic(toxic) is not None

    async def close(self) -> None:
        for name in list(self.routes):
            await self.remove_route(name)


def build_app(manager: ProxyManager) -> Starlette:
    def err(status: int, msg: str) -> JSONResponse:
        return JSONResponse({"error": msg}, status_code=status)

    async def body(request: Request) -> dict[str, Any]:
        try:
            data = await request.json()
        except json.JSONDecodeError as exc:
            raise DriverError(f"request body is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise DriverError("request body must be a JSON object")
        return data

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True, "routes": len(manager.routes)})

    async def routes(request: Request) -> JSONResponse:
        if request.method == "GET":
            return JSONResponse([r.describe() for r in manager.routes.values()])
        try:
            data = await body(request)
            missing = [k for k in ("name", "upstream") if not data.get(k)]
            if missing:
                return err(400, f"missing field(s): {', '.join(missing)}")
            route = await manager.create_route(
                str(data["name"]), str(data.get("listen", "127.0.0.1:0")), str(data["upstream"])
            )
        except DriverError as exc:
            status = 409 if "already exists" in str(exc) else 400
            return err(status, str(exc))
        return JSONResponse(route.describe(), status_code=201)

    async def one_route(request: Request) -> JSONResponse:
        name = request.path_params["name"]
        if request.method == "DELETE":
            removed = await manager.remove_route(name)
            return JSONResponse({"removed": removed}, status_code=200 if removed else 404)
        try:
            return JSONResponse(manager.get(name).describe())
        except DriverError as exc:
            return err(404, str(exc))

    async def toxics(request: Request) -> JSONResponse:
        name = request.path_params["name"]
        try:
            route = manager.get(name)
        except DriverError as exc:
            return err(404, str(exc))
        if request.method == "GET":
            return JSONResponse([t.model_dump() for t in route.toxics.values()])
        try:
            toxic = parse_toxic(await body(request))
            await route.add_toxic(toxic)
        except ValidationError as exc:
            return err(400, "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))
        except DriverError as exc:
            return err(409 if "already has" in str(exc) else 400, str(exc))
        return JSONResponse(toxic.model_dump(), status_code=201)

    async def one_toxic(request: Request) -> JSONResponse:
        removed = await manager.remove_toxic(request.path_params["name"], request.path_params["toxic"])
        return JSONResponse({"removed": removed}, status_code=200 if removed else 404)

    return Starlette(
        routes=[
            HttpRoute("/health", health, methods=["GET"]),
            HttpRoute("/routes", routes, methods=["GET", "POST"]),
            HttpRoute("/routes/{name}", one_route, methods=["GET", "DELETE"]),
            HttpRoute("/routes/{name}/toxics", toxics, methods=["GET", "POST"]),
            HttpRoute("/routes/{name}/toxics/{toxic}", one_toxic, methods=["DELETE"]),
        ]
    )


async def serve(
    manager: ProxyManager,
    control: str | None,
    *,
    ready: Any = None,
) -> None:
    """Run until cancelled: the manager's routes, plus the control API on ``control`` (loopback only)."""
    import uvicorn

    server = None
    if control:
        host, port = parse_hostport(control, field_name="control")
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise DriverError(
                f"control: the control API binds loopback only (got {host}); use 127.0.0.1:PORT"
            )
        config = uvicorn.Config(build_app(manager), host=host, port=port, log_level="warning", lifespan="off")
        server = uvicorn.Server(config)
        task = asyncio.get_running_loop().create_task(server.serve())
        for _ in range(500):
            if server.started or task.done():
                break
            await asyncio.sleep(0.01)
        if task.done():
            task.result()
            raise DriverError(f"control: could not start the control API on {host}:{port}")
        bound = server.servers[0].sockets[0].getsockname()[1]
        control = f"{host}:{bound}"
    if ready is not None:
        ready(control)
    try:
        await asyncio.Event().wait()
    finally:
        if server is not None:
            server.should_exit = True
        await manager.close()
