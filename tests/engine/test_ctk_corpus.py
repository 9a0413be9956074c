"""A corpus of Chaos Toolkit-format experiments, loaded as-is, each producing its expected status."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from faultplane.core.store import Store
from faultplane.services.experiments import run_experiment, validate_experiment
from faultplane.services.runs import load_journal

CORPUS = Path(__file__).with_name("ctk")
EXPECTED = yaml.safe_load((CORPUS / "expected.yaml").read_text())

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("lab_policy")]


def test_corpus_is_large_enough() -> None:
    assert len(EXPECTED) >= 15
    assert sorted(EXPECTED) == sorted(
        p.name for p in CORPUS.iterdir() if p.is_file() and p.name != "expected.yaml"
    )


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_ctk_experiment(name: str, http_service: str, store: Store, tmp_path: Path) -> None:
    status, before, after = EXPECTED[name]
    path = CORPUS / name
    # files the experiments touch live in this test's own directory, so parallel runs cannot collide
    variables = {"base_url": http_service, "flag": str(tmp_path / "flag")}
    assert validate_experiment(path, variables=variables).valid
    result = await run_experiment(path, variables=variables, store=store)
    assert (result.status, result.steady_state_before, result.steady_state_after) == (
        status,
        before,
        after,
    ), result.error
    assert result.exit_code == (0 if status == "completed" else 1)
    journal = load_journal(result.run_id, store)
    if name.startswith("10-"):
        assert journal["rollbacks"][0]["status"] == "succeeded"
        assert "cannot reach target" in result.error
    if name.startswith("11-"):
        assert "not-a-real-token" not in str(journal)  # secrets never reach the journal
    if name.startswith("13-"):
        assert [r["activity"]["name"] for r in journal["rollbacks"]] == ["cleanup"]
    if name.startswith("14-"):
        assert journal["experiment"]["configuration"]["flag"] == str(tmp_path / "flag")
        assert [r["activity"]["name"] for r in journal["rollbacks"]] == ["remove-flag"]
        assert not (tmp_path / "flag").exists()  # the rollback removed it
    if name.startswith("15-"):
        assert journal["run"][0]["status"] == "timeout"
