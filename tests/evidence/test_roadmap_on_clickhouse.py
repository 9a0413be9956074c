"""The compliance periodic report and the signed exercise report read a ClickHouse store as they read DuckDB
(the real server the suite starts), from the same real journals."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from faultplane.core.approval import generate_key
from faultplane.core.model import Journal
from faultplane.core.store import Store
from faultplane.services.coverage_diff import periodic_report
from faultplane.services.exercise_report import build_report, verify_report
from faultplane.services.experiments import run_experiment
from faultplane.services.runs import load_journal

pytestmark = pytest.mark.usefixtures("lab_policy")

PASSPHRASE = "correct horse battery staple"


def _doc(tag: str) -> dict[str, Any]:
    probe = {"type": "python", "module": "os", "func": "getcwd"}
    return {"title": f"evidence {tag}", "description": "d", "tags": [tag],
            "method": [{"type": "probe", "name": "p", "provider": probe}]}  # fmt: skip


@pytest.fixture
def journals(tmp_path: Path) -> list[dict[str, Any]]:
    store = Store(tmp_path / "runs.duckdb")
    out = []
    for tag in ("DORA-11", "DORA-24"):

        async def go(tag: str = tag) -> Any:
            return await run_experiment(_doc(tag), store=store, journal_dir=tmp_path / "j")

        out.append(load_journal(anyio.run(go).run_id, store))
    return out


def test_periodic_coverage_and_a_signed_report_from_clickhouse(
    ch_store: Any, journals: list[dict[str, Any]], tmp_path: Path
) -> None:
    for j in journals:
        ch_store.persist_journal(Journal.model_validate(j), body=json.dumps(j))
    change = periodic_report(tmp_path / "coverage", period_days=30, store=ch_store, frameworks=["DORA"])
    assert change.closed_gaps == ["DORA-11", "DORA-24"] and change.new_gaps == [] and not change.fell
    assert change.still_open == ["DORA-25"]
    later = periodic_report(
        tmp_path / "coverage", period_days=30, store=ch_store, frameworks=["DORA"],
        now=datetime.now(UTC) + timedelta(days=400),
    )  # fmt: skip
    assert later.baseline == "previous report" and later.fell and later.new_gaps == ["DORA-11", "DORA-24"]

    key = tmp_path / "keys" / "alice.key"
    key.parent.mkdir()
    line = generate_key(key, "alice", PASSPHRASE, scrypt_n=2**14)
    since = datetime.now(UTC) - timedelta(hours=1)
    manifest = build_report(ch_store, tmp_path / "report", since=since, key_path=key, passphrase=PASSPHRASE)
    assert sorted(j["run_id"] for j in manifest["journals"]) == sorted(j["run_id"] for j in journals)
    v = verify_report(tmp_path / "report", [line])
    assert v.ok and v.journals == 2, v.problems
