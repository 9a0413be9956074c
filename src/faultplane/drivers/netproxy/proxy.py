"""The TCP fault proxy: routes that forward loopback/LAN connections and apply toxics at run time.

Performance matters here (the benchmark holds the proxy to >= 50% of direct loopback throughput and < 0.2 ms
added p50 latency), so the data path is built on asyncio protocols, not streams: with no toxic on a stream,
``data_received`` writes straight into the peer transport and backpressure is the transports' own
``pause_writing``/``resume_writing``. Only when a toxic is present (or bytes are still queued from one) does
a stream switch to a queue drained by a pump task that applies the toxics in order.

The proxy runs on asyncio (anyio's asyncio backend included); it does not support the trio backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import random
import socket
import struct
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from faultplane.drivers.base import DriverError
from faultplane.drivers.netproxy.toxics import (
    Bandwidth,
    Latency,
    LimitData,
    NetworkPartition,
    ResetPeer,
    Slicer,
    SlowClose,
    Timeout,
    Toxic,
)

__all__ = ["Route", "parse_hostport"]

_QUEUE_HIGH = 1 << 20  # bytes queued in a toxic stream before the source is paused
_QUEUE_LOW = 1 << 18
_WRITE_HIGH = (
    1 << 20
)  # transport write-buffer limits (asyncio defaults are 64 KiB, too small for 64 KiB chunks)
_WRITE_LOW = 1 << 18
_EOF = object()
_CLOSE = object()

# Zero-copy fast path (Linux): with no toxic on a stream, bytes move socket -> pipe -> socket with splice(2) and
# never enter Python. On a 2-core machine the proxy otherwise pays two user-space copies per byte, as much CPU
# as the client and server together, and the three processes then share two cores.
_SPLICE = sys.platform == "linux" and hasattr(os, "splice") and not os.environ.get("FAULTPLANE_NO_SPLICE")
_SPLICE_CHUNK = 1 << 20
_SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)


def parse_hostport(value: str, *, field_name: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``host:port`` or ``:port`` or ``port`` -> (host, port), with an error naming the field."""
    text = str(value).strip()
    host, sep, port_s = text.rpartition(":")
    if not sep:
        host, port_s = "", text
    host = host.strip("[]") or default_host
    try:
        port = int(port_s)
    except ValueError:
        raise DriverError(f"{field_name}: {value!r} is not host:port (e.g. 127.0.0.1:5432)") from None
    if not 0 <= port <= 65535:
        raise DriverError(f"{field_name}: port {port} is out of range 0-65535")
    return host, port


