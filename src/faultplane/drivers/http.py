"""HTTP: probes (status, latency, a JSONPath into the body) and a fault point for Python web apps.

The fault point is a middleware around an ASGI app (:class:`FaultMiddleware`) or a WSGI app
(:class:`FaultWSGIMiddleware`). It is a :class:`faultplane.faultpoint.FaultPoint` named ``point``: faults
registered under that name (``faults.register``, the MCP tool ``chaos_inject_fault``, the CLI) apply to the
requests it sees, from any process. Effects on a request:

======================  ====================================================================
latency                 the request waits ``duration_seconds``, then runs normally
error                   500 with the fault's message; the app does not run
timeout                 waits ``duration_seconds``, then 504
resource_exhaustion     503
network_partition       502
======================  ====================================================================

Responses made by a fault carry the header ``x-faultplane-fault: <fault name>``.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from faultplane.drivers.base import ActivityContext, DriverError, probe
from faultplane.drivers.endpoints import HttpUrl
from faultplane.faultpoint import (
    FaultInjected,
    FaultPartition,
    FaultPoint,
    FaultResourceExhausted,
    FaultTimeout,
)

__all__ = ["FaultMiddleware", "FaultWSGIMiddleware", "status_for"]

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


def status_for(exc: FaultInjected) -> int:
    """The HTTP status a fault point answers with for an injected failure."""
    if isinstance(exc, FaultTimeout):
        return 504
    if isinstance(exc, FaultResourceExhausted):
        return 503
    if isinstance(exc, FaultPartition):
        return 502
    return 500


def _fault_body(exc: FaultInjected) -> tuple[bytes, str]:
    name = str(getattr(exc, "fault_name", "") or "")
    msg = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return json.dumps({"error": msg, "fault": name}).encode(), name


class _PathMiddleware:
    """What the ASGI and WSGI middlewares share: the wrapped app, its fault point and the paths it guards."""

    def __init__(
        self,
        app: Any,
        point: str,
        *,
        registry: Any = None,
        path_prefix: str = "/",
        exclude: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.point = FaultPoint(point, registry)
        self.prefix = path_prefix
        self.exclude = tuple(exclude)

    def _applies(self, path: str) -> bool:
        return path.startswith(self.prefix) and not any(path.startswith(e) for e in self.exclude)


class FaultMiddleware(_PathMiddleware):
    """ASGI middleware: a fault point named ``point`` in front of every HTTP request under ``path_prefix``."""

    app: ASGIApp

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        if scope["type"] != "http" or not self._applies(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        try:
            await self.point.acheck()
        except FaultInjected as exc:
            body, name = _fault_body(exc)
            await send(
                {
                    "type": "http.response.start",
                    "status": status_for(exc),
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"x-faultplane-fault", name.encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


_REASONS = {
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


class FaultWSGIMiddleware(_PathMiddleware):
    """WSGI middleware: the same fault point for Flask, Django and other WSGI apps."""

    app: Callable[..., Iterable[bytes]]

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if self._applies(environ.get("PATH_INFO", "")):
            try:
                self.point.check()
            except FaultInjected as exc:
                body, name = _fault_body(exc)
                status = status_for(exc)
                start_response(
                    f"{status} {_REASONS[status]}",
                    [
                        ("Content-Type", "application/json"),
                        ("Content-Length", str(len(body))),
                        ("X-Faultplane-Fault", name),
                    ],
                )
                return [body]
        return self.app(environ, start_response)


# --- probes ---------------------------------------------------------------------------------------------------


class RequestParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: HttpUrl = Field(description="http(s) URL")
    method: str = Field(default="GET", pattern="^(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS)$")
    headers: dict[str, str] = Field(default_factory=dict)
    json_body: Any = Field(default=None, description="JSON request body")
    body: str | None = Field(default=None, description="raw request body (when json_body is not given)")
    timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    verify_tls: bool = True
    follow_redirects: bool = False


async def _send(p: RequestParams, client: httpx.AsyncClient) -> tuple[httpx.Response, float]:
    t0 = time.perf_counter()
    try:
        resp = await client.request(
            p.method,
            p.url,
            headers=p.headers,
            json=p.json_body,
            content=None if p.json_body is not None else p.body,
        )
    except httpx.TimeoutException:
        raise DriverError(f"url: {p.method} {p.url} timed out after {p.timeout_seconds}s") from None
    except httpx.HTTPError as exc:
        raise DriverError(f"url: {p.method} {p.url} failed: {exc!r}") from None
    return resp, (time.perf_counter() - t0) * 1000.0


def _client(p: RequestParams) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=p.timeout_seconds, verify=p.verify_tls, follow_redirects=p.follow_redirects
    )


@probe("http", "request", RequestParams)
async def request(ctx: ActivityContext, p: RequestParams) -> dict[str, Any]:
    """One request: status, latency_ms, headers and body (JSON-decoded when it is JSON; text cut at 64 KiB)."""
    async with _client(p) as client:
        resp, ms = await _send(p, client)
    try:
        body: Any = resp.json()
    except ValueError:
        body = resp.text[:65536]
    return {"status": resp.status_code, "latency_ms": ms, "headers": dict(resp.headers), "body": body}


@probe("http", "status", RequestParams)
async def status(ctx: ActivityContext, p: RequestParams) -> int:
    """The response's status code."""
    async with _client(p) as client:
        resp, _ = await _send(p, client)
    return resp.status_code


class LatencyParams(RequestParams):
    samples: int = Field(default=5, ge=1, le=1000)


@probe("http", "latency", LatencyParams)
async def latency(ctx: ActivityContext, p: LatencyParams) -> dict[str, float]:
    """``samples`` sequential requests on one connection: p50/mean/max in ms and the share that were 5xx."""
    out: list[float] = []
    errors = 0
    async with _client(p) as client:
        for _ in range(p.samples):
            resp, ms = await _send(p, client)
            out.append(ms)
            errors += resp.status_code >= 500
    return {
        "p50_ms": statistics.median(out),
        "mean_ms": statistics.fmean(out),
        "max_ms": max(out),
        "error_rate": errors / len(out),
    }


class JsonPathParams(RequestParams):
    path: str = Field(description="JSONPath into the JSON body, e.g. $.status or $.items[*].id")


@probe("http", "jsonpath", JsonPathParams)
async def jsonpath(ctx: ActivityContext, p: JsonPathParams) -> Any:
    """The value at ``path`` in the JSON body (a list when the path matches several; None when none)."""
    from jsonpath_ng.exceptions import JsonPathParserError
    from jsonpath_ng.ext import parse

    try:
        expr = parse(p.path)
    except (JsonPathParserError, Exception) as exc:
        raise DriverError(f"path: {p.path!r} is not a valid JSONPath: {exc}") from None
    async with _client(p) as client:
        resp, _ = await _send(p, client)
    try:
        doc = resp.json()
    except ValueError:
        raise DriverError(f"url: {p.url} did not return JSON (status {resp.status_code})") from None
    values = [m.value for m in expr.find(doc)]
    if not values:
        return None
    return values[0] if len(values) == 1 else values
