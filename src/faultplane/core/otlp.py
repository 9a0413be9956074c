"""OTLP/HTTP export that never slows a run: the standard `OTEL_*` variables, a bounded queue, one attempt per batch.

A finished run's spans and metrics are encoded (protobuf, with opentelemetry-proto's encoders) and handed to one
background thread; the run goes on at once. The thread POSTs each batch once, with the configured timeout. A
collector that cannot be reached is not retried for `_DEAD_FOR_S` seconds: its batches are dropped and counted,
and one line (on stderr, through logging) says how many spans were dropped and where they were going.

At exit the process waits at most `_EXIT_GRACE_S` (50 ms) for the queue. A collector that has not answered by then
(slow, far away, or hung: it accepted the connection and never replies) does not hold the process: what is still
unsent goes to a spool file and a detached sender process (`send_spool`) posts it with the full export timeout,
logging the outcome to `$XDG_STATE_HOME/faultplane/otlp.log`. A collector that times out (here or there) is marked
dead in `otlp-dead.json` for `_DEAD_FOR_S`, so the next runs drop their batches at once with the one line instead of
spawning more senders that would wait out the same timeout.

Variables read (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/):
`OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER` (`otlp`, `console`, `none`),
`OTEL_EXPORTER_OTLP[_TRACES|_METRICS]_{ENDPOINT,HEADERS,TIMEOUT,PROTOCOL,COMPRESSION}`, `OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_MAX_QUEUE_SIZE`.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import gzip
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from faultplane.core.paths import faultplane_dir

__all__ = ["Target", "configured", "drain", "exporter", "send", "send_spool", "stats", "target"]

log = logging.getLogger("faultplane.telemetry")

_DEFAULT_ENDPOINT = "http://localhost:4318"
_DEAD_FOR_S = 30.0
# what exit waits for an unanswered export before handing it to a detached sender (the run's budget is 100 ms)
_EXIT_GRACE_S = 0.05


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


def _state_dir() -> Path:
    return faultplane_dir("state")


def _dead_file() -> Path:
    return _state_dir() / "otlp-dead.json"


def _log_file() -> Path:
    return _state_dir() / "otlp.log"


def _read_dead() -> dict[str, dict[str, Any]]:
    """Collectors a detached sender found hung, with until when (epoch seconds) and why."""
    try:
        doc = json.loads(_dead_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    now = time.time()
    return {
        k: v
        for k, v in (doc.items() if isinstance(doc, dict) else ())
        if isinstance(v, dict) and isinstance(v.get("until"), int | float) and v["until"] > now
    }


def _post(batch: _Batch) -> str | None:
    """POST one batch once; None when the collector took it, else why not (starting "timeout" for a collector that
    did not answer in time). The standard library's client: importing httpx in the sender thread took longer than
    the whole wait at exit, so a dead collector was not even tried by then."""
    import http.client

    t = batch.target
    parts = urlsplit(t.url)
    headers = {"Content-Type": "application/x-protobuf", **t.headers}
    body = batch.body
    if t.gzip:
        body = gzip.compress(body)
        headers["Content-Encoding"] = "gzip"
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(parts.hostname or "localhost", parts.port, timeout=min(t.timeout_s, 2.0))
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(t.timeout_s)
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        status = response.status
    except TimeoutError as exc:
        return f"timeout after {t.timeout_s:g} s ({type(exc).__name__})"
    except (OSError, http.client.HTTPException) as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    finally:
        conn.close()
    return None if 200 <= status < 300 else f"HTTP {status}"


class _Sender:
    def __init__(self) -> None:
        size = int(os.environ.get("OTEL_BSP_MAX_QUEUE_SIZE", "") or 64)
        self.queue: queue.Queue[_Batch] = queue.Queue(maxsize=max(1, size))
        self.lock = threading.Lock()
        # collectors a detached sender of an earlier process found hung count as dead here too (wall clock there)
        marked = _read_dead()
        self.dead_until: dict[str, float] = {
            k: time.monotonic() + (v["until"] - time.time()) for k, v in marked.items()
        }
        # said once per process: the first batch dropped for such a collector names the reason
        self.dead_reason: dict[str, str] = {k: str(v.get("reason")) for k, v in marked.items()}
        self.dropped: dict[str, int] = {"spans": 0, "metric points": 0}
        self.sent: dict[str, int] = {"spans": 0, "metric points": 0}
        self.handed_off: dict[str, int] = {"spans": 0, "metric points": 0}
        self.current: _Batch | None = None  # the batch being posted
        self.closed = False  # handed off at exit: the thread sends nothing more
        self.idle = threading.Event()
        self.idle.set()
        self.thread = threading.Thread(target=self._loop, name="faultplane-otlp", daemon=True)
        self.thread.start()

    def put(self, batch: _Batch) -> None:
        if self._is_dead(batch.target.collector):
            with self.lock:
                reason = self.dead_reason.pop(batch.target.collector, None)
            self._drop(batch, f"collector unreachable: {reason}" if reason else None)
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

    def count(self, tally: dict[str, int], batches: Iterable[_Batch]) -> None:
        """Add the batches' items, by kind, to one of this sender's tallies (`dropped`, `handed_off`)."""
        with self.lock:
            for b in batches:
                tally[b.kind] += b.items

    def _drop(self, batch: _Batch, reason: str | None) -> None:
        self.count(self.dropped, [batch])
        if reason:
            log.warning(
                "OpenTelemetry: %d %s dropped (%s; collector %s)",
                batch.items,
                batch.kind,
                reason,
                batch.target.url,
            )

    def _loop(self) -> None:
        while True:
            batch = self.queue.get()
            with self.lock:
                if self.closed:
                    return
                self.current = batch
            try:
                self._send(batch)
            finally:
                with self.lock:
                    self.current = None
                self.queue.task_done()
                if self.queue.empty():
                    self.idle.set()

    def _send(self, batch: _Batch) -> None:
        t = batch.target
        if self._is_dead(t.collector):
            self._drop(batch, None)
            return
        reason = _post(batch)
        with self.lock:
            if self.closed:
                # exit handed this batch to the detached sender, which reports on it (a POST that succeeded in the
                # instant between the exit's wait and its hand-off is sent twice: a duplicate, never a loss)
                return
            if reason is None:
                self.sent[batch.kind] += batch.items
                return
            self.dead_until[t.collector] = time.monotonic() + _DEAD_FOR_S
            self.dropped[batch.kind] += batch.items
        if reason.startswith("timeout"):
            _mark_dead(t.collector, reason)  # the next processes need not wait out the same timeout
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

    def take_unsent(self) -> list[_Batch]:
        """Stop the thread and return what it has not delivered (the batch in flight first)."""
        with self.lock:
            self.closed = True
            out = [self.current] if self.current is not None else []
        while True:
            try:
                out.append(self.queue.get_nowait())
            except queue.Empty:
                return out


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
        return {"sent": {}, "dropped": {}, "handed_off": {}}
    with s.lock:
        return {"sent": dict(s.sent), "dropped": dict(s.dropped), "handed_off": dict(s.handed_off)}


def drain(timeout_s: float | None = None) -> bool:
    """Wait for queued batches, at most `timeout_s` (default: the export timeout). For a caller that can afford to
    wait (a test, a long-lived server between runs); process exit waits only `_EXIT_GRACE_S`."""
    s = _sender
    if s is None:
        return True
    if timeout_s is None:
        t = target("TRACES")
        timeout_s = t.timeout_s if t else 10.0
    return s.drain(timeout_s)


@atexit.register
def _at_exit() -> None:
    s = _sender
    if s is None or s.drain(_EXIT_GRACE_S):
        return
    batches = s.take_unsent()
    refused: dict[str, str] = {}
    for collector in {b.target.collector for b in batches}:
        reason = _refused(collector)
        if reason:
            refused[collector] = reason
    for collector, reason in refused.items():
        # nothing listens there: a detached sender could only fail too, so drop now and say so in the one line
        mine = [b for b in batches if b.target.collector == collector]
        s.count(s.dropped, mine)
        log.warning(
            "OpenTelemetry: collector %s unreachable (%s): %s dropped", collector, reason, _what(mine)
        )
    rest = [b for b in batches if b.target.collector not in refused]
    if rest:
        _hand_off(s, rest)


def _refused(collector: str) -> str | None:
    """Why a collector given by IP address (or localhost) cannot be reached at all (nothing listens there), or None
    when it takes a connection, does not answer within 20 ms or is a host name (it may be far away, or its name slow
    to resolve: that is the detached sender's to find out)."""
    import ipaddress
    import socket

    parts = urlsplit(collector)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or "localhost"
    # localhost may be either loopback: refused only when both refuse
    hosts = ["127.0.0.1", "::1"] if host == "localhost" else [host]
    try:
        for h in hosts:
            ipaddress.ip_address(h)
    except ValueError:
        return None  # a name: resolving it is not bounded by the timeout, so the detached sender finds out
    reason = None
    for h in hosts:
        try:
            with socket.create_connection((h, port), timeout=0.02):
                return None
        except TimeoutError:
            return None
        except OSError as exc:
            reason = f"{type(exc).__name__}: {exc.strerror or exc}"
    return reason


def _what(batches: Iterable[_Batch]) -> str:
    """What the batches carry, for a log line: `12 spans and 3 metric points`."""
    counts: dict[str, int] = {}
    for b in batches:
        counts[b.kind] = counts.get(b.kind, 0) + b.items
    return " and ".join(f"{n} {kind}" for kind, n in counts.items())


def _hand_off(s: _Sender, batches: list[_Batch]) -> None:
    """Write the unsent batches to a spool file and start a detached process that posts them."""
    what = _what(batches)
    collector = batches[0].target.collector
    try:
        spool = _state_dir() / "otlp-spool"
        spool.mkdir(parents=True, exist_ok=True)
        path = spool / f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
        doc = [
            {
                "target": asdict(b.target),
                "body": base64.b64encode(b.body).decode(),
                "items": b.items,
                "kind": b.kind,
            }
            for b in batches
        ]
        # the headers may carry a collector token: readable by this user only
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        with open(_log_file(), "a", encoding="utf-8") as log_out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import sys, faultplane.core.otlp as o; o.send_spool(sys.argv[1])",
                    str(path),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log_out,
                start_new_session=True,  # not in the terminal's process group: Ctrl-C there does not stop it
                close_fds=True,
            )
    except OSError as exc:
        s.count(s.dropped, batches)
        log.warning(
            "OpenTelemetry: %s dropped (collector %s had not answered when the process ended, and no background "
            "sender could be started: %s)",
            what,
            collector,
            exc,
        )
        return
    s.count(s.handed_off, batches)
    log.warning(
        "OpenTelemetry: collector %s had not answered when the process ended; %s left to a background sender "
        "(pid %d) that drops them after %.0f s without an answer; outcome in %s",
        collector,
        what,
        proc.pid,
        max(b.target.timeout_s for b in batches),
        _log_file(),
    )


