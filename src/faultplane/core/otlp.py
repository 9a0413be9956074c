"""OTLP/HTTP export that never slows a run: the standard `OTEL_*` variables, a bounded queue, one attempt per batch.

A finished run's spans and metrics are encoded (protobuf, with opentelemetry-proto's encoders) and handed to one
background thread; the run goes on at once. The thread POSTs each batch once, with the configured timeout. A
collector that cannot be reached is not retried for `_DEAD_FOR_S` seconds: its batches are dropped and counted,
and one line (on stderr, through logging) says how many spans were dropped and where they were going. At exit the
process waits for the queue only while the collector answers, and never longer than the export timeout.

Variables read (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/):
`OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER` (`otlp`, `console`, `none`),
`OTEL_EXPORTER_OTLP[_TRACES|_METRICS]_{ENDPOINT,HEADERS,TIMEOUT,PROTOCOL,COMPRESSION}`, `OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_MAX_QUEUE_SIZE`.
"""

from __future__ import annotations

import atexit
import gzip
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

__all__ = ["Target", "configured", "drain", "exporter", "send", "stats", "target"]

log = logging.getLogger("faultplane.telemetry")

_DEFAULT_ENDPOINT = "http://localhost:4318"
_DEAD_FOR_S = 30.0


def _env(signal: str, name: str) -> str:
    """`OTEL_EXPORTER_OTLP_<SIGNAL>_<NAME>`, else `OTEL_EXPORTER_OTLP_<NAME>` (the spec's precedence)."""
    return (
        os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_{name}", "").strip()
        or os.environ.get(f"OTEL_EXPORTER_OTLP_{name}", "").strip()
    )


def disabled() -> bool:
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def exporter(signal: str) -> str:
    """`otlp`, `console` or `none` for TRACES or METRICS. Without `OTEL_<SIGNAL>_EXPORTER`, `otlp` when an OTLP
    endpoint is set and `none` otherwise: a run never dials a default collector nobody asked for."""
    if disabled():
        return "none"
    chosen = os.environ.get(f"OTEL_{signal}_EXPORTER", "").strip().lower()
    if chosen:
        first = chosen.split(",")[0].strip()
        if first in ("otlp", "console", "none"):
            return first
        log.warning("OTEL_%s_EXPORTER=%s is not supported; use otlp, console or none", signal, chosen)
        return "none"
    return "otlp" if _env(signal, "ENDPOINT") else "none"


def configured() -> bool:
    return exporter("TRACES") != "none" or exporter("METRICS") != "none"


