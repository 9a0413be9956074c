"""Service: the evidence of past runs: summaries, baselines, estimate vs actual, scores, trends, anomalies, exports.

Works on either store engine (DuckDB `Store`, `ClickHouseStore`). Per-run figures are derived from each journal
once, when it is indexed into `run_metrics`; what varies by engine is only the SQL that picks each experiment's
trailing runs, so both engines give the same answers on the same journals. Formulas: docs/evidence.md.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from faultplane.core.migrations import EVIDENCE_MIGRATIONS
from faultplane.core.store_clickhouse import journal_rows

__all__ = [
    "GRADE_BANDS",
    "TRAILING_RUNS",
    "Anomaly",
    "Baseline",
    "EstimateComparison",
    "EvidenceError",
    "Recovery",
    "RunEvidence",
    "Scorecard",
    "Summary",
    "anomalies",
    "baseline",
    "derive_tolerance",
    "estimate_vs_actual",
    "export_format",
    "export_rows",
    "export_table",
    "grade",
    "index_journals",
    "ingest_journals",
    "probe_baseline",
    "probe_samples",
    "recovery_of",
    "run_metrics_row",
    "run_score",
    "scorecards",
    "summarize",
    "sustained_recovery",
    "sync_metrics",
]

TRAILING_RUNS = 10
GRADE_BANDS = (("A", 90.0), ("B", 75.0), ("C", 50.0), ("D", 0.0))
TREND_DELTA = 10.0  # score points between the newer and older half of the window
RECOVERY_TREND_RATIO = 1.5  # newer-half median recovery vs older-half median
ANOMALY_K = 3.0
ANOMALY_MIN_HISTORY = 3
ANOMALY_MIN_RATIO = 0.5  # a recovery must also be 50% slower than the median...
ANOMALY_MIN_SECONDS = 0.05  # ...and 50 ms slower, so that clock jitter on identical runs is no anomaly
MAD_TO_SIGMA = 1.4826  # MAD x 1.4826 estimates sigma for normally distributed data
FAULT_TYPES = ("latency", "error", "timeout", "resource_exhaustion", "network_partition")
_UNFINISHED = ("running", "refused")


class EvidenceError(ValueError):
    """Bad input to an evidence function; the message names the field and the fix."""


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


# ---- recovery --------------------------------------------------------------------------------------------


def sustained_recovery(checks: Sequence[tuple[float, bool]], window_s: float) -> float | None:
    """Seconds from fault removal until the steady state held on every check for `window_s` seconds.

    `checks` are (seconds since the fault was removed, steady state met) in time order. The recovery time is the
    time of the first check of the first run of passing checks that lasts `window_s` (from its first to a later
    check); None when no such run exists. With `window_s = 0` it is the first passing check.
    """
    if window_s < 0:
        raise EvidenceError(f"window_s: {window_s!r} is negative; fix: 0 or more seconds")
    start: float | None = None
    for t, met in checks:
        if not met:
            start = None
            continue
        if start is None:
            start = t
        if t - start >= window_s:
            return start
    return None


class Recovery(BaseModel):
    measured: bool = Field(description="the run measured recovery (it has a steady-state hypothesis)")
    met: bool | None = None
    time_to_recover_s: float | None = None
    window_s: float = Field(0.0, description="how long the steady state had to hold; 0 = one passing check")
    source: Literal["checks", "engine", "none"] = "none"


def recovery_of(journal: Mapping[str, Any], window_s: float | None = None) -> Recovery:
    """Recovery of one run: from its recorded recovery checks over a sustained window when the journal has them
    (`steady_states.recovery.checks`), else the engine's single-check `time_to_recover_s`."""
    state = ((journal.get("steady_states") or {}).get("recovery")) or None
    if not state:
        return Recovery(measured=False)
    checks = state.get("checks")
    window = float(window_s if window_s is not None else state.get("window_s") or 0.0)
    if checks:
        pairs = [(float(c["t"]), bool(c["met"])) for c in checks]
        ttr = sustained_recovery(pairs, window)
        return Recovery(
            measured=True,
            met=ttr is not None,
            time_to_recover_s=None if ttr is None else round(ttr, 6),
            window_s=window,
            source="checks",
        )
    met = state.get("steady_state_met")
    ttr = state.get("time_to_recover_s")
    return Recovery(
        measured=True,
        met=met,
        time_to_recover_s=float(ttr) if met and ttr is not None else None,
        window_s=0.0,
        source="engine",
    )


