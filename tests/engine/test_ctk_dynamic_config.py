"""Dynamic configuration (`configuration` entries of `type: probe`): what the corpus cannot show side by
side with `chaos run` — validation of the probes, failures, dry runs, the journal and the policy."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from faultplane.core.formats import ExperimentError
from faultplane.core.store import Store
from faultplane.services.experiments import run_experiment, validate_experiment
from faultplane.services.runs import load_journal

COMPAT = Path(__file__).parent / "ctk" / "compat"
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("lab_policy")]
if str(COMPAT) not in sys.path:
    sys.path.insert(0, str(COMPAT))


def _doc(marks: Path, probe_provider: dict[str, Any], uses: str = "${target}") -> dict[str, Any]:
    return {
        "title": "dynamic configuration",
        "description": "a value probed when the run starts",
        "configuration": {
            "marks": str(marks),
            "target": {"type": "probe", "name": "find-target", "provider": probe_provider},
        },
        "method": [
            {
                "type": "action",
                "name": "mark",
                "provider": {
                    "type": "python",
                    "module": "ctkfix",
                    "func": "record",
                    "arguments": {"path": "${marks}", "line": uses},
                },
            }
        ],
    }


def _recording_probe(marks: Path, value: str) -> dict[str, Any]:
    # the probe itself leaves a line, so a test sees whether and how often it ran
    return {
        "type": "python",
        "module": "ctkfix",
        "func": "record",
        "arguments": {"path": str(marks) + ".probe", "line": value},
    }


async def test_value_reaches_the_run_and_the_journal(tmp_path: Path, store: Store) -> None:
    marks = tmp_path / "marks"
    result = await run_experiment(_doc(marks, _recording_probe(marks, "svc-a")), store=store)
    assert result.status == "completed", result.error
    assert marks.read_text().splitlines() == ["svc-a"]
    assert Path(str(marks) + ".probe").read_text().splitlines() == ["svc-a"]  # ran once
    journal = load_journal(result.run_id, store)
    assert journal["experiment"]["configuration"]["target"] == "svc-a"  # the journal reproduces the run


async def test_validate_and_dry_run_do_not_run_the_probe(tmp_path: Path, store: Store) -> None:
    marks = tmp_path / "marks"
    doc = _doc(marks, _recording_probe(marks, "svc-a"))
    report = validate_experiment(doc)
    assert report.valid, report.errors
    result = await run_experiment(doc, store=store, dry_run=True)
    assert result.status == "completed", result.error
    assert not Path(str(marks) + ".probe").exists()


def test_validate_checks_the_probe_like_any_activity(tmp_path: Path) -> None:
    missing = validate_experiment(
        _doc(tmp_path / "m", {"type": "python", "module": "ctkfix", "func": "no_such_function"})
    )
    assert not missing.valid
    assert [e.field for e in missing.errors] == ["configuration.target.provider.func"]
    bad_arg = validate_experiment(
        _doc(tmp_path / "m", {"type": "python", "module": "ctkfix", "func": "value", "arguments": {"x": 1}})
    )
    assert not bad_arg.valid
    assert [e.field for e in bad_arg.errors] == [
        "configuration.target.provider.arguments.x",  # takes no x
        "configuration.target.provider.arguments",  # requires v
    ]
    no_exe = validate_experiment(_doc(tmp_path / "m", {"type": "process", "path": "no-such-binary-xyz"}))
    assert not no_exe.valid and no_exe.errors[0].field.startswith("configuration.target")
    driver = validate_experiment(
        _doc(tmp_path / "m", {"type": "driver", "driver": "testdriver", "name": "mark", "arguments": {}})
    )
    assert not driver.valid
    assert [e.field for e in driver.errors] == ["configuration.target.provider"]
    assert "python, process or http" in driver.errors[0].message


async def test_a_failed_probe_whose_value_is_used_stops_the_run_naming_the_probe(
    tmp_path: Path, store: Store
) -> None:
    marks = tmp_path / "marks"
    failing = {"type": "python", "module": "ctkfix", "func": "fail", "arguments": {"message": "no dns"}}
    with pytest.raises(ExperimentError) as caught:
        await run_experiment(_doc(marks, failing), store=store)
    assert [i.field for i in caught.value.issues] == ["configuration.target"]
    assert "find-target" in caught.value.issues[0].message and "no dns" in caught.value.issues[0].message
    assert not marks.exists()  # nothing ran
    # with Chaos Toolkit's behaviour the key stays unset, the reference stays as written, and the run goes on
    result = await run_experiment(_doc(marks, failing), store=store, ctk_compat=True)
    assert result.status == "completed", result.error
    assert marks.read_text().splitlines() == ["${target}"]
    warnings = load_journal(result.run_id, store)["warnings"]
    assert any("configuration.target" in w and "no dns" in w for w in warnings)


async def test_a_failed_probe_whose_value_is_unused_is_a_warning(tmp_path: Path, store: Store) -> None:
    marks = tmp_path / "marks"
    exits = {"type": "process", "path": "sh", "arguments": "-c 'echo nope >&2; exit 3'"}
    result = await run_experiment(_doc(marks, exits, uses="plain"), store=store)
    assert result.status == "completed", result.error
    warnings = load_journal(result.run_id, store)["warnings"]
    assert any("configuration.target" in w and "status 3" in w and "nope" in w for w in warnings)


async def test_the_policy_judges_the_probed_value(tmp_path: Path, store: Store) -> None:
    """A production host that only the probe gives is still refused: the policy reads the plan again once
    the probes have given their values (the document itself names no production host)."""
    marks = tmp_path / "marks"
    joins = {
        "type": "python",
        "module": "ctkfix",
        "func": "add",
        "arguments": {"a": "db.pr", "b": "od.internal"},
    }
    doc = _doc(marks, joins)
    assert validate_experiment(doc).valid
    result = await run_experiment(doc, store=store)
    assert result.status == "refused", result.error
    assert "prod" in (result.error or "")
    assert not marks.exists()
