"""The declared blast radius caps what driver actions touch: refused before anything runs when an action asks
for more, and applied to actions that name no size. Real processes are the targets."""

from __future__ import annotations

import contextlib
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from guard_helpers import Approver, DegradableService, base_experiment, runnable_experiment

from faultplane.core.policy import Policy, approval_hash, evaluate
from faultplane.core.store import Store
from faultplane.drivers.blast import radius_cap, select_targets
from faultplane.engine.lifecycle import _targets_of, evaluate_document, execute
from faultplane.services.guard import prepare
from proc_helpers import sleepers

pytestmark = pytest.mark.anyio


def _kill(**arguments: Any) -> dict[str, Any]:
    return {
        "type": "action",
        "name": "kill-workers",
        "provider": {"type": "driver", "driver": "process", "name": "kill", "arguments": arguments},
    }


# ---- the cap itself ----------------------------------------------------------------------------------------


def test_select_targets_is_held_to_the_cap() -> None:
    items = list(range(20))
    assert len(select_targets(items)) == 20  # outside a run, no cap: every match
    with radius_cap({"percent": 10}):
        assert len(select_targets(items, rng=random.Random(1))) == 2  # no size given: the declared radius
        assert len(select_targets(items, count=15, rng=random.Random(1))) == 2  # a count beyond it is cut
        assert len(select_targets(items, percentage=5, rng=random.Random(1))) == 1  # smaller stays smaller
    with radius_cap({"count": 3}):
        assert len(select_targets(items, percentage=100, rng=random.Random(1))) == 3
    with radius_cap({"percent": 50, "count": 4}):
        assert len(select_targets(items, rng=random.Random(1))) == 4  # both: the smaller wins
    assert len(select_targets(items)) == 20  # the cap ends with its context


def test_the_engine_knows_which_actions_select_targets() -> None:
    assert _targets_of("process", "kill") and _targets_of("postgres", "terminate_backends")
    assert not _targets_of("process", "stress_cpu") and not _targets_of("process", "count")
    assert not _targets_of("nosuch", "thing")


# ---- refused before anything runs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("radius", "arguments", "field"),
    [
        ({"percent": 10}, {"cmdline_pattern": "x", "percentage": 50}, "percentage"),
        ({"percent": 10}, {"cmdline_pattern": "x", "percentage": 10.5}, "percentage"),
        ({"count": 1}, {"cmdline_pattern": "x", "count": 2}, "count"),
    ],
)
def test_an_action_wider_than_the_radius_is_refused(
    radius: dict[str, Any], arguments: dict[str, Any], field: str
) -> None:
    policy = Policy.model_validate(
        {"blast_radius": {"stages": [{"percent": 10, "count": 1}, {"percent": 25, "count": 3}]}}
    )
    doc = base_experiment(targets=None, blast_radius=radius, method=[_kill(**arguments)])
    decision = evaluate_document(doc, policy, None, None)
    (v,) = [v for v in decision.violations if v.rule == "blast_radius.action"]
    assert v.field == f"method[0].provider.arguments.{field}"
    assert "'kill-workers'" in v.message and "process.kill" in v.message and "stage 0" in v.message
    assert field in v.fix


@pytest.mark.parametrize(
    ("radius", "arguments"),
    [
        ({"percent": 10}, {"cmdline_pattern": "x", "percentage": 10}),
        ({"percent": 10}, {"cmdline_pattern": "x"}),  # no size: the radius applies at run time
        ({"percent": 10}, {"cmdline_pattern": "x", "count": 5}),  # other unit: cut to the radius at run time
        (None, {"cmdline_pattern": "x", "percentage": 10}),  # undeclared: stage 0's 10%
    ],
)
def test_an_action_within_the_radius_is_allowed(
    radius: dict[str, Any] | None, arguments: dict[str, Any], approver: Approver
) -> None:
    doc = base_experiment(targets=None, blast_radius=radius, method=[_kill(**arguments)])
    # a process kill always needs a person (approval.fault_types); with one, the radius is all that is left
    unapproved = evaluate_document(doc, approver.policy(), None, None)
    assert [v.rule for v in unapproved.violations] == ["approval.required"]
    assert any("process_kill" in r for r in unapproved.approval_required)
    token = approver.sign(approval_hash(doc), record=False).token
    decision = evaluate_document(doc, approver.policy(), None, token)
    assert decision.allowed, decision.summary()
    assert decision.radius == (radius or {"percent": 10})