# ---- per-run figures -----------------------------------------------------------------------------------------


def fault_types(journal: Mapping[str, Any]) -> list[str]:
    """The fault types the method injected: `fault_type`/`type` arguments of its actions, or a fault type named in
    a driver action (e.g. `netproxy.add_latency`)."""
    found: list[str] = []
    for run in journal.get("run") or []:
        activity = run.get("activity") or {}
        if activity.get("type") != "action":
            continue
        provider = activity.get("provider") or {}
        raw_args = provider.get("arguments")
        args: Mapping[str, Any] = raw_args if isinstance(raw_args, Mapping) else {}
        candidates = [
            args.get("fault_type"),
            (args.get("fault") or {}).get("type") if isinstance(args.get("fault"), Mapping) else None,
        ]
        output = run.get("output")
        if isinstance(output, Mapping):
            candidates.append(output.get("fault_type") or output.get("fault"))
        name = f"{provider.get('driver') or ''}.{provider.get('name') or ''}".lower()
        candidates += [t for t in FAULT_TYPES if t in name or t.replace("_", "-") in name]
        for c in candidates:
            if isinstance(c, str) and c in FAULT_TYPES and c not in found:
                found.append(c)
    return found


def _load_figure(journal: Mapping[str, Any], *names: str) -> float | None:
    load = journal.get("load") or {}
    if isinstance(load, Mapping):
        load = load.get("summary", load)
        for name in names:
            v = load.get(name) if isinstance(load, Mapping) else None
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                return float(v)
    return None


def _gate_peak(journal: Mapping[str, Any], sli: str) -> float | None:
    values = [
        s["value"]
        for s in (journal.get("gates") or {}).get("samples") or []
        if s.get("sli") == sli and isinstance(s.get("value"), int | float)
    ]
    return float(max(values)) if values else None


def actuals(journal: Mapping[str, Any], window_s: float | None = None) -> dict[str, float | None]:
    """What was measured: the load generator's summary first, else the peak of gate samples of that SLI."""
    err = _load_figure(journal, "error_rate")
    p99 = _load_figure(journal, "latency_p99_ms", "latency_p99")
    return {
        "error_rate": err if err is not None else _gate_peak(journal, "error_rate"),
        "latency_p99_ms": p99 if p99 is not None else _gate_peak(journal, "latency_p99"),
        "recovery_seconds": recovery_of(journal, window_s).time_to_recover_s,
    }


class EstimateComparison(BaseModel):
    metric: Literal["error_rate", "latency_p99_ms", "recovery_seconds"]
    estimate: float | None
    actual: float | None
    within: bool | None = Field(description="actual <= estimate (the estimate is the expected worst case)")
    ratio: float | None = Field(description="actual / estimate")


def estimate_vs_actual(journal: Mapping[str, Any], window_s: float | None = None) -> dict[str, Any]:
    """The author's estimate beside what the run measured, metric by metric."""
    est = journal.get("estimate") or (journal.get("experiment") or {}).get("estimate") or {}
    act = actuals(journal, window_s)
    rows = []
    for metric in ("error_rate", "latency_p99_ms", "recovery_seconds"):
        e, a = est.get(metric), act[metric]
        rows.append(
            EstimateComparison(
                metric=metric,
                estimate=e,
                actual=a,
                within=None if e is None or a is None else a <= e,
                ratio=None if e in (None, 0) or a is None else round(a / e, 6),
            )
        )
    return {"impact": est.get("impact"), "comparisons": rows}


def passed(status: str | None) -> bool:
    return status == "completed"


def run_score(
    status: str | None,
    recovery_met: bool | None,
    time_to_recover_s: float | None,
    est_recovery_s: float | None,
) -> float:
    """0-100: 70 for a run whose hypothesis held (status completed), 30 for recovery (15 when slower than the
    estimate, 0 when the steady state did not return; a run without recovery measurement earns it by passing)."""
    p = 1.0 if passed(status) else 0.0
    if recovery_met is None:
        r = p
    elif not recovery_met:
        r = 0.0
    elif est_recovery_s is not None and time_to_recover_s is not None and time_to_recover_s > est_recovery_s:
        r = 0.5
    else:
        r = 1.0
    return round(100.0 * (0.7 * p + 0.3 * r), 6)


