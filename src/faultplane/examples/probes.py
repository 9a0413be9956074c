"""Probes used by the bundled examples (importable as `faultplane.examples.probes`)."""

from __future__ import annotations

import time

import httpx


def latency_ms(url: str, samples: int = 3, timeout: float = 5.0) -> float:
    """Median wall-clock latency of GET `url` in milliseconds; raises on a non-2xx answer."""
    times = []
    with httpx.Client(timeout=timeout) as client:
        for _ in range(max(1, min(samples, 50))):
            t0 = time.perf_counter()
            resp = client.get(url)
            times.append((time.perf_counter() - t0) * 1000.0)
            resp.raise_for_status()
    times.sort()
    return round(times[len(times) // 2], 3)
