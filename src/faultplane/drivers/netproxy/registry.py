"""Registry faults at a proxy route: the route is the fault point for faults whose target is
``netproxy:<route-name>``.

Mapping (``probability`` becomes the toxic's ``toxicity``: the share of connections affected):

- ``latency``: downstream latency of ``duration_seconds`` (the registry's default duration when unset);
- ``timeout``: both streams blackholed, connections closed after ``duration_seconds``;
- ``network_partition``: both directions blackholed until the fault is removed.

Other fault types mean nothing to a TCP route and are ignored here.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from faultplane.drivers.netproxy.toxics import Latency, NetworkPartition, Timeout, Toxic

__all__ = ["registry_available", "toxics_for_route"]

try:
    from faultplane.core.faults import FaultRegistry, FaultSpec
except ImportError:  # the registry is optional for the proxy: without it, routes only take explicit toxics
    FaultRegistry = None  # type: ignore[assignment,misc]
    FaultSpec = None  # type: ignore[assignment,misc]

_cache_lock = threading.Lock()
_cache: dict[str, tuple[tuple[int, int, int], list[Any]]] = {}


def registry_available() -> bool:
    return FaultRegistry is not None


def _active(source: Any) -> list[Any]:
    """The registry's faults, re-read only when the file changes (it is replaced whole on every write)."""
    registry = source if not isinstance(source, str | os.PathLike) else FaultRegistry(source)
    path = str(registry.path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return []
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    with _cache_lock:
        hit = _cache.get(path)
        if hit is not None and hit[0] == key:
            return hit[1]
    faults = registry.active()
    with _cache_lock:
        _cache[path] = (key, faults)
    return faults


def toxics_for_route(source: Any, route: str) -> dict[str, Toxic]:
    """The toxics that the registry's faults targeting ``netproxy:<route>`` ask for, by toxic name."""
    if FaultRegistry is None or source is None:
        return {}
    if source is True:
        source = FaultRegistry()
    out: dict[str, Toxic] = {}
    target = f"netproxy:{route}"
    for spec in _active(source):
        if spec.target != target:
            continue
        name = f"fault:{spec.name}"
        ms = spec.effective_duration * 1000.0
        p = spec.probability
        if spec.fault_type == "latency":
            out[name] = Latency(name=name, stream="downstream", latency_ms=ms, toxicity=p)
        elif spec.fault_type == "timeout":
            for stream in ("upstream", "downstream"):
                out[f"{name}:{stream}"] = Timeout(
                    name=f"{name}:{stream}", stream=stream, timeout_ms=ms, toxicity=p
                )
        elif spec.fault_type == "network_partition":
            out[name] = NetworkPartition(name=name, mode="blackhole", toxicity=p)
    return out
