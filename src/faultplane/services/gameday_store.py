"""Where a GameDay is kept: its two tables, writing a finished GameDay, finding one again by id, prefix or name.

Decides the `gamedays` and `gameday_runs` tables (one row per GameDay, one per planned run, skipped runs
included), how a reference resolves (an exact id, then a unique id prefix, then a name's newest GameDay; an
ambiguous prefix is an error listing the candidates) and the listing, newest first.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from faultplane.core.store import Store, open_store
from faultplane.services.gameday_model import GameDay, GameDayRun

__all__ = ["GAMEDAY_MIGRATIONS", "list_gamedays", "persist_gameday", "resolve_gameday_id"]

GAMEDAY_MIGRATIONS = [
    (
        "gameday-001",
        [
            """CREATE TABLE IF NOT EXISTS gamedays (
                gameday_id VARCHAR PRIMARY KEY,
                name VARCHAR,
                source VARCHAR,
                started_at TIMESTAMPTZ,
                ended_at TIMESTAMPTZ,
                dry_run BOOLEAN,
                spec VARCHAR,
                baseline VARCHAR,
                load_summary VARCHAR,
                score DOUBLE,
                grade VARCHAR
            )""",
            """CREATE TABLE IF NOT EXISTS gameday_runs (
                gameday_id VARCHAR,
                lane VARCHAR,
                lane_mode VARCHAR,
                position INTEGER,
                experiment VARCHAR,
                run_id VARCHAR,
                status VARCHAR,
                success BOOLEAN,
                started_offset_s DOUBLE,
                ended_offset_s DOUBLE,
                load_error_rate DOUBLE,
                load_p99_ms DOUBLE,
                compliance VARCHAR[],
                error VARCHAR
            )""",
        ],
    )
]


def persist_gameday(
    store: Store,
    gameday_id: str,
    gd: GameDay,
    source: Any,
    started: datetime,
    dry_run: bool,
    baseline: dict[str, float | None] | None,
    load_summary: dict[str, Any] | None,
    runs: list[GameDayRun],
) -> None:
    store.insert(
        "gamedays",
        [
            {
                "gameday_id": gameday_id,
                "name": gd.name,
                "source": str(source)
                if isinstance(source, str | Path) and "\n" not in str(source)
                else "(inline)",
                "started_at": started,
                "ended_at": datetime.now(UTC),
                "dry_run": dry_run,
                "spec": gd.model_dump_json(),
                "baseline": json.dumps(baseline) if baseline is not None else None,
                "load_summary": json.dumps(load_summary) if load_summary is not None else None,
            }
        ],
    )
    store.insert(
        "gameday_runs",
        [
            {
                "gameday_id": gameday_id,
                **r.model_dump(
                    include={
                        "lane",
                        "lane_mode",
                        "position",
                        "experiment",
                        "run_id",
                        "status",
                        "success",
                        "started_offset_s",
                        "ended_offset_s",
                        "load_error_rate",
                        "load_p99_ms",
                        "compliance",
                        "error",
                    }
                ),
            }
            for r in runs
        ],
    )


def resolve_gameday_id(store: Store, ref: str | None) -> str:
    if ref:
        rows = store.query(
            "SELECT gameday_id FROM gamedays WHERE gameday_id = ? OR gameday_id LIKE ? || '%' OR name = ? "
            "ORDER BY started_at DESC",
            [ref, ref, ref],
        )
        ids = list(dict.fromkeys(r["gameday_id"] for r in rows))
        exact = [i for i in ids if i == ref]
        if exact:
            return exact[0]
        by_prefix = [i for i in ids if i.startswith(ref)]
        if len(by_prefix) == 1:
            return by_prefix[0]
        if ids and not by_prefix:
            return ids[0]  # a name: its newest GameDay
        if len(by_prefix) > 1:
            raise LookupError(f"gameday {ref!r} is ambiguous: {', '.join(by_prefix[:5])}")
        raise LookupError(f"no GameDay {ref!r}: list them with `faultplane gameday list`")
    rows = store.query("SELECT gameday_id FROM gamedays ORDER BY started_at DESC LIMIT 1")
    if not rows:
        raise LookupError("no GameDay has run yet: run one with `faultplane gameday run <file>`")
    return str(rows[0]["gameday_id"])


def list_gamedays(store: Store | None = None, limit: int = 20) -> list[dict[str, Any]]:
    store = store or open_store()
    store.ensure_schema("gameday", GAMEDAY_MIGRATIONS)
    return store.query(
        "SELECT gameday_id, name, started_at, ended_at, dry_run, score, grade FROM gamedays "
        "ORDER BY started_at DESC LIMIT ?",
        [limit],
    )