def send_spool(path: str) -> None:
    """The detached sender: post a spool file's batches once each, log what became of them, mark a collector that
    timed out as dead for the next processes, and delete the file."""
    logging.basicConfig(format="%(asctime)s %(message)s", level=logging.INFO)
    spool = Path(path)
    try:
        doc = json.loads(spool.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("OpenTelemetry: cannot read spool %s: %s", spool, exc)
        return
    dead: dict[str, str] = {}
    for entry in doc:
        batch = _Batch(
            Target(**entry["target"]), base64.b64decode(entry["body"]), entry["items"], entry["kind"]
        )
        collector = batch.target.collector
        reason = dead.get(collector) or _post(batch)
        if reason is None:
            log.info("OpenTelemetry: %d %s sent to %s", batch.items, batch.kind, batch.target.url)
            continue
        if collector not in dead:
            dead[collector] = reason
            if reason.startswith("timeout"):
                _mark_dead(collector, reason)
        log.warning(
            "OpenTelemetry: collector %s unreachable (%s): %d %s dropped",
            collector,
            reason,
            batch.items,
            batch.kind,
        )
    spool.unlink(missing_ok=True)


def _mark_dead(collector: str, reason: str) -> None:
    at = time.strftime("%H:%M:%S")
    current = _read_dead()
    current[collector] = {
        "until": time.time() + _DEAD_FOR_S,
        "reason": f"{reason}, seen at {at} by pid {os.getpid()}",
    }
    tmp = _dead_file().with_suffix(f".{os.getpid()}.tmp")
    with contextlib.suppress(OSError):
        tmp.write_text(json.dumps(current), encoding="utf-8")
        tmp.replace(_dead_file())
