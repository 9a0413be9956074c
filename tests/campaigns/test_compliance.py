"""Compliance coverage from real runs in the store: evidence, gaps, testing frequency, RTO."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from faultplane.core.store import Store
from faultplane.services.compliance import (
    ComplianceError,
    coverage_report,
    load_catalog,
    render_html,
    render_markdown,
    requirement_tags,
    write_report,
)
from faultplane.services.experiments import run_experiment

FRAMEWORKS = {"DORA", "NIS2", "PCI-DSS", "ISO-22301", "ISO-27001", "SOC2", "BASEL-III"}


def test_the_catalog_covers_every_framework_with_article_references() -> None:
    cat = load_catalog()
    assert {f.id for f in cat.frameworks} == FRAMEWORKS
    ids = cat.all_ids()
    assert len(ids) == len(set(ids))
    for fw in cat.frameworks:
        assert fw.source and fw.requirements
        for r in fw.requirements:
            assert r.reference and r.title and r.evidence and r.frequency_days > 0
    assert cat.requirement("dora-25")[1].reference == "Art. 25(1)"
    assert cat.framework("pci_dss").id == "PCI-DSS" and cat.framework("basel iii").id == "BASEL-III"
    assert requirement_tags(["demo", "compliance:soc2-a1.3", "DORA-25", "DORA-25"]) == [
        "SOC2-A1.3",
        "DORA-25",
    ]


@pytest.mark.anyio
async def test_coverage_from_real_runs(
    demo_url: str, experiments_dir: Path, tmp_path: Path, store: Store
) -> None:
    doc = yaml.safe_load((experiments_dir / "demo-db-latency.yaml").read_text())
    doc["tags"] = [*doc["tags"], "DORA-11", "compliance:SOC2-A1.3"]
    doc["estimate"]["recovery_seconds"] = 2
    first = await run_experiment(doc, variables={"service_url": demo_url, "ms": 100}, store=store)
    second = await run_experiment(doc, variables={"service_url": demo_url, "ms": 200}, store=store)
    assert first.success and second.success
    # a dry run and a refused run are never evidence
    await run_experiment(doc, variables={"service_url": demo_url}, store=store, dry_run=True)

    rep = coverage_report(store, frameworks=["DORA", "SOC2"])
    by_id = {r.id: r for r in rep.requirements}
    assert by_id["DORA-11"].status == "covered" and by_id["DORA-11"].runs == 2
    assert by_id["DORA-11"].passed == 2 and by_id["DORA-11"].runs_in_period == 2
    assert by_id["DORA-11"].rto_met is True and by_id["DORA-11"].rto_target_s == 2
    assert by_id["DORA-11"].worst_recovery_s is not None and by_id["DORA-11"].worst_recovery_s < 2
    assert by_id["SOC2-A1.3"].status == "covered"
    assert by_id["DORA-24"].status == "gap" and "DORA-24" in rep.gaps
    assert {e.run_id for e in by_id["DORA-11"].evidence} == {first.run_id, second.run_id}
    dora = next(f for f in rep.frameworks if f.id == "DORA")
    assert (dora.covered, dora.gaps, dora.requirements) == (1, 2, 3)
    assert rep.coverage == pytest.approx(2 / 6, abs=1e-4)

    # a year and a day later the same evidence is overdue; a stricter RTO is missed
    later = coverage_report(store, frameworks=["DORA"], now=datetime.now(UTC) + timedelta(days=366))
    assert {r.id: r.status for r in later.requirements}["DORA-11"] == "overdue"
    strict = coverage_report(store, frameworks=["DORA"], rto_seconds=0.000001)
    assert strict.rto_failures == ["DORA-11"]
    # limited to some runs (a GameDay's)
    one = coverage_report(store, frameworks=["DORA"], run_ids=[first.run_id])
    assert {r.id: r.runs for r in one.requirements}["DORA-11"] == 1

    md = render_markdown(rep)
    assert "| DORA-11 | Art. 11(6) |" in md and "## Gaps" in md and "DORA-24" in md
    html = render_html(rep)
    assert html.startswith("<!doctype html>") and "DORA-11" in html and "<script" not in html
    for name in ("report.html", "report.md", "report.json"):
        assert write_report(rep, tmp_path / name).stat().st_size > 100


def test_bad_inputs_say_what_to_fix(store: Store, tmp_path: Path) -> None:
    with pytest.raises(ComplianceError, match=r"unknown framework 'HIPAA'.*DORA"):
        coverage_report(store, frameworks=["HIPAA"])
    with pytest.raises(ComplianceError, match="rto_seconds"):
        coverage_report(store, rto_seconds=0)
    rep = coverage_report(store)
    assert rep.coverage == 0 and len(rep.gaps) == len(load_catalog().all_ids())
    with pytest.raises(ComplianceError, match=r"\.html, \.md or \.json"):
        write_report(rep, tmp_path / "report.pdf")
    html = render_html(rep)
    assert "<td class=gap>gap</td>" in html
