"""The shipped GameDay templates: listed, copied by `gameday new`, valid, and run against the demo services."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from faultplane.core.formats import ExperimentError
from faultplane.core.store import Store
from faultplane.services.compliance import split_known
from faultplane.services.gameday import run_gameday
from faultplane.services.gameday_templates import list_templates, new_from_template

NAMES = ["e-commerce", "financial-services", "healthcare"]
DEMO_VARS = {"service_url": "http://127.0.0.1:9"}  # dry runs and validation touch nothing
PAYMENT_VARS = {
    "caller_url": "http://127.0.0.1:9",
    "payment_0_url": "http://127.0.0.1:9",
    "payment_1_url": "http://127.0.0.1:9",
}


def test_three_templates_each_evidencing_known_requirements() -> None:
    templates = {t.name: t for t in list_templates()}
    assert sorted(templates) == NAMES
    assert {"DORA-24", "DORA-25"} <= set(templates["financial-services"].requirements)
    for t in templates.values():
        assert t.requirements and t.description
        _, unknown = split_known(t.requirements)
        assert not unknown, f"{t.name}: {unknown} are not in the compliance catalog"


@pytest.mark.anyio
@pytest.mark.parametrize("name", NAMES)
async def test_every_template_validates_whole_before_running(name: str, tmp_path: Path, store: Store) -> None:
    written = new_from_template(name, tmp_path / name)
    assert (tmp_path / name / "gameday.yaml") in written
    variables = PAYMENT_VARS if name == "e-commerce" else DEMO_VARS
    a = await run_gameday(tmp_path / name / "gameday.yaml", variables=variables, store=store, dry_run=True)
    assert a.planned >= 2 and {r.status for r in a.runs} <= {"completed", "skipped"}


@pytest.mark.anyio
async def test_a_broken_copy_is_refused_before_anything_runs(tmp_path: Path, store: Store) -> None:
    new_from_template("healthcare", tmp_path)
    (tmp_path / "replica-reads.yaml").unlink()
    with pytest.raises(ExperimentError) as info:
        await run_gameday(tmp_path / "gameday.yaml", variables=DEMO_VARS, store=store, dry_run=True)
    assert info.value.issues[0].field.startswith("lanes[0].experiments[1]")


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.parametrize("name", ["financial-services", "healthcare"])
async def test_the_template_runs_against_the_demo_service(
    name: str, demo_url: str, tmp_path: Path, store: Store
) -> None:
    new_from_template(name, tmp_path)
    a = await run_gameday(tmp_path / "gameday.yaml", variables={"service_url": demo_url}, store=store)
    assert a.planned == a.passed >= 2  # every step held, each rolled back and recovered
    assert all(r.status == "completed" for r in a.runs)
    assert a.score is not None and a.compliance is not None and a.components["compliance"]


@pytest.mark.anyio
@pytest.mark.slow
async def test_the_e_commerce_template_catches_the_retry_storm(tmp_path: Path, store: Store) -> None:
    from faultplane.examples.payment import SYSTEM
    from faultplane.examples.payment.system import payment_system

    new_from_template("e-commerce", tmp_path)
    with payment_system(**SYSTEM) as system:
        a = await run_gameday(tmp_path / "gameday.yaml", variables=system.variables(), store=store)
    by_lane = {r.lane: r.status for r in a.runs}
    assert by_lane["provider-partial-outage"] == "completed"  # the retries absorb one degraded instance
    assert by_lane["retry-storm"] == "aborted"  # the storm trips the error-rate gate and is rolled back


def _gameday(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "faultplane", "gameday", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


def test_gameday_new_copies_a_template_and_never_overwrites_without_force(tmp_path: Path) -> None:
    listed = _gameday("templates", "--format", "json", cwd=tmp_path)
    assert listed.returncode == 0 and all(n in listed.stdout for n in NAMES)
    made = _gameday("new", "--template", "healthcare", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "gameday-healthcare" / "gameday.yaml").is_file()
    (tmp_path / "gameday-healthcare" / "gameday.yaml").write_text("mine\n")
    again = _gameday("new", "-t", "healthcare", cwd=tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr
    assert (tmp_path / "gameday-healthcare" / "gameday.yaml").read_text() == "mine\n"
    forced = _gameday("new", "-t", "healthcare", "--force", cwd=tmp_path)
    assert (
        forced.returncode == 0
        and "mine" not in (tmp_path / "gameday-healthcare" / "gameday.yaml").read_text()
    )
    unknown = _gameday("new", "-t", "banking", cwd=tmp_path)
    assert (
        unknown.returncode == 2
        and all(n in unknown.stderr for n in NAMES)
        and "Traceback" not in unknown.stderr
    )
