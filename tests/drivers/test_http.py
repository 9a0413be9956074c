"""HTTP probes and the ASGI/WSGI fault point, against real servers on loopback."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from wsgiref.simple_server import WSGIRequestHandler, make_server

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from faultplane.core.faults import FaultRegistry, FaultSpec
from faultplane.drivers.base import ActivityContext, DriverError, get_activity
from faultplane.drivers.http import FaultMiddleware, FaultWSGIMiddleware

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def _orders(request):  # type: ignore[no-untyped-def]
    return JSONResponse({"status": "ok", "items": [{"id": 1}, {"id": 2}]})


@pytest.fixture
async def asgi_url() -> AsyncIterator[str]:
    app = FaultMiddleware(
        Starlette(routes=[Route("/orders", _orders), Route("/health", _orders)]),
        "orders-api",
        exclude=["/health"],
    )
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="off"))
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await asyncio.wait_for(task, 10)


def _register(**kw) -> None:  # type: ignore[no-untyped-def]
    FaultRegistry().register(FaultSpec(**kw))
    time.sleep(0.3)  # fault points re-read the registry at most every 0.25 s


async def test_probes_read_status_latency_and_jsonpath(asgi_url: str) -> None:
    ctx = ActivityContext()
    url = f"{asgi_url}/orders"
    assert await get_activity("http", "status").invoke(ctx, {"url": url}) == 200
    out = await get_activity("http", "request").invoke(ctx, {"url": url})
    assert out["body"]["status"] == "ok" and out["latency_ms"] > 0
    assert await get_activity("http", "jsonpath").invoke(ctx, {"url": url, "path": "$.status"}) == "ok"
    assert await get_activity("http", "jsonpath").invoke(ctx, {"url": url, "path": "$.items[*].id"}) == [1, 2]
    lat = await get_activity("http", "latency").invoke(ctx, {"url": url, "samples": 3})
    assert lat["error_rate"] == 0 and lat["p50_ms"] < 500


async def test_asgi_fault_point_applies_registered_faults(asgi_url: str) -> None:
    ctx = ActivityContext()
    url = f"{asgi_url}/orders"
    _register(name="orders-api", fault_type="error", probability=1.0, error_message="boom")
    async with httpx.AsyncClient() as client:
        resp = await client.get(url)
        assert resp.status_code == 500 and resp.json() == {"error": "boom", "fault": "orders-api"}
        assert resp.headers["x-faultplane-fault"] == "orders-api"
        assert (await client.get(f"{asgi_url}/health")).status_code == 200  # excluded path
    _register(name="orders-api", fault_type="latency", probability=1.0, duration_seconds=0.25)
    lat = await get_activity("http", "latency").invoke(ctx, {"url": url, "samples": 2})
    assert 250 <= lat["p50_ms"] < 2000 and lat["error_rate"] == 0
    for fault_type, code in (("timeout", 504), ("resource_exhaustion", 503), ("network_partition", 502)):
        _register(name="orders-api", fault_type=fault_type, probability=1.0, duration_seconds=0.05)
        assert await get_activity("http", "status").invoke(ctx, {"url": url}) == code
    FaultRegistry().remove("orders-api")
    time.sleep(0.3)
    assert await get_activity("http", "status").invoke(ctx, {"url": url}) == 200


@pytest.fixture
def wsgi_url() -> Iterator[str]:
    def app(environ, start_response):  # type: ignore[no-untyped-def]
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"hello"]

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = make_server("127.0.0.1", 0, FaultWSGIMiddleware(app, "legacy"), handler_class=Quiet)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    t.join(5)


def test_wsgi_fault_point(wsgi_url: str) -> None:
    assert httpx.get(wsgi_url).text == "hello"
    _register(name="legacy", fault_type="error", probability=1.0)
    resp = httpx.get(wsgi_url)
    assert resp.status_code == 500 and resp.headers["x-faultplane-fault"] == "legacy"


async def test_probe_errors_name_the_field() -> None:
    ctx = ActivityContext()
    with pytest.raises(DriverError, match=r"url: GET http://127\.0\.0\.1:1/ failed"):
        await get_activity("http", "status").invoke(ctx, {"url": "http://127.0.0.1:1/"})
    with pytest.raises(DriverError, match=r"arguments\.method"):
        await get_activity("http", "status").invoke(ctx, {"url": "http://x/", "method": "BREW"})