def _dt(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        d = value
    elif isinstance(value, int | float):
        d = dt.datetime.fromtimestamp(value, dt.UTC)
    else:
        d = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return d.replace(tzinfo=dt.UTC) if d.tzinfo is None else d.astimezone(dt.UTC)


def run_metrics_row(journal: Mapping[str, Any], window_s: float | None = None) -> dict[str, Any]:
    """The `run_metrics` row of one journal (JSON dict form)."""
    experiment = journal.get("experiment") or {}
    est = journal.get("estimate") or experiment.get("estimate") or {}
    rec = recovery_of(journal, window_s)
    act = actuals(journal, window_s)
    status = journal.get("status")
    est_rec = est.get("recovery_seconds")
    return {
        "run_id": journal["run_id"],
        "experiment_key": journal.get("family") or experiment.get("title"),
        "experiment_title": experiment.get("title"),
        "status": status,
        "passed": passed(status),
        "dry_run": bool(journal.get("dry_run")),
        "started_at": _dt(journal.get("start")),
        "duration_s": journal.get("duration"),
        "recovery_met": rec.met,
        "time_to_recover_s": rec.time_to_recover_s,
        "recovery_window_s": rec.window_s if rec.measured else None,
        "est_recovery_s": est_rec,
        "est_error_rate": est.get("error_rate"),
        "est_latency_p99_ms": est.get("latency_p99_ms"),
        "actual_error_rate": act["error_rate"],
        "actual_latency_p99_ms": act["latency_p99_ms"],
        "gate_breached": bool((journal.get("gates") or {}).get("breach")),
        "fault_types": fault_types(journal),
        "blast_stage": (journal.get("policy") or {}).get("stage"),
        "run_score": run_score(status, rec.met, rec.time_to_recover_s, est_rec),
    }


# ---- writing -------------------------------------------------------------------------------------------------


def _dialect(store: Any) -> str:
    return str(getattr(store, "dialect", "duckdb"))


def _ensure(store: Any) -> None:
    store.ensure_schema("evidence", EVIDENCE_MIGRATIONS)


def _arrow_table(rows: list[dict[str, Any]]) -> Any:
    import pyarrow as pa

    arrays = {}
    for c in rows[0]:
        values = [r.get(c) for r in rows]
        # the column's type from its first non-null value: rows of one table are uniform
        sample = next((v for v in values if v is not None), None)
        if isinstance(sample, dt.datetime):
            arrays[c] = pa.array(values, type=pa.timestamp("us", tz="UTC"))
        elif isinstance(sample, list):
            arrays[c] = pa.array(values, type=pa.list_(pa.string()))
        else:
            arrays[c] = pa.array(values)
    return pa.table(arrays)


def _replace_rows(store: Any, tables: Mapping[str, list[dict[str, Any]]], key: str = "run_id") -> None:
    """Write rows, replacing earlier rows of the same runs: one transaction on DuckDB, new versions on ClickHouse."""
    if _dialect(store) == "clickhouse":
        import time

        version = time.time_ns()
        for table, rows in tables.items():
            for i in range(0, len(rows), 50_000):
                store.insert(table, rows[i : i + 50_000], version=version)
        return
    with store.connect() as con:
        con.execute("BEGIN")
        for table, rows in tables.items():
            if not rows:
                continue
            arrow = _arrow_table(rows)
            ids = _arrow_table([{key: i} for i in sorted({r[key] for r in rows})])
            con.register("_fp_ids", ids)
            con.execute(f"DELETE FROM {table} WHERE {key} IN (SELECT {key} FROM _fp_ids)")
            con.unregister("_fp_ids")
            con.register("_fp_new", arrow)
            cols = ", ".join(arrow.column_names)
            con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _fp_new")
            con.unregister("_fp_new")
        con.execute("COMMIT")


def _as_dict(journal: Any) -> dict[str, Any]:
    if hasattr(journal, "model_dump"):
        return journal.model_dump(mode="json")
    if isinstance(journal, str | bytes):
        return json.loads(journal)
    return dict(journal)


def index_journals(store: Any, journals: Iterable[Any], window_s: float | None = None) -> int:
    """Derive and store the `run_metrics` rows of journals already in the store (or about to be)."""
    _ensure(store)
    rows = [run_metrics_row(_as_dict(j), window_s) for j in journals]
    if rows:
        _replace_rows(store, {"run_metrics": rows})
    return len(rows)


def ingest_journals(store: Any, journals: Iterable[Any], batch: int = 5_000) -> int:
    """Write finished journals to the store in bulk: runs, activities, journals and run_metrics rows.

    The fleet path (and the benchmark's): on DuckDB each batch is one transaction of Arrow inserts; on ClickHouse,
    one insert per table and batch.
    """
    _ensure(store)
    total = 0
    pending: list[dict[str, Any]] = []

    from pydantic_core import to_json

    def flush() -> None:
        tables: dict[str, list[dict[str, Any]]] = {
            "runs": [],
            "activities": [],
            "journals": [],
            "run_metrics": [],
        }
        for j in pending:
            # pydantic-core's encoder: json.dumps of the whole journal was a third of a ClickHouse ingest
            body = to_json(j, fallback=str, inf_nan_mode="constants").decode()
            for table, rows in journal_rows(j, body=body).items():
                if table in tables:  # bulk-imported journals earn no stage: `exposures` is the engine's own
                    tables[table] += rows
            tables["run_metrics"].append(run_metrics_row(j))
        _replace_rows(store, tables)

    for journal in journals:
        pending.append(_as_dict(journal))
        if len(pending) >= batch:
            flush()
            total += len(pending)
            pending = []
    if pending:
        flush()
        total += len(pending)
    return total


def _final(store: Any) -> str:
    return " FINAL" if _dialect(store) == "clickhouse" else ""


def sync_metrics(store: Any) -> int:
    """Index every stored journal that has no `run_metrics` row yet (runs persisted by the engine)."""
    _ensure(store)
    f = _final(store)
    rows = store.query(
        f"SELECT body FROM journals{f} WHERE run_id NOT IN (SELECT run_id FROM run_metrics{f})"
    )
    journals = []
    for r in rows:
        try:
            j = json.loads(r["body"])
        except (TypeError, ValueError):
            continue
        # refused runs are indexed too (and left out by every query), so they are not re-read on every call
        if j.get("status") != "running":
            journals.append(j)
    return index_journals(store, journals) if journals else 0


# ---- reading -------------------------------------------------------------------------------------------------

_METRIC_COLS = (
    "run_id, experiment_key, experiment_title, status, passed, started_at, duration_s, recovery_met, "
    "time_to_recover_s, recovery_window_s, est_recovery_s, est_error_rate, est_latency_p99_ms, actual_error_rate, "
    "actual_latency_p99_ms, gate_breached, fault_types, blast_stage, run_score"
)


def _norm_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """One metrics row with engine differences removed (UInt8 vs BOOLEAN, NULL vs empty arrays, time zones)."""
    out = dict(row)
    for key in ("passed", "recovery_met", "gate_breached"):
        if out.get(key) is not None:
            out[key] = bool(out[key])
    out["fault_types"] = list(out.get("fault_types") or [])
    out["started_at"] = _dt(out.get("started_at"))
    for key in (
        "duration_s",
        "time_to_recover_s",
        "recovery_window_s",
        "est_recovery_s",
        "est_error_rate",
        "est_latency_p99_ms",
        "actual_error_rate",
        "actual_latency_p99_ms",
        "run_score",
    ):
        if out.get(key) is not None:
            out[key] = round(float(out[key]), 6)
    return out


def window_rows(store: Any, per_experiment: int, experiment: str | None = None) -> list[dict[str, Any]]:
    """The newest `per_experiment` finished, non-dry runs of each experiment, newest first within each.

    The one engine-specific query: DuckDB ranks with a window function, ClickHouse uses LIMIT n BY.
    """
    if not isinstance(per_experiment, int) or per_experiment < 1:
        raise EvidenceError(f"per_experiment: {per_experiment!r}; fix: a positive number of runs")
    params: list[Any] = []
    where = "NOT dry_run AND status NOT IN ('running', 'refused', 'interrupted')"
    if experiment:
        where += " AND (experiment_key = ? OR experiment_title = ?)"
        params += [experiment, experiment]
    if _dialect(store) == "clickhouse":
        where = where.replace("NOT dry_run", "dry_run = 0")
        sql = (
            f"SELECT {_METRIC_COLS} FROM run_metrics FINAL WHERE {where} "
            f"ORDER BY experiment_key, started_at DESC, run_id DESC LIMIT {per_experiment} BY experiment_key"
        )
    else:
        sql = (
            f"SELECT {_METRIC_COLS} FROM run_metrics WHERE {where} "
            "QUALIFY row_number() OVER (PARTITION BY experiment_key ORDER BY started_at DESC, run_id DESC) "
            f"<= {per_experiment} ORDER BY experiment_key, started_at DESC, run_id DESC"
        )
    return [_norm_row(r) for r in store.query(sql, params or None)]


def grade(score: float) -> str:
    for letter, floor in GRADE_BANDS:
        if score >= floor:
            return letter
    return "D"


class Anomaly(BaseModel):
    run_id: str
    experiment: str
    started_at: dt.datetime
    time_to_recover_s: float
    baseline_median_s: float
    threshold_s: float
    history: int = Field(description="earlier passing runs the baseline is taken from")
    reason: str


class Scorecard(BaseModel):
    experiment: str
    title: str | None
    runs: int = Field(description=f"runs in the trailing window (at most {TRAILING_RUNS})")
    score: float
    grade: str
    pass_rate: float
    trend: Literal["improving", "stable", "degrading", "insufficient_data"]
    trend_reason: str
    score_delta: float | None = Field(description="newer half minus older half of the window, score points")
    recovery_median_s: float | None
    last_run_id: str
    last_status: str | None
    last_started_at: dt.datetime
    anomalies: list[Anomaly] = Field(default_factory=list)


def _anomalies_for(rows_newest_first: list[dict[str, Any]], window: int) -> list[Anomaly]:
    """Passing runs in the window whose recovery is slow against earlier passing runs' (median + max(k*sigma_MAD,
    50% of median, 50 ms))."""
    found = []
    chronological = list(reversed(rows_newest_first))
    recent_ids = {r["run_id"] for r in rows_newest_first[:window]}
    history: list[float] = []
    for r in chronological:
        t = r.get("time_to_recover_s")
        ok = r.get("passed") and r.get("recovery_met") and t is not None
        if ok and r["run_id"] in recent_ids and len(history) >= ANOMALY_MIN_HISTORY:
            prior = history[-TRAILING_RUNS:]
            med = _median(prior)
            sigma = MAD_TO_SIGMA * _mad(prior)
            threshold = med + max(ANOMALY_K * sigma, ANOMALY_MIN_RATIO * med, ANOMALY_MIN_SECONDS)
            if t > threshold:
                found.append(
                    Anomaly(
                        run_id=r["run_id"],
                        experiment=r["experiment_key"],
                        started_at=r["started_at"],
                        time_to_recover_s=t,
                        baseline_median_s=round(med, 6),
                        threshold_s=round(threshold, 6),
                        history=len(prior),
                        reason=(
                            f"passed, but recovery took {t:.3f}s against a median of {med:.3f}s over the "
                            f"{len(prior)} previous passing runs (threshold {threshold:.3f}s)"
                        ),
                    )
                )
        if ok:
            history.append(float(t))
    return found


def _scorecard(key: str, rows: list[dict[str, Any]]) -> Scorecard:
    """`rows`: this experiment's runs, newest first, up to 2x the window (the older half feeds anomaly history)."""
    window = rows[:TRAILING_RUNS]
    n = len(window)
    scores = [float(r["run_score"] or 0.0) for r in window]
    score = round(statistics.fmean(scores), 6)
    pass_rate = round(sum(1 for r in window if r["passed"]) / n, 6)
    ttrs = [r["time_to_recover_s"] for r in window if r.get("time_to_recover_s") is not None]
    recovery_median = round(_median(ttrs), 6) if ttrs else None
    delta: float | None = None
    if n < 4:
        trend, reason = "insufficient_data", f"{n} run(s); a trend needs at least 4"
    else:
        h = n // 2
        newer, older = window[:h], window[n - h :]
        delta = round(
            statistics.fmean(float(r["run_score"] or 0) for r in newer)
            - statistics.fmean(float(r["run_score"] or 0) for r in older),
            6,
        )
        new_t = [r["time_to_recover_s"] for r in newer if r.get("time_to_recover_s") is not None]
        old_t = [r["time_to_recover_s"] for r in older if r.get("time_to_recover_s") is not None]
        ratio = (
            _median(new_t) / _median(old_t)
            if len(new_t) >= 2 and len(old_t) >= 2 and _median(old_t) > 0
            else None
        )
        if delta >= TREND_DELTA:
            trend, reason = "improving", f"score +{delta:.1f} points (newer {h} runs vs older {h})"
        elif delta <= -TREND_DELTA:
            trend, reason = "degrading", f"score {delta:.1f} points (newer {h} runs vs older {h})"
        elif ratio is not None and ratio >= RECOVERY_TREND_RATIO:
            trend, reason = "degrading", f"recovery {ratio:.2f}x slower (median, newer {h} vs older {h} runs)"
        elif ratio is not None and ratio <= 1 / RECOVERY_TREND_RATIO:
            # a newer median of 0 s (recovered by the first check) has no finite speed-up to print
            faster = f"{1 / ratio:.2f}x faster" if ratio > 0 else "immediate now"
            trend, reason = (
                "improving",
                f"recovery {faster} (median, newer {h} vs older {h} runs)",
            )
        else:
            trend, reason = (
                "stable",
                f"score {delta:+.1f} points, recovery steady (newer {h} vs older {h} runs)",
            )
    last = window[0]
    return Scorecard(
        experiment=key,
        title=last.get("experiment_title"),
        runs=n,
        score=score,
        grade=grade(score),
        pass_rate=pass_rate,
        trend=trend,
        trend_reason=reason,
        score_delta=delta,
        recovery_median_s=recovery_median,
        last_run_id=last["run_id"],
        last_status=last.get("status"),
        last_started_at=last["started_at"],
        anomalies=_anomalies_for(rows, TRAILING_RUNS),
    )


def scorecards(store: Any, experiment: str | None = None, *, sync: bool = True) -> list[Scorecard]:
    """Grade A-D, trend and anomalies per experiment over its trailing 10 runs (formulas: docs/evidence.md)."""
    if sync:
        sync_metrics(store)
    else:
        _ensure(store)
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in window_rows(store, 2 * TRAILING_RUNS, experiment):
        by_key[r["experiment_key"]].append(r)
    return [_scorecard(k, rows) for k, rows in sorted(by_key.items())]


def anomalies(store: Any, experiment: str | None = None) -> list[Anomaly]:
    return [a for card in scorecards(store, experiment) for a in card.anomalies]


class RunEvidence(BaseModel):
    run_id: str
    experiment: str
    title: str | None
    status: str | None
    passed: bool
    started_at: dt.datetime
    duration_s: float | None
    score: float
    recovery_met: bool | None
    time_to_recover_s: float | None
    recovery_window_s: float | None
    fault_types: list[str]
    gate_breached: bool
    estimate: list[EstimateComparison]
    anomaly: bool = False


class Summary(BaseModel):
    store: str
    runs_total: int
    runs_shown: int
    runs: list[RunEvidence]
    experiments: list[Scorecard]


def _run_evidence(r: Mapping[str, Any], anomalous: set[str]) -> RunEvidence:
    def cmp(metric: str, est: Any, act: Any) -> EstimateComparison:
        return EstimateComparison(
            metric=metric,
            estimate=est,
            actual=act,
            within=None if est is None or act is None else act <= est,
            ratio=None if est in (None, 0) or act is None else round(act / est, 6),
        )

    return RunEvidence(
        run_id=r["run_id"],
        experiment=r["experiment_key"],
        title=r.get("experiment_title"),
        status=r.get("status"),
        passed=bool(r.get("passed")),
        started_at=r["started_at"],
        duration_s=r.get("duration_s"),
        score=float(r.get("run_score") or 0.0),
        recovery_met=r.get("recovery_met"),
        time_to_recover_s=r.get("time_to_recover_s"),
        recovery_window_s=r.get("recovery_window_s"),
        fault_types=list(r.get("fault_types") or []),
        gate_breached=bool(r.get("gate_breached")),
        estimate=[
            cmp("error_rate", r.get("est_error_rate"), r.get("actual_error_rate")),
            cmp("latency_p99_ms", r.get("est_latency_p99_ms"), r.get("actual_latency_p99_ms")),
            cmp("recovery_seconds", r.get("est_recovery_s"), r.get("time_to_recover_s")),
        ],
        anomaly=r["run_id"] in anomalous,
    )


def summarize(store: Any, last: int | None = 10, experiment: str | None = None) -> Summary:
    """What `faultplane analyze` shows without SQL: the last `last` runs (all when None) with estimate vs actual,
    and a scorecard per experiment."""
    if last is not None and (not isinstance(last, int) or isinstance(last, bool) or last < 1):
        raise EvidenceError(f"last: {last!r}; fix: a positive number of runs, or --all")
    cards = scorecards(store, experiment)
    anomalous = {a.run_id for c in cards for a in c.anomalies}
    params: list[Any] = []
    where = "NOT dry_run AND status NOT IN ('running', 'refused', 'interrupted')"
    if experiment:
        where += " AND (experiment_key = ? OR experiment_title = ?)"
        params += [experiment, experiment]
    f = _final(store)
    if f:
        where = where.replace("NOT dry_run", "dry_run = 0")
    total = int(
        store.query(f"SELECT count(*) AS n FROM run_metrics{f} WHERE {where}", params or None)[0]["n"]
    )
    sql = f"SELECT {_METRIC_COLS} FROM run_metrics{f} WHERE {where} ORDER BY started_at DESC, run_id DESC"
    if last is not None:
        sql += f" LIMIT {int(last)}"
    rows = [_norm_row(r) for r in store.query(sql, params or None)]
    return Summary(
        store=str(getattr(store, "path", store)),
        runs_total=total,
        runs_shown=len(rows),
        runs=[_run_evidence(r, anomalous) for r in rows],
        experiments=cards,
    )


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


# ---- exports -------------------------------------------------------------------------------------------------

EXPORT_FORMATS = ("parquet", "csv", "json", "arrow")
_SUFFIX_FORMAT = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".json": "json",
    ".arrow": "arrow",
    ".feather": "arrow",
    ".ipc": "arrow",
}


