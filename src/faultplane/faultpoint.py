"""In-process fault points: where a registered fault takes effect inside a Python service.

    import faultplane

    @faultplane.fault_point("slow-database")
    def query(sql): ...

    @faultplane.fault_point("slow-database")
    async def aquery(sql): ...

    with faultplane.fault_point("payment-gateway"):
        charge(card)

    async with faultplane.fault_point("payment-gateway"):
        await charge(card)

A fault registered under the same name (from the MCP server, the CLI, an experiment, another process) applies
at the point: on each call it triggers with the fault's probability, and every occurrence armed by
`FaultRegistry.inject` triggers exactly once, at the next call through the point. Effects:

=====================  =====================================================================================
latency                sleep `duration_seconds` (default 1 s), then run the body
error                  raise `FaultInjected(error_message)`; the body does not run
timeout                sleep `duration_seconds`, then raise `FaultTimeout` (a `TimeoutError`)
resource_exhaustion    raise `FaultResourceExhausted`, an `OSError` with errno ENOMEM ("cannot allocate
                       memory"), which is what a failing allocation, fork or mmap raises in real code
network_partition      raise `FaultPartition`, a `ConnectionError` (errno ECONNREFUSED)
=====================  =====================================================================================

Every injected exception is also a `FaultInjected`, so tests can tell injected failures from real ones.
Faults whose `target` names another kind of fault point (e.g. ``netproxy:<route>``) are ignored here; a fault
with no target, or a target of ``faultpoint`` / ``faultpoint:<name>``, applies.

Cost: one daemon thread per process (started with the first fault point, restarted in a forked child) stats
each registry file every 0.25 s and reloads it when it changed, so another process's change is seen within
about 0.25 s; a call through a point with no fault of its name registered is one dict membership test (see
benchmarks/bench_fault_point.py). This module
imports the standard library only, so adding a fault point to a service adds no dependency weight.
"""

from __future__ import annotations

import errno
import functools
import inspect
import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, cast

from faultplane.core.faults import FaultRegistry, FaultSpec

__all__ = [
    "CHECK_INTERVAL_S",
    "FaultInjected",
    "FaultPartition",
    "FaultPoint",
    "FaultResourceExhausted",
    "FaultTimeout",
    "fault_point",
    "seed",
]

# Changes made by another process become visible within this interval (the issue asks for < 1 s).
CHECK_INTERVAL_S = 0.25

_F = TypeVar("_F", bound=Callable[..., Any])

# Per-call probability rolls. FAULTPLANE_SEED makes a service's fault pattern reproducible.
_rng = random.Random(os.environ.get("FAULTPLANE_SEED"))


def seed(value: int | str | None) -> None:
    """Re-seed the generator that decides per-call triggering in this process."""
    _rng.seed(value)


class FaultInjected(Exception):
    """Raised at a fault point by an injected fault (all injected exceptions derive from it)."""

    fault_name: str | None = None
    fault_type: str = "error"


class FaultTimeout(FaultInjected, TimeoutError):
    """An injected `timeout` fault: raised after sleeping the fault's duration."""

    fault_type = "timeout"


class FaultResourceExhausted(FaultInjected, OSError):
    """An injected `resource_exhaustion` fault: an OSError with errno ENOMEM."""

    fault_type = "resource_exhaustion"


class FaultPartition(FaultInjected, ConnectionError):
    """An injected `network_partition` fault: a ConnectionError with errno ECONNREFUSED."""

    fault_type = "network_partition"


def _applies_here(spec: FaultSpec) -> bool:
    return spec.target is None or spec.target == "faultpoint" or spec.target.startswith("faultpoint:")


class _Watcher:
    """This process's view of one registry file, refreshed by the poller thread when the file changes.

    `faults` is updated in place (new and changed entries first, then removals), never replaced, so fault
    points can hold the dict itself and a reader never sees a fault that stays registered go missing.
    """

    __slots__ = ("armed", "faults", "ident", "lock", "registry")

    def __init__(self, registry: FaultRegistry) -> None:
        self.registry = registry
        self.ident: tuple[int, int, int] | None = None
        self.faults: dict[str, FaultSpec] = {}
        self.armed: dict[str, int] = {}
        self.lock = threading.Lock()
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> None:
        try:
            st = os.stat(self.registry.path)
            ident: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_ino, st.st_size)
        except OSError:
            ident = None
        if ident == self.ident and not force:
            return
        with self.lock:
            state = self.registry.load()
            fresh = {n: s for n, s in state.faults.items() if _applies_here(s)}
            self.armed = {n: k for n, k in state.armed.items() if n in fresh}
            self.faults.update(fresh)
            for gone in [n for n in self.faults if n not in fresh]:
                self.faults.pop(gone, None)
            self.ident = ident

    def pick(self, name: str) -> FaultSpec | None:
        """The fault to apply for this call through point `name`, or None."""
        spec = self.faults.get(name)
        if spec is None:
            return None
        if self.armed.get(name):
            consumed = self.registry.consume(name)
            self.refresh(force=True)  # our own write changed the arm count
            if consumed is not None and _applies_here(consumed):
                return consumed
        if spec.probability > 0.0 and _rng.random() < spec.probability:
            return spec
        return None


