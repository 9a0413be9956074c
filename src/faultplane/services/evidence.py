"""Service: the evidence of past runs: summaries, baselines, estimate vs actual, scores, trends, anomalies, exports.

Works on either store engine (DuckDB `Store`, `ClickHouseStore`). Per-run figures are derived from each journal
once, when it is indexed into `run_metrics`; what varies by engine is only the SQL that picks each experiment's
trailing runs, so both engines give the same answers on the same journals. Formulas: docs/evidence.md.

This module is the one place callers import from; the work lives in one module per question a reader brings:
- `evidence_figures`: one run's figures from its journal (recovery, fault types, estimate vs actual, score)
- `evidence_ingest`: journals and their `run_metrics` rows into the store
- `evidence_scores`: scorecards, trends, anomalies and the run summary
- `evidence_baselines`: tolerances derived from samples, and probe samples from the store
- `evidence_export`: result sets written as Parquet, CSV, JSON or Arrow
- `evidence_bulk`: NDJSON journal files ingested by DuckDB itself, at fleet rates
"""

from __future__ import annotations

from faultplane.core.journal_rows import journal_rows
from faultplane.core.migrations import EVIDENCE_MIGRATIONS
from faultplane.services.evidence_baselines import (
    MAD_TO_SIGMA,
    Baseline,
    baseline,
    derive_tolerance,
    probe_baseline,
    probe_samples,
)
from faultplane.services.evidence_export import (
    EXPORT_FORMATS,
    export_format,
    export_rows,
    export_table,
)
from faultplane.services.evidence_figures import (
    FAULT_TYPES,
    EstimateComparison,
    EvidenceError,
    Recovery,
    actuals,
    estimate_vs_actual,
    fault_types,
    passed,
    recovery_of,
    run_metrics_row,
    run_score,
    sustained_recovery,
)
from faultplane.services.evidence_ingest import (
    index_journals,
    ingest_journals,
    sync_metrics,
)
from faultplane.services.evidence_scores import (
    ANOMALY_K,
    ANOMALY_MIN_HISTORY,
    ANOMALY_MIN_RATIO,
    ANOMALY_MIN_SECONDS,
    GRADE_BANDS,
    RECOVERY_TREND_RATIO,
    TRAILING_RUNS,
    TREND_DELTA,
    Anomaly,
    RunEvidence,
    Scorecard,
    Summary,
    anomalies,
    grade,
    scorecards,
    summarize,
    window_rows,
)

# private names a benchmark (bench_store: _norm_row) and tests (_scorecard) reach for
from faultplane.services.evidence_scores import _norm_row as _norm_row
from faultplane.services.evidence_scores import _scorecard as _scorecard

__all__ = [
    "ANOMALY_K",
    "ANOMALY_MIN_HISTORY",
    "ANOMALY_MIN_RATIO",
    "ANOMALY_MIN_SECONDS",
    "EVIDENCE_MIGRATIONS",
    "EXPORT_FORMATS",
    "FAULT_TYPES",
    "GRADE_BANDS",
    "MAD_TO_SIGMA",
    "RECOVERY_TREND_RATIO",
    "TRAILING_RUNS",
    "TREND_DELTA",
    "Anomaly",
    "Baseline",
    "EstimateComparison",
    "EvidenceError",
    "Recovery",
    "RunEvidence",
    "Scorecard",
    "Summary",
    "actuals",
    "anomalies",
    "baseline",
    "derive_tolerance",
    "estimate_vs_actual",
    "export_format",
    "export_rows",
    "export_table",
    "fault_types",
    "grade",
    "index_journals",
    "ingest_journals",
    "journal_rows",
    "passed",
    "probe_baseline",
    "probe_samples",
    "recovery_of",
    "run_metrics_row",
    "run_score",
    "scorecards",
    "summarize",
    "sustained_recovery",
    "sync_metrics",
    "window_rows",
]
