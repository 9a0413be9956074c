"""The run lifecycle: statuses, hypothesis and rollback strategies, rollbacks really executed, journals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

import ctk_helpers
from faultplane.core.store import Store
from faultplane.engine.lifecycle import exit_code
from faultplane.services.experiments import run_experiment
from faultplane.services.runs import get_journal, load_journal

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("lab_policy")]


def py(name: str, func: str, kind: str = "probe", **arguments: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "name": name,
        "provider": {"type": "python", "module": "ctk_helpers", "func": func, "arguments": arguments},
    }


def flag_absent(flag: Path) -> dict[str, Any]:
    """A steady-state probe that holds while `flag` does not exist: the method creates it to break the state."""
    provider = {"type": "python", "module": "os.path", "func": "exists", "arguments": {"path": str(flag)}}
    return {"type": "probe", "name": "flag-absent", "provider": provider, "tolerance": False}


def experiment(
    marker: Path,
    *,
    before: Any = 1,
    after_value: Any = None,
    method: list[dict] | None = None,
    rollback_strategy: str = "default",
    hypothesis_strategy: str = "default",
) -> dict[str, Any]:
    probe = py("value-probe", "value", v=before)
    probe["tolerance"] = 1
    return {
        "title": "lifecycle",
        "steady-state-hypothesis": {"title": "holds", "probes": [probe]},
        "method": method
        if method is not None
        else [py("act", "record", "action", path=str(marker), line="method")],
        "rollbacks": [py("undo", "record", "action", path=str(marker), line="rollback")],
        "runtime": {
            "rollbacks": {"strategy": rollback_strategy},
            "hypothesis": {"strategy": hypothesis_strategy},
        },
    }


async def test_completed_run_runs_method_then_rollbacks(tmp_path: Path, store: Store) -> None:
    marker = tmp_path / "m.txt"
    result = await run_experiment(experiment(marker), store=store)
    assert result.status == "completed" and result.exit_code == 0 and result.success
    assert result.steady_state_before is True and result.steady_state_after is True
    assert ctk_helpers.lines(str(marker)) == ["method", "rollback"]
    journal = load_journal(result.run_id, store)
    assert [p["phase"] for p in journal["phases"]] == ["baseline", "inject", "recover", "analyse"]
    row = store.query("SELECT status, steady_state_after FROM runs WHERE run_id = ?", [result.run_id])[0]
    assert row == {"status": "completed", "steady_state_after": True}
    acts = store.query(
        "SELECT phase, name, status FROM activities WHERE run_id = ? ORDER BY seq", [result.run_id]
    )
    assert ("method", "act", "succeeded") in [(a["phase"], a["name"], a["status"]) for a in acts]


async def test_failed_steady_state_before_is_failed_and_method_not_run(tmp_path: Path, store: Store) -> None:
    marker = tmp_path / "m.txt"
    result = await run_experiment(experiment(marker, before=2), store=store)
    assert result.status == "failed" and result.exit_code == 1
    assert result.steady_state_before is False
    assert ctk_helpers.lines(str(marker)) == []  # default strategy: no method, no rollbacks


async def test_rollback_strategy_always_runs_even_when_before_failed(tmp_path: Path, store: Store) -> None:
    marker = tmp_path / "m.txt"
    result = await run_experiment(experiment(marker, before=2, rollback_strategy="always"), store=store)
    assert result.status == "failed"
    assert ctk_helpers.lines(str(marker)) == ["rollback"]


async def test_rollback_strategy_never(tmp_path: Path, store: Store) -> None:
    marker = tmp_path / "m.txt"
    result = await run_experiment(experiment(marker, rollback_strategy="never"), store=store)
    assert result.status == "completed"
    assert ctk_helpers.lines(str(marker)) == ["method"]


async def test_rollback_strategy_deviated_only_when_deviated(tmp_path: Path, store: Store) -> None:
    marker = tmp_path / "m.txt"
    ok = await run_experiment(experiment(marker, rollback_strategy="deviated"), store=store)
    assert ok.status == "completed" and ctk_helpers.lines(str(marker)) == ["method"]
    marker.unlink()
    failing = [py("act", "fail", "action", message="nope")]
    bad = await run_experiment(experiment(marker, method=failing, rollback_strategy="deviated"), store=store)
    assert bad.status == "failed" and ctk_helpers.lines(str(marker)) == ["rollback"]


async def test_rollback_strategy_deviated_runs_when_the_after_check_fails(
    tmp_path: Path, store: Store
) -> None:
    marker = tmp_path / "m.txt"
    flag = tmp_path / "flag"
    exp = experiment(
        marker,
        method=[py("break", "record", "action", path=str(flag), line="x")],
        rollback_strategy="deviated",
    )
    exp["steady-state-hypothesis"]["probes"] = [flag_absent(flag)]
    exp["runtime"]["recovery_timeout"] = 0.2
    result = await run_experiment(exp, store=store)
    assert result.status == "deviated" and result.steady_state_after is False
    assert ctk_helpers.lines(str(marker)) == ["rollback"]
    assert [r["activity"]["name"] for r in load_journal(result.run_id, store)["rollbacks"]] == ["undo"]


async def test_failed_action_fails_the_run_and_stops_the_method(tmp_path: Path, store: Store) -> None:
    marker = tmp_path / "m.txt"
    method = [
        py("bad", "fail", "action", message="disk on fire"),
        py("never", "record", "action", path=str(marker), line="after-failure"),
    ]
    result = await run_experiment(experiment(marker, method=method), store=store)
    assert result.status == "failed" and result.exit_code == 1
    assert "disk on fire" in (result.error or "")
    assert ctk_helpers.lines(str(marker)) == ["rollback"]


async def test_failed_probe_in_method_does_not_fail_the_run(tmp_path: Path, store: Store) -> None:
    marker = tmp_path / "m.txt"
    method = [py("bad-probe", "fail", "probe")]
    result = await run_experiment(experiment(marker, method=method), store=store)
    assert result.status == "completed"


async def test_activity_timeout_fails_and_rolls_back(tmp_path: Path, store: Store) -> None:
    marker = tmp_path / "m.txt"
    slow = py("slow", "slow", "action", seconds=5)
    slow["timeout"] = 0.3
    with anyio.fail_after(4):
        result = await run_experiment(experiment(marker, method=[slow]), store=store)
    assert result.status == "failed"
    journal = load_journal(result.run_id, store)
    assert journal["run"][0]["status"] == "timeout"
    assert ctk_helpers.lines(str(marker)) == ["rollback"]


async def test_deviated_after_method(tmp_path: Path, store: Store) -> None:
    marker = tmp_path / "m.txt"
    flag = tmp_path / "flag"
    exp = experiment(marker, method=[py("break", "record", "action", path=str(flag), line="x")])
    exp["steady-state-hypothesis"]["probes"] = [flag_absent(flag)]
    exp["runtime"]["recovery_timeout"] = 0.5
    result = await run_experiment(exp, store=store)
    assert result.status == "deviated" and result.exit_code == 1
    assert result.steady_state_before is True and result.steady_state_after is False
    recovery = load_journal(result.run_id, store)["steady_states"]["recovery"]
    assert recovery["steady_state_met"] is False  # nothing removed the flag
    assert "did not return within 0.5s" in (result.error or "")


async def test_recovery_is_measured_after_rollback(tmp_path: Path, store: Store) -> None:
    flag = tmp_path / "flag"
    exp = experiment(tmp_path / "m", method=[py("break", "record", "action", path=str(flag), line="x")])
    exp["steady-state-hypothesis"]["probes"] = [flag_absent(flag)]
    exp["rollbacks"] = [
        {
            "type": "action",
            "name": "fix",
            "provider": {"type": "process", "path": "rm", "arguments": ["-f", str(flag)]},
        }
    ]
    result = await run_experiment(exp, store=store)
    assert result.status == "deviated"  # the fault broke the steady state while it was applied
    recovery = load_journal(result.run_id, store)["steady_states"]["recovery"]
    assert recovery["steady_state_met"] is True and recovery["time_to_recover_s"] >= 0


@pytest.mark.parametrize(
    "strategy,expect_before,expect_after",
    [
        ("before-method-only", True, None),
        ("after-method-only", None, True),
    ],
)
async def test_hypothesis_strategies(
    tmp_path: Path, store: Store, strategy: str, expect_before: Any, expect_after: Any
) -> None:
    result = await run_experiment(experiment(tmp_path / "m", hypothesis_strategy=strategy), store=store)
    assert (result.steady_state_before, result.steady_state_after) == (expect_before, expect_after)


async def test_continuously_and_during_method_check_while_the_method_runs(
    tmp_path: Path, store: Store
) -> None:
    for strategy in ("continuously", "during-method"):
        exp = experiment(
            tmp_path / "m", method=[py("wait", "slow", "action", seconds=0.7)], hypothesis_strategy=strategy
        )
        exp["runtime"]["hypothesis"]["frequency"] = 0.2
        result = await run_experiment(exp, store=store)
        journal = load_journal(result.run_id, store)
        assert len(journal["steady_states"]["during"]) >= 2, strategy
        assert all(s["steady_state_met"] for s in journal["steady_states"]["during"])
        if strategy == "during-method":
            assert journal["steady_states"]["before"] is None and journal["steady_states"]["after"] is None
        else:
            assert result.steady_state_before and result.steady_state_after


async def test_during_method_fail_fast_stops_the_method(tmp_path: Path, store: Store) -> None:
    flag = tmp_path / "flag"
    exp = experiment(
        tmp_path / "m",
        method=[
            py("break", "record", "action", path=str(flag), line="x"),
            py("wait", "slow", "action", seconds=3),
        ],
        hypothesis_strategy="continuously",
    )
    exp["steady-state-hypothesis"]["probes"] = [flag_absent(flag)]
    exp["runtime"]["hypothesis"].update(frequency=0.1, fail_fast=True)
    exp["runtime"]["recovery_timeout"] = 0.3
    with anyio.fail_after(3):
        result = await run_experiment(exp, store=store)
    assert result.status in ("deviated", "failed") and result.exit_code == 1


async def test_background_activities_run_concurrently(tmp_path: Path, store: Store) -> None:
    bg = [py(f"bg{i}", "slow", "action", seconds=0.5) for i in range(3)]
    for a in bg:
        a["background"] = True
    start = anyio.current_time()
    result = await run_experiment(experiment(tmp_path / "m", method=bg), store=store)
    assert result.status == "completed"
    assert anyio.current_time() - start < 1.4  # three 0.5 s actions overlapped
    assert len(load_journal(result.run_id, store)["run"]) == 3


async def test_driver_reverts_run_on_failure(tmp_path: Path, store: Store) -> None:
    fault_file = tmp_path / "fault-applied"
    method = [
        ctk_helpers.mark_action(fault_file),
        py("check", "record", "action", path=str(tmp_path / "seen"), line=str(fault_file.exists())),
        py("bad", "fail", "action"),
    ]
    result = await run_experiment(experiment(tmp_path / "m", method=method), store=store)
    assert result.status == "failed"
    assert not fault_file.exists()  # the revert ran
    journal = load_journal(result.run_id, store)
    assert journal["reverts"] == [{"label": "remove fault-applied", "ok": True, "error": None}]


async def test_unserialisable_output_is_kept_as_text(tmp_path: Path, store: Store) -> None:
    result = await run_experiment(
        experiment(tmp_path / "m", method=[py("odd", "unserialisable")]), store=store
    )
    output = load_journal(result.run_id, store)["run"][0]["output"]
    assert output["thing"] == "<Thing 42>" and sorted(output["items"]) == [1, 2] and output["raw"] == "bytes"


async def test_dry_run_touches_nothing(tmp_path: Path, store: Store) -> None:
    marker = tmp_path / "m.txt"
    result = await run_experiment(experiment(marker), store=store, dry_run=True)
    assert result.status == "completed" and result.exit_code == 0
    assert not marker.exists()
    journal = load_journal(result.run_id, store)
    assert all(r["status"] == "skipped" for r in journal["run"] + journal["rollbacks"])
    assert [p["phase"] for p in journal["phases"]] == ["baseline", "inject", "recover", "analyse"]


async def test_rollback_failure_is_appended_to_the_error(tmp_path: Path, store: Store) -> None:
    exp = experiment(tmp_path / "m", method=[py("bad", "fail", "action", message="first")])
    exp["rollbacks"] = [py("bad-rollback", "fail", "action", message="rollback broke")]
    result = await run_experiment(exp, store=store)
    assert result.error is not None
    first, _, rest = result.error.partition("; ")
    assert "first" in first and "rollback broke" in rest


async def test_journal_json_and_toon(tmp_path: Path, store: Store) -> None:
    result = await run_experiment(experiment(tmp_path / "m"), store=store)
    as_json = json.loads(get_journal(result.run_id, "json", store))
    toon = get_journal(result.run_id, "toon", store)
    from faultplane.core.formats import loads

    assert loads(toon, "toon") == as_json
    assert (
        exit_code(__import__("faultplane.core.model", fromlist=["Journal"]).Journal.model_validate(as_json))
        == 0
    )


async def test_journal_records_the_configuration_the_run_used(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FP_TEST_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("FP_TEST_TOKEN", "tok-3141")
    exp = experiment(tmp_path / "m.txt")
    exp["configuration"] = {"url": {"type": "env", "key": "FP_TEST_URL"}, "n": 1, "auth": "Bearer tok-3141"}
    exp["secrets"] = {"api": {"token": {"type": "env", "key": "FP_TEST_TOKEN"}}}
    result = await run_experiment(exp, variables={"n": 5, "extra": "x"}, store=store)
    assert result.status == "completed", result.error
    journal = load_journal(result.run_id, store)
    assert journal["experiment"]["configuration"] == {
        "url": "http://127.0.0.1:9/",
        "n": 5,
        "auth": "Bearer ***",
        "extra": "x",
    }
    assert journal["experiment"]["secrets"] == {"api": {"token": "***"}}
    assert "tok-3141" not in json.dumps(journal)
