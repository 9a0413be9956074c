"""Scorecards: a grade A-D, a trend and anomalies per experiment over its trailing runs, and the run-by-run
summary `faultplane analyze` shows.

Both store engines give the same answers: the only engine-specific query is `window_rows` (each experiment's
newest runs), and `_norm_row` removes what differs in how the engines return values. Formulas: docs/evidence.md.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from faultplane.services.evidence_baselines import MAD_TO_SIGMA, _mad, _median
from faultplane.services.evidence_figures import EstimateComparison, EvidenceError, _dt
from faultplane.services.evidence_ingest import _dialect, _ensure, _final, sync_metrics

TRAILING_RUNS = 10
GRADE_BANDS = (("A", 90.0), ("B", 75.0), ("C", 50.0), ("D", 0.0))
TREND_DELTA = 10.0  # score points between the newer and older half of the window
RECOVERY_TREND_RATIO = 1.5  # newer-half median recovery vs older-half median
ANOMALY_K = 3.0
ANOMALY_MIN_HISTORY = 3
ANOMALY_MIN_RATIO = 0.5  # a recovery must also be 50% slower than the median...
ANOMALY_MIN_SECONDS = 0.05  # ...and 50 ms slower, so that clock jitter on identical runs is no anomaly


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