_watchers: dict[Path, _Watcher] = {}
_watchers_lock = threading.Lock()
_poller: threading.Thread | None = None


def _poll_forever() -> None:
    while True:
        time.sleep(CHECK_INTERVAL_S)
        for w in list(_watchers.values()):
            try:
                w.refresh()
            except Exception:  # a broken or half-written file: keep the last good view, retry next tick
                continue


def _ensure_poller() -> None:
    """Start the one daemon thread that stats every watched registry each CHECK_INTERVAL_S."""
    global _poller
    if _poller is None or not _poller.is_alive():
        _poller = threading.Thread(target=_poll_forever, name="faultplane-fault-points", daemon=True)
        _poller.start()


def _after_fork_in_child() -> None:
    # Threads do not survive fork, and a lock held by one at fork time would stay held forever.
    global _watchers_lock, _poller
    _watchers_lock = threading.Lock()
    for w in _watchers.values():
        w.lock = threading.Lock()
    _poller = None
    if _watchers:
        _ensure_poller()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _watcher_for(registry: FaultRegistry | str | os.PathLike[str] | None) -> _Watcher:
    reg = registry if isinstance(registry, FaultRegistry) else FaultRegistry(registry)
    key = reg.path.absolute()
    with _watchers_lock:
        w = _watchers.get(key)
        if w is None:
            w = _watchers[key] = _Watcher(reg)
        _ensure_poller()
        return w


def _message(spec: FaultSpec, point: str) -> str:
    return spec.error_message or f"fault {spec.name!r} ({spec.fault_type}) injected at fault point {point!r}"


def _exception(spec: FaultSpec, point: str) -> FaultInjected:
    msg = _message(spec, point)
    exc: FaultInjected
    if spec.fault_type == "timeout":
        exc = FaultTimeout(msg)
    elif spec.fault_type == "resource_exhaustion":
        exc = FaultResourceExhausted(errno.ENOMEM, msg)
    elif spec.fault_type == "network_partition":
        exc = FaultPartition(errno.ECONNREFUSED, msg)
    else:
        exc = FaultInjected(msg)
    exc.fault_name = spec.name
    return exc


def _apply_sync(spec: FaultSpec, point: str) -> None:
    if spec.fault_type in ("latency", "timeout"):
        time.sleep(spec.effective_duration)
        if spec.fault_type == "latency":
            return
    raise _exception(spec, point)


async def _apply_async(spec: FaultSpec, point: str) -> None:
    if spec.fault_type in ("latency", "timeout"):
        import anyio  # only paid for when a fault actually fires

        await anyio.sleep(spec.effective_duration)
        if spec.fault_type == "latency":
            return
    raise _exception(spec, point)


class FaultPoint:
    """A named place where registered faults take effect: a decorator and a sync or async context manager."""

    __slots__ = ("_faults", "_watcher", "name")

    def __init__(self, name: str, registry: FaultRegistry | str | os.PathLike[str] | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("fault_point(name): name must be a non-empty string, e.g. 'slow-database'")
        self.name = name
        self._watcher = _watcher_for(registry)
        self._faults = self._watcher.faults

    def __repr__(self) -> str:
        return f"fault_point({self.name!r})"

    def check(self) -> None:
        """Apply the fault for this call, if one triggers (blocking sleep for latency/timeout)."""
        if self.name in self._faults:
            spec = self._watcher.pick(self.name)
            if spec is not None:
                _apply_sync(spec, self.name)

    async def acheck(self) -> None:
        """Apply the fault for this call, if one triggers (non-blocking sleep for latency/timeout)."""
        if self.name in self._faults:
            spec = self._watcher.pick(self.name)
            if spec is not None:
                await _apply_async(spec, self.name)

    # The no-fault path of every variant is one dict membership test: the poller thread keeps the dict
    # current, so a call reads no clock and stats no file.
    def __enter__(self) -> FaultPoint:
        if self.name in self._faults:
            self.check()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    async def __aenter__(self) -> FaultPoint:
        if self.name in self._faults:
            await self.acheck()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def __call__(self, fn: _F) -> _F:
        name = self.name
        faults = self._faults
        pick = self._watcher.pick

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                if name in faults:
                    spec = pick(name)
                    if spec is not None:
                        await _apply_async(spec, name)
                return await fn(*args, **kwargs)

            return cast(_F, awrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if name in faults:
                spec = pick(name)
                if spec is not None:
                    _apply_sync(spec, name)
            return fn(*args, **kwargs)

        return cast(_F, wrapper)


def fault_point(name: str, *, registry: FaultRegistry | str | os.PathLike[str] | None = None) -> FaultPoint:
    """A fault point named `name`, reading the default registry (or `registry`: a FaultRegistry or a path)."""
    return FaultPoint(name, registry)
