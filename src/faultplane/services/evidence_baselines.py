"""Baselines: a `range` tolerance derived from samples (mean +- k sigma, percentiles, or median +- k MAD), and
the samples themselves taken from the stored outputs of a steady-state probe in past runs.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from faultplane.services.evidence_figures import EvidenceError
from faultplane.services.evidence_ingest import _final

MAD_TO_SIGMA = 1.4826  # MAD x 1.4826 estimates sigma for normally distributed data


# ---- statistics ----------------------------------------------------------------------------------------------


def _percentile(sorted_values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, DuckDB's quantile_cont)."""
    if not sorted_values:
        raise EvidenceError("samples: empty; fix: collect at least one sample")
    pos = (len(sorted_values) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def _mad(values: Sequence[float]) -> float:
    m = _median(values)
    return _median([abs(v - m) for v in values])


class Baseline(BaseModel):
    """Statistics of baseline samples and the tolerance derived from them."""

    method: Literal["mean_ksigma", "percentile", "mad"]
    k: float
    n: int
    mean: float
    std: float
    median: float
    mad: float
    low: float
    high: float
    percentiles: tuple[float, float] | None = None
    tolerance: dict[str, Any] = Field(description="a Faultplane `range` tolerance, usable in an experiment")


def _numbers(samples: Iterable[Any]) -> list[float]:
    out = []
    for i, s in enumerate(samples):
        if isinstance(s, bool) or not isinstance(s, int | float):
            raise EvidenceError(f"samples[{i}]: {s!r} is not a number; fix: pass numeric probe readings")
        if not math.isfinite(s):
            raise EvidenceError(f"samples[{i}]: {s!r} is not finite; fix: drop NaN/inf readings")
        out.append(float(s))
    return out


def baseline(
    samples: Iterable[Any],
    method: str = "mean_ksigma",
    k: float = 3.0,
    percentiles: tuple[float, float] = (1.0, 99.0),
) -> Baseline:
    """Describe `samples` and derive a `range` tolerance by `method`:

    - mean_ksigma: [mean - k*s, mean + k*s], s the sample standard deviation (n - 1)
    - percentile: [P_lo, P_hi] of the samples, linear interpolation
    - mad: [median - k*1.4826*MAD, median + k*1.4826*MAD], robust to outliers in the baseline
    """
    values = _numbers(samples)
    if method not in ("mean_ksigma", "percentile", "mad"):
        raise EvidenceError(f"method: {method!r} is unknown; fix: use mean_ksigma, percentile or mad")
    if not isinstance(k, int | float) or isinstance(k, bool) or not k > 0 or not math.isfinite(k):
        raise EvidenceError(f"k: {k!r} must be a positive number of deviations; fix: e.g. k=3")
    lo_p, hi_p = percentiles
    if not 0 <= lo_p < hi_p <= 100:
        raise EvidenceError(f"percentiles: {percentiles!r}; fix: two numbers 0 <= low < high <= 100")
    needed = 2 if method == "mean_ksigma" else 1
    if len(values) < needed:
        raise EvidenceError(
            f"samples: {len(values)} sample(s), method {method} needs at least {needed}; fix: run the baseline "
            "more times (each run's steady-state probes are samples)"
        )
    ordered = sorted(values)
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    median = _median(values)
    mad = _mad(values)
    if method == "mean_ksigma":
        low, high = mean - k * std, mean + k * std
    elif method == "mad":
        low, high = median - k * MAD_TO_SIGMA * mad, median + k * MAD_TO_SIGMA * mad
    else:
        low, high = _percentile(ordered, lo_p), _percentile(ordered, hi_p)
    low, high = round(low, 9), round(high, 9)
    return Baseline(
        method=method,
        k=float(k),
        n=len(values),
        mean=mean,
        std=std,
        median=median,
        mad=mad,
        low=low,
        high=high,
        percentiles=(lo_p, hi_p) if method == "percentile" else None,
        tolerance={"type": "range", "range": [low, high]},
    )


def derive_tolerance(
    samples: Iterable[Any],
    method: str = "mean_ksigma",
    k: float = 3.0,
    percentiles: tuple[float, float] = (1.0, 99.0),
) -> dict[str, Any]:
    """A `range` tolerance dict derived from baseline samples (see `baseline` for the methods)."""
    return baseline(samples, method, k, percentiles).tolerance


# ---- baselines from stored probe outputs ---------------------------------------------------------------------


def probe_samples(
    store: Any,
    probe: str,
    experiment: str | None = None,
    *,
    phase: str | None = "hypothesis_before",
    value_path: str | None = None,
    limit: int = 1000,
) -> list[float]:
    """Numeric outputs of probe `probe` in past runs (newest `limit`), from the `activities` table.

    `phase` hypothesis_before (default) takes the baseline-phase readings only, before any fault; None takes all.
    """
    from faultplane.engine.sli import SliError, to_number

    if not probe:
        raise EvidenceError(
            "probe: empty; fix: the name of a steady-state probe (see `faultplane runs list`)"
        )
    f = _final(store)
    sql = f"SELECT output FROM activities{f} WHERE name = ? AND type = 'probe' AND status = 'succeeded'"
    params: list[Any] = [probe]
    if phase:
        sql += " AND phase = ?"
        params.append(phase)
    if experiment:
        sql += (
            f" AND run_id IN (SELECT run_id FROM runs{f} WHERE (experiment_title = ? OR experiment_family = ?)"
            + (" AND dry_run = 0)" if f else " AND NOT dry_run)")
        )
        params += [experiment, experiment]
    sql += f" ORDER BY started_at DESC, run_id, seq LIMIT {int(limit)}"
    out = []
    for r in store.query(sql, params):
        try:
            out.append(to_number(json.loads(r["output"]), value_path))
        except (SliError, TypeError, ValueError):
            continue
    return out


def probe_baseline(
    store: Any,
    probe: str,
    experiment: str | None = None,
    *,
    method: str = "mean_ksigma",
    k: float = 3.0,
    percentiles: tuple[float, float] = (1.0, 99.0),
    phase: str | None = "hypothesis_before",
    value_path: str | None = None,
    limit: int = 1000,
) -> Baseline:
    samples = probe_samples(store, probe, experiment, phase=phase, value_path=value_path, limit=limit)
    if not samples:
        scope = f" of experiment {experiment!r}" if experiment else ""
        raise EvidenceError(
            f"probe: no numeric readings of {probe!r}{scope} in phase {phase or 'any'}; fix: check the probe "
            "name, pass --value-path for structured outputs, or run the experiment to collect a baseline"
        )
    return baseline(samples, method, k, percentiles)
