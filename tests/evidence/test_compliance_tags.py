"""Compliance tags belong to the catalog: unknown ones are refused at validate with the known ids, and every
requirement names where its official text is published."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from evidence_helpers import steady_probe

from clihelp import cli
from faultplane.services import compliance as co


def _experiment(path: Path, tags: list[str]) -> Path:
    probe = steady_probe()
    doc = {
        "title": "t",
        "tags": tags,
        "steady-state-hypothesis": {"title": "h", "probes": [probe]},
        "method": [probe],
    }
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("tags", "bad"),
    [
        (["DORA-99"], "DORA-99"),
        (["compliance:dora-2"], "DORA-2"),
        (["team:core", "SOC2-A9.9", "DORA-25"], "SOC2-A9.9"),
        (["compliance:Ünïcode"], "ÜNÏCODE"),
    ],
)
def test_unknown_compliance_tags_refused_at_validate(
    tmp_path: Path, tags: list[str], bad: str, lab_policy: Path
) -> None:
    proc = cli("validate", str(_experiment(tmp_path / "e.yaml", tags)), "--format", "json")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    issue = next(e for e in report["errors"] if e["field"] == "tags")
    assert bad in issue["message"]
    assert "DORA-25" in issue["fix"] and "SOC2-A1.2" in issue["fix"]  # the known ids


@pytest.mark.parametrize("tags", [["DORA-25", "compliance:soc2-a1.2"], ["team:core", "dr", "latency"], []])
def test_known_and_ordinary_tags_pass(tmp_path: Path, tags: list[str], lab_policy: Path) -> None:
    proc = cli("validate", str(_experiment(tmp_path / "e.yaml", tags)), "--format", "json")
    assert json.loads(proc.stdout)["valid"] is True, proc.stdout


def test_every_requirement_has_its_official_source_url() -> None:
    cat = co.load_catalog()
    for fw in cat.frameworks:
        for req in fw.requirements:
            assert req.url.startswith("https://"), req.id
            host = req.url.split("/")[2]
            assert host in {
                "eur-lex.europa.eu",
                "www.pcisecuritystandards.org",
                "www.iso.org",
                "www.aicpa-cima.com",
                "www.bis.org",
            }, req.url


def test_a_catalog_without_urls_is_refused(tmp_path: Path) -> None:
    doc = yaml.safe_load(co.DATA_FILE.read_text(encoding="utf-8"))
    del doc["frameworks"][0]["requirements"][0]["url"]
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with pytest.raises(co.ComplianceError, match="url"):
        co.load_catalog(path)


def test_the_report_carries_the_url(store: object) -> None:
    rep = co.coverage_report(store)
    assert all(r.url.startswith("https://") for r in rep.requirements)
