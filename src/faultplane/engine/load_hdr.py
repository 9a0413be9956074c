"""How the load generator's latencies are bucketed and read: hdrhistogram's bucket layout (µs, 3 significant
digits) on numpy arrays, its percentile definitions, and the merging of per-slot histograms."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["percentile"]

# HDR bucketing with 3 significant digits: values below 2,048 µs are exact, each octave above halves the
# resolution (relative error under 0.1 %), as hdrhistogram's buckets
_SUB_BUCKET_BITS = 11


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of an ascending list; None when empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _bucket_keys(lat_ms: Any) -> Any:
    """The HDR bucket (its lower bound in µs, 3 significant digits) of each latency in ms."""
    us = np.maximum(1, np.rint(np.asarray(lat_ms, dtype=np.float64) * 1000.0)).astype(np.int64)
    shift = np.maximum(0, np.floor(np.log2(us)).astype(np.int64) - (_SUB_BUCKET_BITS - 1))
    return (us >> shift) << shift


def _buckets_us(lat_ms: Any) -> tuple[Any, Any]:
    """The bucketed histogram (sorted keys, counts) of an array of latencies in ms."""
    keys, counts = np.unique(_bucket_keys(lat_ms), return_counts=True)
    return keys, counts.astype(np.int64)


def _shift(keys: Any) -> Any:
    return np.maximum(0, np.floor(np.log2(np.maximum(1, keys))).astype(np.int64) - (_SUB_BUCKET_BITS - 1))


def _highest_equivalent(keys: Any) -> Any:
    return keys + (np.int64(1) << _shift(keys)) - 1


_HALF = 1 << (_SUB_BUCKET_BITS - 1)
# hdrhistogram's counts array for 1 µs .. 1 h at 3 significant digits: 23,552 counters
_COUNTS_LEN = (math.ceil(math.log2(3_600_000_000)) - _SUB_BUCKET_BITS + 2) * _HALF
_INDEXES = np.arange(_COUNTS_LEN, dtype=np.int64)
_LOWEST = (_INDEXES - np.maximum(0, _INDEXES // _HALF - 1) * _HALF) << np.maximum(0, _INDEXES // _HALF - 1)


class _Hdr:
    """The run's latency histogram: hdrhistogram's exact bucket layout (µs, 1 µs .. 1 h, 3 significant
    digits) and its percentile, min, max and mean definitions, with numpy counts, so recording a frame and
    reading percentiles are vectorised instead of one Python call per value (they were most of the engine's
    CPU per request). tests/engine/test_load_generator.py checks it against the `hdrhistogram` package."""

    def __init__(self) -> None:
        self.counts = np.zeros(_COUNTS_LEN, dtype=np.int64)
        self.total = 0
        self.min_key: int | None = None
        self.max_key = 0

    def record(self, keys: Any, counts: Any) -> None:
        """Add (bucket lower bounds in µs, counts)."""
        if not len(keys):
            return
        keys = np.minimum(keys, int(_LOWEST[-1]))
        shift = _shift(keys)
        np.add.at(self.counts, shift * _HALF + (keys >> shift), counts)
        self.total += int(np.sum(counts))
        lo, hi = int(keys.min()), int(keys.max())
        self.min_key = lo if self.min_key is None else min(self.min_key, lo)
        self.max_key = max(self.max_key, hi)

    def percentile(self, q: float) -> int:
        target = max(1, int(min(q, 100.0) * self.total / 100 + 0.5))
        i = int(np.searchsorted(np.cumsum(self.counts), target))
        return int(_highest_equivalent(_LOWEST[i : i + 1])[0])

    def mean(self) -> float:
        median = _LOWEST + ((np.int64(1) << _shift(_LOWEST)) >> 1)
        return float(np.dot(self.counts, median)) / self.total if self.total else 0.0

    def min(self) -> int:
        return self.min_key or 0

    def max(self) -> int:
        return int(_highest_equivalent(np.array([self.max_key]))[0]) if self.max_key else 0


def _merge(parts: list[tuple[Any, Any]]) -> tuple[Any, Any] | None:
    """One (sorted bucket keys, counts) histogram of several (each sorted)."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    keys, inverse = np.unique(np.concatenate([k for k, _ in parts]), return_inverse=True)
    counts = np.bincount(inverse, weights=np.concatenate([c for _, c in parts])).astype(np.int64)
    return keys, counts


def _pct(hist: tuple[Any, Any] | None, q: float) -> float | None:
    """Percentile of a bucketed histogram as hdrhistogram defines it (the rank rounded to nearest, the bucket's
    highest equivalent value), in ms rounded to the microsecond."""
    if hist is None:
        return None
    keys, counts = hist
    cum = np.cumsum(counts)
    total = int(cum[-1]) if len(cum) else 0
    if total <= 0:
        return None
    rank = max(1, int(min(q, 100.0) * total / 100 + 0.5))
    i = int(np.searchsorted(cum, rank))
    return round(float(_highest_equivalent(keys[i : i + 1])[0]) / 1000.0, 3)