def test_undeclared_radius_is_the_first_stage(approver: Approver) -> None:
    doc = base_experiment(targets=None, blast_radius=None, method=[_kill(cmdline_pattern="x", percentage=25)])
    token = approver.sign(approval_hash(doc), record=False).token
    decision = evaluate_document(doc, approver.policy(), None, token)
    assert decision.stage == 0 and decision.radius == {"percent": 10}
    assert [v.rule for v in decision.violations] == ["blast_radius.action"]


def test_without_the_driver_catalog_size_fields_still_count() -> None:
    """A caller with no catalog (core alone) judges any driver action's count/percentage."""
    doc = base_experiment(targets=None, method=[_kill(cmdline_pattern="x", percentage=60)])
    assert "blast_radius.action" in [v.rule for v in evaluate(doc, policy=Policy(), store=None).violations]


# ---- the engine applies it to real processes ---------------------------------------------------------------


@pytest.fixture
def workers() -> Iterator[tuple[str, list[subprocess.Popen[bytes]]]]:
    with sleepers("fp-blast-", 10, seconds=120) as found:
        yield found


def _alive(procs: list[subprocess.Popen[bytes]]) -> int:
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=0.05)
    return sum(p.returncode is None for p in procs)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, approver: Approver) -> Path:
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    monkeypatch.chdir(project)
    monkeypatch.delenv("FAULTPLANE_POLICY", raising=False)
    # stage 0 is 20% here, so 10 workers show the difference between 10%, 20% and "every match"
    approver.write_policy(project, "blast_radius: {stages: [{percent: 20}, {percent: 50}]}\n")
    return project


@pytest.mark.parametrize(
    ("radius", "arguments", "killed"),
    [
        ({"percent": 10}, {}, 1),  # no size in the action: the declared 10% of 10
        ({"percent": 20}, {}, 2),
        (None, {}, 2),  # nothing declared: the first stage's 20%
        ({"percent": 20}, {"count": 7}, 2),  # a count the policy could not compare: cut to 20%
        ({"percent": 20}, {"percentage": 10}, 1),  # a smaller action stays smaller
    ],
)
async def test_engine_kills_no_more_than_the_radius(
    project: Path,
    service: DegradableService,
    workers: tuple[str, list[subprocess.Popen[bytes]]],
    radius: dict[str, Any] | None,
    arguments: dict[str, Any],
    killed: int,
    approver: Approver,
) -> None:
    marker, procs = workers
    doc = runnable_experiment(
        service.url, blast_radius=radius, method=[_kill(cmdline_pattern=marker, **arguments)]
    )
    token = approver.sign(prepare(doc).approval_hash, record=False).token  # a person approved this kill
    journal = await execute(doc, store=Store(project / "s.duckdb"), approval_token=token)
    assert journal.status == "completed", journal.error
    assert len(journal.run[0].output["processes"]) == killed
    assert _alive(procs) == 10 - killed


async def test_engine_refuses_a_wider_action_and_touches_nothing(
    project: Path,
    service: DegradableService,
    workers: tuple[str, list[subprocess.Popen[bytes]]],
    approver: Approver,
) -> None:
    marker, procs = workers
    doc = runnable_experiment(
        service.url, blast_radius={"percent": 10}, method=[_kill(cmdline_pattern=marker, percentage=100)]
    )
    token = approver.sign(prepare(doc).approval_hash, record=False).token  # approved, and still too wide
    journal = await execute(doc, store=Store(project / "s.duckdb"), approval_token=token)
    assert journal.status == "refused" and journal.run == []
    assert "blast_radius.action" in (journal.error or "") and "kill-workers" in (journal.error or "")
    assert _alive(procs) == 10