def export_format(path: str | Path, fmt: str | None = None) -> str:
    if fmt:
        if fmt not in EXPORT_FORMATS:
            raise EvidenceError(f"format: {fmt!r}; fix: one of {', '.join(EXPORT_FORMATS)}")
        return fmt
    found = _SUFFIX_FORMAT.get(Path(path).suffix.lower())
    if found is None:
        raise EvidenceError(
            f"export: cannot tell the format of {str(path)!r}; fix: end it in .parquet, .csv, .json or .arrow, "
            "or pass --format"
        )
    return found


def export_rows(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], path: str | Path, fmt: str | None = None
) -> Path:
    """Write a result set as Parquet, CSV, JSON (an array of objects) or Arrow IPC (file format)."""
    import pyarrow as pa

    arrays = {}
    for i, c in enumerate(columns):
        values = [_exportable(row[i]) for row in rows]
        try:
            arrays[c] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            # mixed-type columns (JSON values) are kept as their JSON text
            arrays[c] = pa.array([None if v is None else json.dumps(v, default=str) for v in values])
    return export_table(pa.table(arrays), path, fmt)


def export_table(table: Any, path: str | Path, fmt: str | None = None) -> Path:
    """Write a pyarrow Table in one of EXPORT_FORMATS (from `fmt` or the file suffix)."""
    import pyarrow as pa

    fmt = export_format(path, fmt)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "json":
        from faultplane.core.jsonable import to_jsonable

        path.write_text(
            json.dumps(to_jsonable(table.to_pylist()), ensure_ascii=False, indent=1), encoding="utf-8"
        )
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    elif fmt == "csv":
        import pyarrow.csv as pacsv

        # CSV has no lists or structs: nested values are written as their JSON text
        flat = pa.table(
            {
                c: (
                    pa.array(
                        [None if v is None else json.dumps(v, default=str) for v in table[c].to_pylist()],
                        type=pa.string(),
                    )
                    if pa.types.is_nested(table[c].type)
                    else table[c]
                )
                for c in table.column_names
            }
        )
        pacsv.write_csv(flat, path)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    return path


def _exportable(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    return value
