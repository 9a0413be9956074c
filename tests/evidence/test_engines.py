"""DuckDB and ClickHouse give the same answers on the same journals; the ClickHouse store's own surface."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from faultplane.core.store_clickhouse import ClickHouseStore, ClickHouseStoreError, open_store
from faultplane.services import evidence as ev

pytestmark = pytest.mark.clickhouse


def _strip(summary: ev.Summary) -> dict[str, Any]:
    out = summary.model_dump()
    out.pop("store")
    return out


def test_same_answers_on_the_same_journals(real_runs: Any, ch_store: ClickHouseStore) -> None:
    duck = real_runs.store
    assert ev.ingest_journals(ch_store, real_runs.journals) == len(real_runs.journals)

    assert _strip(ev.summarize(duck, last=None)) == _strip(ev.summarize(ch_store, last=None))
    assert _strip(ev.summarize(duck, last=5, experiment="svc")) == _strip(
        ev.summarize(ch_store, last=5, experiment="svc")
    )
    cards_duck, cards_ch = ev.scorecards(duck), ev.scorecards(ch_store)
    assert [c.model_dump() for c in cards_duck] == [c.model_dump() for c in cards_ch]
    assert ev.window_rows(duck, 3) == ev.window_rows(ch_store, 3)
    for method in ("mean_ksigma", "percentile", "mad"):
        assert ev.probe_baseline(duck, "latency", "svc", method=method) == ev.probe_baseline(
            ch_store, "latency", "svc", method=method
        )
    # the raw rows the engine persisted on DuckDB equal those journal_rows wrote on ClickHouse
    cols = "run_id, seq, phase, name, type, status, started_at, ended_at, duration_s, output, error"
    sql = f"SELECT {cols} FROM activities ORDER BY run_id, seq"
    assert _utc(duck.query(sql)) == _utc(ch_store.query(sql))
    cols = (
        "run_id, experiment_title, experiment_family, status, started_at, ended_at, duration_s, tags, verdict"
    )
    sql = f"SELECT {cols} FROM runs ORDER BY run_id"
    assert _utc(duck.query(sql)) == _utc(ch_store.query(sql))


def _utc(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            k: v.astimezone(dt.UTC)
            if isinstance(v, dt.datetime)
            else (bool(v) if k.startswith("steady") else v)
            for k, v in r.items()
        }
        for r in rows
    ]


def test_reingesting_a_run_replaces_it(real_runs: Any, ch_store: ClickHouseStore) -> None:
    journal = real_runs.journals[0]
    ev.ingest_journals(ch_store, [journal])
    ev.ingest_journals(ch_store, [journal])
    assert ch_store.query("SELECT count() AS n FROM runs FINAL")[0]["n"] == 1
    assert ev.summarize(ch_store).runs_total == 1


def test_persist_journal_then_sync_metrics(real_runs: Any, ch_store: ClickHouseStore) -> None:
    for j in real_runs.journals[:3]:
        ch_store.persist_journal(j, journal_path="/tmp/x.json")
    assert ev.sync_metrics(ch_store) == 3
    assert ev.sync_metrics(ch_store) == 0
    assert ev.summarize(ch_store).runs_total == 3


def test_open_store_routes_by_url(clickhouse_server: Any, tmp_path: Any) -> None:
    from faultplane.core.store import Store

    assert isinstance(open_store(tmp_path / "x.duckdb"), Store)
    store = open_store(clickhouse_server.url("fp_route"))
    try:
        assert isinstance(store, ClickHouseStore)
        assert {
            r["name"] for r in store.query("SELECT name FROM schema_migrations WHERE owner = 'core'")
        } == {"core-001", "core-002"}
    finally:
        store.execute("DROP DATABASE IF EXISTS fp_route")


def test_bad_urls_and_sql_say_what_to_fix(clickhouse_server: Any, ch_store: ClickHouseStore) -> None:
    with pytest.raises(ClickHouseStoreError, match="no host"):
        ClickHouseStore("clickhouse:///db")
    with pytest.raises(ClickHouseStoreError, match="plain identifier"):
        ClickHouseStore(f"clickhouse://127.0.0.1:{clickhouse_server.http_port}/bad-name")
    with pytest.raises(ClickHouseStoreError, match="cannot reach"):
        ClickHouseStore("clickhouse://127.0.0.1:1/db?connect_timeout=1")
    with pytest.raises(ClickHouseStoreError, match="sql:"):
        ch_store.query("SELECT nope FROM runs")
    with pytest.raises(ClickHouseStoreError, match="readonly"):
        ch_store.query("INSERT INTO audit (actor) VALUES ('x')", read_only=True)


def test_same_tables_and_columns_on_both_engines(real_runs: Any, ch_store: ClickHouseStore) -> None:
    ev.sync_metrics(real_runs.store)
    ev.sync_metrics(ch_store)
    duck = real_runs.store.query(
        "SELECT table_name AS t, column_name AS c FROM information_schema.columns ORDER BY t, ordinal_position"
    )
    ch = ch_store.query(
        "SELECT table AS t, name AS c FROM system.columns WHERE database = currentDatabase() AND name != '_version'"
    )

    def tables(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for r in rows:
            out.setdefault(r["t"], []).append(r["c"])
        return out

    duck_tables, ch_tables = tables(duck), tables(ch)
    for name in ("runs", "activities", "journals", "audit", "run_metrics", "exposures", "schema_migrations"):
        if name == "schema_migrations":
            assert set(duck_tables[name]) == set(ch_tables[name])
        else:
            assert duck_tables[name] == ch_tables[name], name
    applied = "SELECT owner, name FROM schema_migrations ORDER BY owner, name"
    assert (
        real_runs.store.query(applied)
        == ch_store.query(applied)
        == [
            {"owner": "core", "name": "core-001"},
            {"owner": "core", "name": "core-002"},
            {"owner": "evidence", "name": "evidence-001"},
        ]
    )


def test_migrations_are_versioned_and_applied_once(ch_store: ClickHouseStore, tmp_path: Any) -> None:
    from faultplane.core.migrations import MigrationError, to_clickhouse
    from faultplane.core.store import Store

    steps = [
        (
            "demo-001",
            ["CREATE TABLE IF NOT EXISTS demo (id VARCHAR PRIMARY KEY, seen_at TIMESTAMPTZ, n INTEGER)"],
        ),
        ("demo-002", ["ALTER TABLE demo ADD COLUMN IF NOT EXISTS score DOUBLE"]),
    ]
    duck = Store(tmp_path / "m.duckdb")
    for store in (duck, ch_store):
        store.ensure_schema("demo", steps[:1])
        store.insert("demo", [{"id": "a", "seen_at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "n": 1}])
        type(store)._migrated.clear()  # a new process: the applied names come from schema_migrations
        store.ensure_schema("demo", steps)
        store.ensure_schema("demo", steps)
        store.insert(
            "demo", [{"id": "b", "seen_at": dt.datetime(2026, 1, 2, tzinfo=dt.UTC), "n": 2, "score": 0.5}]
        )
        rows = store.query("SELECT id, seen_at, n, score FROM demo ORDER BY id")
        assert [(r["id"], r["seen_at"].astimezone(dt.UTC), r["n"], r["score"]) for r in rows] == [
            ("a", dt.datetime(2026, 1, 1, tzinfo=dt.UTC), 1, None),
            ("b", dt.datetime(2026, 1, 2, tzinfo=dt.UTC), 2, 0.5),
        ]
        names = store.query("SELECT name FROM schema_migrations WHERE owner = 'demo' ORDER BY name")
        assert [r["name"] for r in names] == ["demo-001", "demo-002"]
    with pytest.raises(MigrationError, match="ADD COLUMN"):
        to_clickhouse("UPDATE runs SET status = 'x'")
    with pytest.raises(MigrationError, match="column blob: type BLOB"):
        to_clickhouse("CREATE TABLE IF NOT EXISTS t (blob BLOB)")


def test_journal_bodies_zstd_where_the_server_has_codecs(
    ch_store: ClickHouseStore, chdb: ClickHouseStore
) -> None:
    """ClickHouse 19+ (chDB 26.x here) stores journal bodies with ZSTD, recorded once as a migration; Debian's
    18.16 has no column codecs and leaves it unrecorded, for the first command after an upgrade to apply."""
    for store in (ch_store, chdb):
        major = int(store.server_version.split(".")[0])
        codec = (
            store.query(
                "SELECT compression_codec AS c FROM system.columns WHERE database = ? AND table = 'journals' "
                "AND name = 'body'",
                [store.database],
            )
            if major >= 19
            else []
        )
        names = [r["name"] for r in store.query("SELECT name FROM schema_migrations WHERE owner = 'core'")]
        if major >= 19:
            assert codec[0]["c"] == "CODEC(ZSTD(3))"
            assert names.count("ch-core-001-zstd-journal-bodies") == 1
            type(store)._migrated.clear()  # a new process: applied once, not again
            store.ensure_schema("core", [])
            names = [
                r["name"] for r in store.query("SELECT name FROM schema_migrations WHERE owner = 'core'")
            ]
            assert names.count("ch-core-001-zstd-journal-bodies") == 1
        else:
            assert "ch-core-001-zstd-journal-bodies" not in names
        store.insert(
            "journals", [{"run_id": "r1", "written_at": dt.datetime.now(dt.UTC), "body": '{"a": 1}'}]
        )
        assert store.query("SELECT body FROM journals WHERE run_id = 'r1'")[0]["body"] == '{"a": 1}'


@pytest.mark.parametrize("engine", ["duckdb", "clickhouse"])
def test_exposure_earns_the_same_stage_on_both_engines(
    engine: str, ch_store: ClickHouseStore, tmp_path: Any
) -> None:
    """A journal's injection becomes an exposure row on either store; the stage check reads it alike."""
    from faultplane.core.model import Journal
    from faultplane.core.policy import Policy
    from faultplane.core.store import Store
    from faultplane.engine.lifecycle import evaluate_document

    store: Any = ch_store if engine == "clickhouse" else Store(tmp_path / "s.duckdb")
    target = "loopback:6379"
    doc = {
        "title": "pause writes",
        "blast_radius": {"percent": 25},
        "method": [
            {
                "type": "action",
                "name": "pause",
                "provider": {
                    "type": "driver",
                    "driver": "redis",
                    "name": "client_pause",
                    "arguments": {"url": "redis://localhost:6379/0", "timeout_ms": 50},
                },
            }
        ],
    }
    policy = Policy.model_validate({"gates": {"required": False}, "approval": {"min_stage": None}})
    assert not evaluate_document(doc, policy, store, None).allowed
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def journal(run_id: str, status: str, injections: list[dict[str, Any]]) -> Journal:
        return Journal(
            run_id=run_id,
            faultplane_version="t",
            experiment={"title": "other title"},
            status=status,  # type: ignore[arg-type]
            start=start,
            end=start + dt.timedelta(seconds=1),
            seed=1,
            family="other-family",
            steady_states={"before": {"steady_state_met": True}, "after": {"steady_state_met": True}},
            injections=injections,
        )

    inj = {"target": target, "fault_kind": "timeout", "action": "redis.client_pause", "leases": 1}
    red = journal("r1", "failed", [inj])  # a failed run injected it but is not green
    empty = journal("r2", "completed", [])  # a green run that injected nothing
    green = journal("r3", "completed", [inj])
    for j in (red, empty):
        _persist(store, j)
    assert not evaluate_document(doc, policy, store, None).allowed
    _persist(store, green)
    assert evaluate_document(doc, policy, store, None).allowed


def _persist(store: Any, j: Any) -> None:
    if hasattr(store, "persist_journal"):
        store.persist_journal(j, blast_stage=0)
    else:
        store.write_journal(j, j.model_dump_json(), "/tmp/x.json", blast_stage=0)


def test_decimals_come_back_as_written(ch_store: ClickHouseStore, chdb: ClickHouseStore) -> None:
    """Durations and rates read back exactly as written. ClickHouse 18.16's text parser reads some six-decimal values
    one unit in the last place off (1.408632 -> 1.4086319999999999); the store rounds what an old server returns to
    15 significant digits."""
    import random

    rng = random.Random(16)
    values = [round(rng.uniform(0, 3), 6) for _ in range(2000)] + [
        round(rng.uniform(0, 1e-4), 9) for _ in range(500)
    ]
    values += [0.0, 1.0, 0.1, 123456.789012]
    for store in (ch_store, chdb):
        store.insert(
            "activities", [{"run_id": f"r{i:05d}", "seq": 0, "duration_s": v} for i, v in enumerate(values)]
        )
        back = store.query("SELECT run_id, duration_s FROM activities FINAL ORDER BY run_id")
        assert [r["duration_s"] for r in back] == values, store.server_version