@dataclass(frozen=True)
class Target:
    url: str
    headers: dict[str, str]
    timeout_s: float
    gzip: bool

    @property
    def collector(self) -> str:
        """scheme://host:port: traces and metrics to one collector live or die together."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"


def _headers(raw: str) -> dict[str, str]:
    out = {}
    for part in raw.split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            if k.strip():
                out[unquote(k.strip())] = unquote(v.strip())
    return out


def target(signal: str) -> Target | None:
    """Where OTLP/HTTP batches of TRACES or METRICS go, or None (with one warning) for an unusable setting."""
    protocol = _env(signal, "PROTOCOL") or "http/protobuf"
    if protocol != "http/protobuf":
        log.warning(
            "OTEL_EXPORTER_OTLP_PROTOCOL=%s is not supported by Faultplane; set http/protobuf (port 4318)",
            protocol,
        )
        return None
    path = "/v1/traces" if signal == "TRACES" else "/v1/metrics"
    specific = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT", "").strip()
    if specific:
        url = specific  # a signal's own endpoint is used as given
    else:
        base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or _DEFAULT_ENDPOINT
        url = base.rstrip("/") + path
    if not url.startswith(("http://", "https://")):
        log.warning("OTLP endpoint %r is not an http(s) URL; fix: http://collector:4318", url)
        return None
    raw_timeout = _env(signal, "TIMEOUT")
    try:
        timeout_s = float(raw_timeout) / 1000.0 if raw_timeout else 10.0  # the spec's unit: milliseconds
    except ValueError:
        log.warning("OTEL_EXPORTER_OTLP_TIMEOUT=%r is not milliseconds; using 10000", raw_timeout)
        timeout_s = 10.0
    return Target(
        url=url,
        headers=_headers(_env(signal, "HEADERS")),
        timeout_s=max(0.001, timeout_s),
        gzip=_env(signal, "COMPRESSION").lower() == "gzip",
    )


# ---- the background sender -------------------------------------------------------------------------------------


@dataclass
class _Batch:
    target: Target
    body: bytes
    items: int  # spans or metric points, for the dropped count
    kind: str  # "spans" or "metric points"


class _Sender:
    def __init__(self) -> None:
        size = int(os.environ.get("OTEL_BSP_MAX_QUEUE_SIZE", "") or 64)
        self.queue: queue.Queue[_Batch] = queue.Queue(maxsize=max(1, size))
        self.lock = threading.Lock()
        self.dead_until: dict[str, float] = {}
        self.dropped: dict[str, int] = {"spans": 0, "metric points": 0}
        self.sent: dict[str, int] = {"spans": 0, "metric points": 0}
        self.idle = threading.Event()
        self.idle.set()
        self.thread = threading.Thread(target=self._loop, name="faultplane-otlp", daemon=True)
        self.thread.start()

    def put(self, batch: _Batch) -> None:
        if self._is_dead(batch.target.collector):
            self._drop(batch, None)
            return
        self.idle.clear()
        try:
            self.queue.put_nowait(batch)
        except queue.Full:
            self._drop(batch, "the export queue is full")
            if self.queue.empty():
                self.idle.set()

    def _is_dead(self, collector: str) -> bool:
        with self.lock:
            return self.dead_until.get(collector, 0.0) > time.monotonic()

    def _drop(self, batch: _Batch, reason: str | None) -> None:
        with self.lock:
            self.dropped[batch.kind] += batch.items
        if reason:
            log.warning(
                "OpenTelemetry: %d %s dropped (%s; collector %s)",
                batch.items,
                batch.kind,
                reason,
                batch.target.url,
            )

    def _loop(self) -> None:
        import httpx

        with httpx.Client(trust_env=False) as client:
            while True:
                batch = self.queue.get()
                try:
                    self._send(client, batch)
                finally:
                    self.queue.task_done()
                    if self.queue.empty():
                        self.idle.set()

    def _send(self, client: object, batch: _Batch) -> None:
        import httpx

        assert isinstance(client, httpx.Client)
        t = batch.target
        if self._is_dead(t.collector):
            self._drop(batch, None)
            return
        headers = {"Content-Type": "application/x-protobuf", **t.headers}
        body = batch.body
        if t.gzip:
            body = gzip.compress(body)
            headers["Content-Encoding"] = "gzip"
        try:
            response = client.post(
                t.url,
                content=body,
                headers=headers,
                timeout=httpx.Timeout(t.timeout_s, connect=min(t.timeout_s, 2.0)),
            )
            ok = 200 <= response.status_code < 300
            reason = None if ok else f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            ok, reason = False, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if ok:
            with self.lock:
                self.sent[batch.kind] += batch.items
            return
        with self.lock:
            self.dead_until[t.collector] = time.monotonic() + _DEAD_FOR_S
            self.dropped[batch.kind] += batch.items
        # one line; what is queued or sent to this collector in the next _DEAD_FOR_S seconds is dropped at once
        # (and counted) instead of each batch waiting out a timeout
        log.warning(
            "OpenTelemetry: collector %s unreachable (%s): %d %s dropped, and further telemetry for %.0f s",
            t.collector,
            reason,
            batch.items,
            batch.kind,
            _DEAD_FOR_S,
        )

    def drain(self, timeout_s: float) -> bool:
        return self.idle.wait(timeout_s)


_sender: _Sender | None = None
_sender_lock = threading.Lock()


def _get() -> _Sender:
    global _sender
    with _sender_lock:
        if _sender is None:
            _sender = _Sender()
        return _sender


def send(t: Target, body: bytes, items: int, kind: str) -> None:
    """Queue one encoded batch; returns at once."""
    _get().put(_Batch(t, body, items, kind))


def stats() -> dict[str, dict[str, int]]:
    s = _sender
    if s is None:
        return {"sent": {}, "dropped": {}}
    with s.lock:
        return {"sent": dict(s.sent), "dropped": dict(s.dropped)}


@atexit.register
def drain(timeout_s: float | None = None) -> bool:
    """Wait for queued batches, at most the export timeout (a dead collector's batches are dropped at once)."""
    s = _sender
    if s is None:
        return True
    if timeout_s is None:
        t = target("TRACES")
        timeout_s = t.timeout_s if t else 10.0
    return s.drain(timeout_s)
