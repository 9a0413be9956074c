"""Property: over any set of journals, DuckDB and ClickHouse give the same evidence.

Journals are generated (families, outcomes, start times, probe readings, recovery, compliance tags, dry runs,
re-ingested runs) and written to a fresh DuckDB file and a fresh ClickHouse database with the store's own code;
scorecards (grades, trends), anomalies, window rows, probe baselines, the family-history query and compliance
coverage must be equal. chDB (ClickHouse 26.x in process) takes the many examples; the Debian server (18.16 over
HTTP) one fixed set, so both protocol paths and both ends of the version range are covered.
"""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import pytest
from clickhouse_helpers import chdb_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultplane.core.history import query_family_runs
from faultplane.core.store import Store
from faultplane.services import compliance as co
from faultplane.services import evidence as ev

T0 = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
FAMILIES = ("checkout", "payments", "search ünïcode")
STATUSES = ("completed", "completed", "failed", "deviated", "aborted", "interrupted", "refused")
TAGS = ("DORA-25", "NIS2-21.2.C", "PCI-12.10.2", "SOC2-A1.2", "team:core", "dr")


def _activity(
    name: str, kind: str, start: dt.datetime, output: Any, status: str = "succeeded"
) -> dict[str, Any]:
    end = start + dt.timedelta(milliseconds=5)
    return {
        "activity": {"name": name, "type": kind},
        "status": status,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "duration": 0.005,
        "output": output,
        "exception": None if status == "succeeded" else "boom",
    }


@st.composite
def journal(draw: st.DrawFn, i: int) -> dict[str, Any]:
    family = draw(st.sampled_from(FAMILIES))
    status = draw(st.sampled_from(STATUSES))
    # distinct, microsecond-precise start times: ties would order differently on any two engines
    start = T0 + dt.timedelta(
        seconds=i * 97 + draw(st.integers(0, 90)), microseconds=draw(st.integers(0, 999_999))
    )
    duration = draw(st.floats(0.01, 600, allow_nan=False))
    latency = draw(st.floats(0.5, 900, allow_nan=False).map(lambda v: round(v, 3)))
    met_before = draw(st.one_of(st.none(), st.booleans()))
    met_after = draw(st.one_of(st.none(), st.booleans()))
    recovered = draw(st.booleans())
    ttr = draw(st.floats(0.0, 120, allow_nan=False).map(lambda v: round(v, 3)))
    tags = draw(st.lists(st.sampled_from(TAGS), max_size=3, unique=True))
    probes = [_activity("latency", "probe", start, latency)]
    return {
        "run_id": f"{draw(st.integers(0, 2**63)):016x}{i:04d}",
        "family": family,
        "status": status,
        "dry_run": draw(st.booleans()) and draw(st.booleans()),
        "start": start.isoformat(),
        "end": (start + dt.timedelta(seconds=duration)).isoformat(),
        "duration": duration,
        "seed": draw(st.integers(0, 2**62)),
        "experiment": {"title": family.title(), "tags": tags},
        "estimate": {"recovery_seconds": draw(st.sampled_from((None, 5.0, 30.0))), "latency_p99_ms": 300},
        "steady_states": {
            "before": {"steady_state_met": met_before, "probes": probes},
            "after": {
                "steady_state_met": met_after,
                "probes": [_activity("latency", "probe", start, latency * 2)],
            },
            "recovery": {"steady_state_met": recovered, "time_to_recover_s": ttr},
        },
        "run": [
            {
                **_activity(
                    "inject", "action", start, {"ok": True}, draw(st.sampled_from(("succeeded", "failed")))
                ),
                "activity": {"name": "inject", "type": "action", "arguments": {"fault_type": "latency"}},
            }
        ],
        "rollbacks": [_activity("revert", "action", start, "done")],
        "policy": {"stage": draw(st.sampled_from((None, 0, 1, 2)))},
        "verdict": draw(st.sampled_from((None, "held", "refuted — ünïcode 'quoted' \\ back"))),
    }


@st.composite
def journal_sets(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 24))
    out = [draw(journal(i)) for i in range(n)]
    # a run indexed twice (re-written): both engines keep one row for it
    if draw(st.booleans()):
        out.append(dict(out[0]))
    return out


def _cards(store: Any) -> list[dict[str, Any]]:
    return [c.model_dump() for c in ev.scorecards(store)]


def _baseline(store: Any, family: str) -> Any:
    try:
        return ev.probe_baseline(store, "latency", family.title(), method="percentile").model_dump()
    except ev.EvidenceError as exc:
        return str(exc)


def _history(store: Any) -> list[list[Any]]:
    out = []
    for family in FAMILIES:
        rows = query_family_runs(store, family, 50)
        out.append(
            [
                (
                    r["run_id"],
                    r["status"],
                    None if r["steady_state_before"] is None else bool(r["steady_state_before"]),
                    r["blast_stage"],
                    r["started_at"].astimezone(dt.UTC),
                )
                for r in rows
            ]
        )
    return out


def _coverage(store: Any) -> dict[str, Any]:
    rep = co.coverage_report(store, now=T0 + dt.timedelta(days=30))
    return rep.model_dump(exclude={"generated_at", "store"})


def evidence(store: Any) -> dict[str, Any]:
    return {
        "scorecards": _cards(store),
        "anomalies": [a.model_dump() for a in ev.anomalies(store)],
        "window": ev.window_rows(store, 5),
        "baselines": [_baseline(store, f) for f in FAMILIES],
        "history": _history(store),
        "coverage": _coverage(store),
    }


def _both(journals: list[dict[str, Any]], tmp_path: Path, ch: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The evidence of `journals` from a fresh DuckDB store and from the ClickHouse store `ch`, whose database is
    dropped afterwards (hypothesis's examples share the fixtures)."""
    duck = Store(tmp_path / f"{uuid.uuid4().hex}.duckdb")
    try:
        # one batch per journal on DuckDB (each replaces earlier rows) and one bulk batch on ClickHouse
        for j in journals:
            ev.ingest_journals(duck, [j])
        ev.ingest_journals(ch, journals)
        return evidence(duck), evidence(ch)
    finally:
        ch.execute(f"DROP DATABASE IF EXISTS {ch.database}")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(journals=journal_sets())
def test_duckdb_and_chdb_agree(journals: list[dict[str, Any]], chdb_dir: Path, tmp_path: Path) -> None:
    ch = chdb_store(chdb_dir)
    duck, click = _both(journals, tmp_path, ch)
    assert duck == click
    # scorecards grade the system: dry runs, refusals and runs an operator interrupted are left out
    assert duck["scorecards"] or all(
        j["dry_run"] or j["status"] in ("refused", "interrupted") for j in journals
    )


@pytest.mark.clickhouse
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(journals=journal_sets())
def test_duckdb_and_the_clickhouse_server_agree(
    journals: list[dict[str, Any]], clickhouse_server: Any, tmp_path: Path
) -> None:
    from faultplane.core.store_clickhouse import ClickHouseStore

    ch = ClickHouseStore(clickhouse_server.url(f"fp_{uuid.uuid4().hex[:12]}"))
    duck, click = _both(journals, tmp_path, ch)
    assert duck == click