def _rst(transport: asyncio.Transport | None) -> None:
    """Abort with SO_LINGER 0 so the peer sees a TCP reset, not a clean close."""
    if transport is None or transport.is_closing():
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def _tune(transport: asyncio.Transport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    transport.set_write_buffer_limits(high=_WRITE_HIGH, low=_WRITE_LOW)


class _Stream:
    """One direction of a link: bytes read from ``src`` are written to ``dst`` through the toxics."""

    def __init__(self, link: Link, stream: str) -> None:
        self.link = link
        self.route = link.route
        self.stream = stream
        self.src: asyncio.Transport | None = None
        self.dst: asyncio.Transport | None = None
        self.queue: deque[tuple[float, Any]] = deque()
        self.queued = 0
        self.pump: asyncio.Task[None] | None = None
        self.writable = asyncio.Event()
        self.writable.set()
        self.pause_reasons: set[str] = set()
        self.state: dict[str, dict[str, float]] = {}
        self.eof_done = False
        self.dead = False
        self.src_eof = False  # the splice path saw the source's EOF (its transport never will)
        self.splice: _Splice | None = None

    # -- source flow control --------------------------------------------------------------------------------
    def pause(self, reason: str) -> None:
        if self.splice is not None:
            self.splice.stop()  # back to the transports, which then pause as below
        if not self.pause_reasons and self.src is not None and not self.src.is_closing():
            self.src.pause_reading()
        self.pause_reasons.add(reason)

    def resume(self, reason: str) -> None:
        if reason not in self.pause_reasons:
            return
        self.pause_reasons.discard(reason)
        if not self.pause_reasons and self.src is not None and not self.src.is_closing() and not self.src_eof:
            self.src.resume_reading()
            self.try_splice()

    def dst_paused(self) -> None:
        self.writable.clear()
        self.pause("dst")

    def dst_resumed(self) -> None:
        self.writable.set()
        self.resume("dst")

    # -- input ----------------------------------------------------------------------------------------------
    def feed(self, data: memoryview) -> bool:
        """Take bytes read from ``src`` (a view of the reader's buffer); True if a reference was kept, so the
        reader must not reuse that buffer."""
        if self.dead:
            return False
        if self.splice is not None:
            self.splice.stop()  # a read the transport had already queued: the pipe's bytes go first
        self.route.stats[self.stream] += len(data)
        if self.pump is None and not self.queue and not self.route.by_stream[self.stream]:
            dst = self.dst
            dst.write(data)  # type: ignore[union-attr]  # the fast path: no toxic, nothing queued
            # Whatever the socket did not take now stays in the transport, which may keep our view.
            kept = dst.get_write_buffer_size() > 0  # type: ignore[union-attr]
            if not kept:
                self.try_splice()
            return kept
        self.queue.append((time.monotonic(), bytes(data)))
        self.queued += len(data)
        if self.queued > _QUEUE_HIGH:
            self.pause("queue")
        self._ensure_pump()
        return False

    def feed_end(self, marker: object) -> None:
        if self.dead:
            return
        if self.splice is not None:
            self.splice.stop()
        if self.pump is None and not self.queue and not self.route.by_stream[self.stream]:
            self._finish(marker)
            return
        self.queue.append((time.monotonic(), marker))
        self._ensure_pump()

    def _finish(self, marker: object) -> None:
        dst = self.dst
        if dst is None or dst.is_closing():
            self.link.close()  # nowhere to pass the end on to: the link is over
            return
        if marker is _EOF and dst.can_write_eof():
            dst.write_eof()
            self.eof_done = True
            if self.link.other(self).eof_done:
                self.link.close()
        else:
            self.link.close()

    def _ensure_pump(self) -> None:
        if self.pump is None:
            self.pump = asyncio.get_running_loop().create_task(self._run_pump())

    def try_splice(self) -> None:
        """Switch this stream to the zero-copy path when nothing but plain forwarding is asked of it."""
        if (
            _SPLICE
            and self.splice is None
            and not self.dead
            and not self.src_eof
            and self.pump is None
            and not self.queue
            and not self.pause_reasons
            and not self.route.by_stream[self.stream]
            and self.src is not None
            and self.dst is not None
            and not self.src.is_closing()
            and not self.dst.is_closing()
            and self.dst.get_write_buffer_size() == 0
        ):
            self.splice = _Splice.start(self)

    def stop_splice(self) -> None:
        if self.splice is not None:
            self.splice.stop()

    def kill(self) -> None:
        self.dead = True
        if self.splice is not None:
            self.splice.stop(flush=False)
        self.queue.clear()
        self.queued = 0
        if self.pump is not None and self.pump is not asyncio.current_task():
            self.pump.cancel()

    # -- the toxic pipeline ---------------------------------------------------------------------------------
    def _active(self) -> list[Toxic]:
        return [t for t in self.route.by_stream[self.stream] if self.link.applies(t)]

    async def _run_pump(self) -> None:
        try:
            while self.queue and not self.dead:
                arrived, item = self.queue[0]
                toxics = self._active()
                if item is _EOF or item is _CLOSE:
                    for t in toxics:
                        if isinstance(t, SlowClose):
                            await asyncio.sleep(t.delay_ms / 1000.0)
                    self.queue.popleft()
                    self._finish(item)
                    continue
                self.queue.popleft()
                self.queued -= len(item)
                if self.queued < _QUEUE_LOW:
                    self.resume("queue")
                if any(isinstance(t, Timeout | NetworkPartition) for t in toxics):
                    continue  # blackholed: the bytes are lost, as on a dead network path
                await self._through(arrived, item, toxics)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # a broken link must not take the route down
            self.route.log(f"link {self.link.id} {self.stream}: {exc!r}")
            self.link.reset()
        finally:
            self.pump = None
            if self.queue and not self.dead:
                self._ensure_pump()
            elif not self.dead:
                self.try_splice()

    async def _through(self, arrived: float, data: bytes, toxics: list[Toxic]) -> None:
        rng = self.route.rng
        pieces = [data]
        for t in toxics:
            if isinstance(t, Latency):
                delay = t.latency_ms
                if t.jitter_ms:
                    delay += rng.uniform(-t.jitter_ms, t.jitter_ms)
                wait = arrived + max(0.0, delay) / 1000.0 - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
            elif isinstance(t, Slicer):
                sliced: list[bytes] = []
                for p in pieces:
                    i = 0
                    while i < len(p):
                        size = t.average_size
                        if t.size_variation:
                            size += rng.randint(-t.size_variation, t.size_variation)
                        size = max(1, size)
                        sliced.append(p[i : i + size])
                        i += size
                pieces = sliced
        slicer = next((t for t in toxics if isinstance(t, Slicer)), None)
        bandwidth = [t for t in toxics if isinstance(t, Bandwidth)]
        limit = next((t for t in toxics if isinstance(t, LimitData)), None)
        if bandwidth:
            # Pace in slices of <= 50 ms worth of bytes so the rate is smooth, not bursty.
            rate = min(t.rate_kbps for t in bandwidth) * 1000.0
            step = max(1, int(rate / 20))
            pieces = [p[i : i + step] for p in pieces for i in range(0, len(p), step)]
        for i, piece in enumerate(pieces):
            if bandwidth:
                # A piece arrives once a link of this rate has had time to carry it, as on a real wire.
                st = self.state.setdefault("bandwidth", {"next": 0.0})
                now = time.monotonic()
                done = max(st["next"], now) + len(piece) / rate
                await asyncio.sleep(done - now)
                st["next"] = done
            if limit is not None:
                st = self.state.setdefault(limit.name, {"sent": 0.0})
                room = int(limit.bytes - st["sent"])
                if len(piece) >= room:
                    if room > 0:
                        await self._write(piece[:room])
                    st["sent"] = limit.bytes
                    self.link.close()
                    return
                st["sent"] += len(piece)
            await self._write(piece)
            if slicer is not None and slicer.delay_us and i + 1 < len(pieces):
                await asyncio.sleep(slicer.delay_us / 1e6)

    async def _write(self, data: bytes) -> None:
        while not self.writable.is_set() and not self.dead:
            await self.writable.wait()
        dst = self.dst
        if dst is not None and not dst.is_closing() and not self.dead:
            dst.write(data)


class _Splice:
    """One stream on the zero-copy path: the source transport's reading is paused and this object reads its
    socket with splice(2) into a pipe and splices the pipe into the destination socket, registering its own
    reader/writer with the event loop. Any other event (a toxic, an EOF, a close) stops it first; ``stop``
    hands the pipe's bytes to the destination transport, so the order of bytes never changes."""

    def __init__(self, stream: _Stream, loop: Any, src_fd: int, dst_fd: int, pr: int, pw: int) -> None:
        self.stream = stream
        self.loop = loop
        self.src_fd = src_fd
        self.dst_fd = dst_fd
        self.pr, self.pw = pr, pw
        self.pending = 0  # bytes in the pipe
        self.reading = False
        self.writing = False

    @classmethod
    def start(cls, stream: _Stream) -> _Splice | None:
        loop = asyncio.get_running_loop()
        if not hasattr(
            loop, "_add_reader"
        ):  # not a selector event loop (e.g. uvloop): stay on the transports
            return None
        src_sock = stream.src.get_extra_info("socket")  # type: ignore[union-attr]
        dst_sock = stream.dst.get_extra_info("socket")  # type: ignore[union-attr]
        if src_sock is None or dst_sock is None:
            return None
        try:
            pr, pw = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        with contextlib.suppress(OSError, AttributeError):
            import fcntl

            fcntl.fcntl(pw, fcntl.F_SETPIPE_SZ, _SPLICE_CHUNK)
        sp = cls(stream, loop, src_sock.fileno(), dst_sock.fileno(), pr, pw)
        stream.src.pause_reading()  # type: ignore[union-attr]
        sp._want_read(True)
        return sp

    def _want_read(self, on: bool) -> None:
        if on and not self.reading:
            self.loop._add_reader(self.src_fd, self._readable)
        elif not on and self.reading:
            self.loop._remove_reader(self.src_fd)
        self.reading = on

    def _want_write(self, on: bool) -> None:
        if on and not self.writing:
            self.loop._add_writer(self.dst_fd, self._writable)
        elif not on and self.writing:
            self.loop._remove_writer(self.dst_fd)
        self.writing = on

    def _readable(self) -> None:
        stream = self.stream
        try:
            n = os.splice(self.src_fd, self.pw, _SPLICE_CHUNK, flags=_SPLICE_FLAGS)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._broken(exc)
            return
        if n == 0:
            stream.src_eof = True
            self.stop()
            stream.feed_end(_EOF)
            return
        stream.route.stats[stream.stream] += n
        self.pending += n
        self._flush()

    def _writable(self) -> None:
        self._flush()

    def _flush(self) -> None:
        while self.pending:
            try:
                m = os.splice(self.pr, self.dst_fd, self.pending, flags=_SPLICE_FLAGS)
            except (BlockingIOError, InterruptedError):
                m = 0
            except OSError as exc:
                self._broken(exc)
                return
            if m == 0:
                # The destination is full: stop reading the source until it drains (backpressure).
                self._want_read(False)
                self._want_write(True)
                return
            self.pending -= m
        self._want_write(False)
        self._want_read(True)

    def _broken(self, exc: OSError) -> None:
        link = self.stream.link
        self.stop(flush=False)
        if exc.errno not in (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN):
            link.route.log(f"link {link.id} {self.stream.stream}: splice failed: {exc!r}")
        link.reset()

    def stop(self, *, flush: bool = True) -> None:
        """Leave the zero-copy path: unregister, pass the pipe's bytes to the destination transport, resume
        the source transport (unless something else holds it paused)."""
        stream = self.stream
        if stream.splice is not self:
            return
        stream.splice = None
        self._want_read(False)
        self._want_write(False)
        data = bytearray()
        while flush and self.pending:
            try:
                chunk = os.read(self.pr, self.pending)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
            self.pending -= len(chunk)
        os.close(self.pr)
        os.close(self.pw)
        dst, src = stream.dst, stream.src
        if data and dst is not None and not dst.is_closing():
            dst.write(data)  # may pause the source via pause_writing: it is still paused, so that holds
        if (
            flush
            and not stream.pause_reasons
            and not stream.src_eof
            and src is not None
            and not src.is_closing()
        ):
            src.resume_reading()


_READ_SIZE = 256 * 1024


class _Side(asyncio.BufferedProtocol):
    """One socket of a link. Reads land in a reused buffer: no allocation per read on the fast path."""

    side: str  # "client" or "upstream", as Link.side_lost names it
    link: Link | None = None
    # Set with the link, so that a read or a pause finds its stream without a lookup: the stream this
    # socket's reads feed, and the stream that writes to this socket.
    _feeds: _Stream
    _fed_by: _Stream

    def __init__(self) -> None:
        self._buf = memoryview(bytearray(_READ_SIZE))

    def _attach(self, link: Link) -> None:
        self.link = link
        if self.side == "client":
            self._feeds, self._fed_by = link.up, link.down
        else:
            self._feeds, self._fed_by = link.down, link.up

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buf

    def buffer_updated(self, nbytes: int) -> None:
        if self.link is not None and self._feeds.feed(self._buf[:nbytes]):
            self._buf = memoryview(bytearray(_READ_SIZE))

    def eof_received(self) -> bool:
        if self.link is not None:
            self._feeds.feed_end(_EOF)
        return True  # keep the other half open until the peer is done too

    def pause_writing(self) -> None:
        if self.link is not None:
            self._fed_by.dst_paused()

    def resume_writing(self) -> None:
        if self.link is not None:
            self._fed_by.dst_resumed()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.link is not None:
            self.link.side_lost(self.side, exc)


class _ClientSide(_Side):
    side = "client"

    def __init__(self, route: Route) -> None:
        super().__init__()
        self.route = route

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        refused = self.route.refuses_new()
        if refused is True:
            _rst(transport)
            return
        _tune(transport)
        link = Link(self.route, transport)
        self._attach(link)
        for t in refused or ():
            link.decisions[t.name] = False  # rolled and spared: a refuse partition never touches it


class _UpstreamSide(_Side):
    side = "upstream"

    def __init__(self, link: Link) -> None:
        super().__init__()
        self._attach(link)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        _tune(transport)


class Link:
    """One proxied connection: the client's socket, the upstream socket, a stream each way."""

    _ids = 0

    def __init__(self, route: Route, client: asyncio.Transport) -> None:
        Link._ids += 1
        self.id = Link._ids
        self.route = route
        self.client = client
        self.upstream: asyncio.Transport | None = None
        self.up = _Stream(self, "upstream")
        self.down = _Stream(self, "downstream")
        self.up.src = self.down.dst = client
        self.decisions: dict[str, bool] = {}
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.closed = False
        self.connector: asyncio.Task[None] | None = None
        route.links.add(self)
        route.stats["connections"] += 1
        client.pause_reading()  # nothing to forward to until the upstream connection is up
        self.up.pause_reasons.add("connect")
        for t in route.toxics.values():
            self.toxic_added(t)
        if (
            route.partition is not None
            and route.partition.mode == "blackhole"
            and self.applies(route.partition)
        ):
            return  # held without an upstream: the path is cut
        self.connector = asyncio.get_running_loop().create_task(self._connect())

    def other(self, s: _Stream) -> _Stream:
        return self.down if s is self.up else self.up

    def applies(self, toxic: Toxic) -> bool:
        hit = self.decisions.get(toxic.name)
        if hit is None:
            hit = toxic.toxicity >= 1.0 or self.route.rng.random() < toxic.toxicity
            self.decisions[toxic.name] = hit
        return hit

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        host, port = self.route.upstream
        try:
            transport, _ = await asyncio.wait_for(
                loop.create_connection(lambda: _UpstreamSide(self), host, port), timeout=10
            )
        except (OSError, TimeoutError) as exc:
            self.route.log(f"link {self.id}: upstream {host}:{port} unreachable: {exc}")
            self.route.stats["upstream_failures"] += 1
            self.reset()
            return
        if self.closed:
            transport.close()
            return
        self.upstream = transport
        self.up.dst = self.down.src = self.upstream
        self.up.resume("connect")
        self.down.try_splice()

    def toxic_added(self, t: Toxic) -> None:
        if not isinstance(t, Timeout | ResetPeer) or not self.applies(t):
            return
        loop = asyncio.get_running_loop()
        if isinstance(t, ResetPeer):
            self.timers[t.name] = loop.call_later(t.timeout_ms / 1000.0, self.reset)
        elif t.timeout_ms > 0:
            self.timers[t.name] = loop.call_later(t.timeout_ms / 1000.0, self.close)

    def toxic_removed(self, t: Toxic) -> None:
        handle = self.timers.pop(t.name, None)
        if handle is not None:
            handle.cancel()
        self.decisions.pop(t.name, None)
        for s in (self.up, self.down):
            s.state.pop(t.name, None)
            if isinstance(t, Bandwidth):
                s.state.pop("bandwidth", None)

    def side_lost(self, side: str, exc: Exception | None) -> None:
        if self.closed:
            return
        if exc is not None:
            self.reset()  # pass a reset on as a reset
            return
        # A clean close of one side: flush what it sent (through its toxics), then close the other.
        stream = self.up if side == "client" else self.down
        self.other(stream).kill()
        stream.feed_end(_CLOSE)

    def close(self) -> None:
        if self.closed:
            return
        self._teardown()
        for t in (self.client, self.upstream):
            if t is not None and not t.is_closing():
                t.close()

    def reset(self) -> None:
        if self.closed:
            return
        self._teardown()
        _rst(self.client)
        _rst(self.upstream)

    def _teardown(self) -> None:
        self.closed = True
        for h in self.timers.values():
            h.cancel()
        self.timers.clear()
        self.up.kill()
        self.down.kill()
        if self.connector is not None and self.connector is not asyncio.current_task():
            self.connector.cancel()
        self.route.links.discard(self)


@dataclass
class Route:
    """A listening address forwarding to an upstream, with toxics added and removed at run time.

    ``fault_source`` is polled every ``poll_interval_s`` for registry faults aimed at this route
    (see :mod:`faultplane.drivers.netproxy.registry`).
    """

    name: str
    listen: tuple[str, int]
    upstream: tuple[str, int]
    seed: int | None = None
    fault_source: Any = None
    poll_interval_s: float = 0.5
    toxics: dict[str, Toxic] = field(default_factory=dict)
    links: set[Link] = field(default_factory=set)
    stats: dict[str, int] = field(
        default_factory=lambda: {
            "connections": 0,
            "upstream": 0,
            "downstream": 0,
            "upstream_failures": 0,
            "refused": 0,
        }
    )
    logger: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.by_stream: dict[str, tuple[Toxic, ...]] = {"upstream": (), "downstream": ()}
        self.partition: NetworkPartition | None = None
        self.refuse_toxics: tuple[NetworkPartition, ...] = ()
        self.refusing = False  # listener closed by a refuse partition of toxicity 1
        self._server: asyncio.Server | None = None
        self._poller: asyncio.Task[None] | None = None
        self._registry_toxics: set[str] = set()
        self.started = False

    def log(self, msg: str) -> None:
        if self.logger is not None:
            self.logger(f"[{self.name}] {msg}")

    @property
    def address(self) -> tuple[str, int]:
        return self.listen

    async def start(self) -> Route:
        """Bind the listening socket (port 0 picks a free one; ``listen`` is updated)."""
        await self._listen()
        if self.fault_source is not None:
            self._poller = asyncio.get_running_loop().create_task(self._poll_faults())
        self.started = True
        return self

    async def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        host, port = self.listen
        try:
            self._server = await loop.create_server(
                lambda: _ClientSide(self), host, port, reuse_address=True, backlog=512
            )
        except OSError as exc:
            raise DriverError(
                f"route {self.name!r}: cannot listen on {host}:{port}: {exc.strerror}"
            ) from None
        sock = self._server.sockets[0]
        self.listen = (host, int(sock.getsockname()[1]))

    async def stop(self) -> None:
        """Stop listening and reset every live connection."""
        self.started = False
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._poller
        if self._server is not None:
            self._server.close()
            self._server = None
        for link in list(self.links):
            link.close()

    async def __aenter__(self) -> Route:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- toxics ---------------------------------------------------------------------------------------------
    def _rebuild(self) -> None:
        def _refuse(t: Toxic) -> bool:
            return isinstance(t, NetworkPartition) and t.mode == "refuse"

        # A refuse partition acts on connections (reset or refused), never on bytes: it stays off the data path.
        self.by_stream = {
            s: tuple(
                t
                for t in self.toxics.values()
                if not _refuse(t) and (t.stream == s or isinstance(t, NetworkPartition))
            )
            for s in ("upstream", "downstream")
        }
        parts = [t for t in self.toxics.values() if isinstance(t, NetworkPartition)]
        self.refuse_toxics = tuple(t for t in parts if t.mode == "refuse")
        # The blackhole partition new connections are held by (never connected upstream), if any.
        self.partition = next((t for t in parts if t.mode == "blackhole"), None)

    def refuses_new(self) -> bool | tuple[NetworkPartition, ...]:
        """Whether a connection just accepted is refused: True (reset it now), or the refuse partitions it
        was rolled against and spared. Each refuse partition of toxicity p refuses that share of new
        connections (accepted, then reset at once); at toxicity 1 the listener is closed altogether."""
        if self.refusing:
            return True
        for t in self.refuse_toxics:
            if t.toxicity >= 1.0 or self.rng.random() < t.toxicity:
                self.stats["refused"] += 1
                return True
        return self.refuse_toxics

    async def add_toxic(self, toxic: Toxic) -> Toxic:
        if toxic.name in self.toxics:
            raise DriverError(
                f"route {self.name!r} already has a toxic named {toxic.name!r}; remove it first"
            )
        self.toxics[toxic.name] = toxic
        self._rebuild()
        for link in list(self.links):
            for s in (link.up, link.down):
                if self.by_stream[s.stream]:
                    s.stop_splice()  # the stream's bytes must now pass through the toxics
            link.toxic_added(toxic)
        if isinstance(toxic, NetworkPartition) and toxic.mode == "refuse":
            if toxic.toxicity >= 1.0 and not self.refusing:
                self.refusing = True
                if self._server is not None:
                    self._server.close()  # new connections now get ECONNREFUSED from the kernel
                    self._server = None
            for link in list(self.links):
                if link.applies(toxic):
                    link.reset()
        self.log(f"toxic added: {toxic.model_dump()}")
        return toxic

    async def remove_toxic(self, name: str) -> Toxic | None:
        toxic = self.toxics.pop(name, None)
        if toxic is None:
            return None
        self._rebuild()
        for link in list(self.links):
            link.toxic_removed(toxic)
            if not link.closed:
                link.up.try_splice()
                link.down.try_splice()
        if isinstance(toxic, NetworkPartition):
            if toxic.mode == "blackhole":
                # Connections accepted during the partition never reached the upstream: drop them now.
                for link in list(self.links):
                    if link.upstream is None and link.connector is None:
                        link.close()
            if self.refusing and not any(t.toxicity >= 1.0 for t in self.refuse_toxics):
                self.refusing = False
                if self.started:
                    await self._listen()
        self.log(f"toxic removed: {name}")
        return toxic

    async def clear_toxics(self) -> None:
        for name in list(self.toxics):
            await self.remove_toxic(name)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": f"{self.listen[0]}:{self.listen[1]}",
            "upstream": f"{self.upstream[0]}:{self.upstream[1]}",
            "enabled": not self.refusing,
            "toxics": [t.model_dump() for t in self.toxics.values()],
            "registry_toxics": sorted(self._registry_toxics),
            "connections_open": len(self.links),
            "stats": dict(self.stats),
        }

    # -- fault registry ---------------------------------------------------------------------------------------
    async def _poll_faults(self) -> None:
        from faultplane.drivers.netproxy.registry import toxics_for_route

        while True:
            try:
                wanted = await asyncio.to_thread(toxics_for_route, self.fault_source, self.name)
                await self._apply_registry(wanted)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bad registry file must not stop the proxy
                self.log(f"fault registry poll failed: {exc!r}")
            await asyncio.sleep(self.poll_interval_s)

    async def _apply_registry(self, wanted: dict[str, Toxic]) -> None:
        for name in list(self._registry_toxics):
            have = self.toxics.get(name)
            if name not in wanted or have != wanted[name]:
                await self.remove_toxic(name)
                self._registry_toxics.discard(name)
        for name, toxic in wanted.items():
            if name not in self.toxics:
                await self.add_toxic(toxic)
                self._registry_toxics.add(name)
