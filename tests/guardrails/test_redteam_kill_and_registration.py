"""Approval-class faults by effect, on every surface.

A process kill anywhere in an experiment (any provider, a quoted shell spelling, an environment variable,
rollbacks, steady-state probes) is refused by `guard check`, `validate`, `run --dry-run`, a real `run` and the
MCP tools until a person approves it; the process it aims at is alive afterwards. Partitions and resource
exhaustion registered through services (the fault service, MCP `chaos_inject_fault`, GameDays, search) are
refused by type unless approved, and the registry is unchanged. The controls show each refusal is the
policy's: once a person signs, the same kill kills and the same registration registers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from guard_helpers import Approver
from typer.testing import CliRunner

from faultplane.cli.main import app
from faultplane.core.faults import FaultRegistry, FaultSpec
from faultplane.core.store import Store
from faultplane.services.faults import (
    FaultInputError,
    approval_spec,
    fault_approval_hash,
    list_faults,
    manage_fault,
)
from faultplane.services.guard import prepare

runner = CliRunner()
LAB = "gates: {required: false, min_gates: 0, require_window: false}\n"


class Sleeper:
    def __init__(self) -> None:
        self.marker = f"fp-kill-target-{uuid.uuid4().hex[:10]}"
        self.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", self.marker])

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None


@pytest.fixture
def sleeper() -> Iterator[Sleeper]:
    s = Sleeper()
    yield s
    s.proc.kill()
    s.proc.wait()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, approver: Approver) -> Path:
    root = tmp_path / "lab"
    (root / ".git").mkdir(parents=True)
    approver.write_policy(root, LAB)
    monkeypatch.chdir(root)
    monkeypatch.delenv("FAULTPLANE_POLICY", raising=False)
    return root


def _act(provider: dict[str, Any], kind: str = "action") -> dict[str, Any]:
    return {"type": kind, "name": "step", "provider": provider}


# each builds (experiment) aimed at the sleeper; the kill hides in a different place or spelling
KILLS: dict[str, Callable[[Sleeper], dict[str, Any]]] = {
    "kill-9": lambda s: {
        "method": [_act({"type": "process", "path": "kill", "arguments": ["-9", str(s.pid)]})]
    },
    "pkill-pattern": lambda s: {
        "method": [_act({"type": "process", "path": "pkill", "arguments": ["-f", s.marker]})]
    },
    "quoted-shell": lambda s: {
        "method": [_act({"type": "process", "path": "sh", "arguments": ["-c", f"k'i'll -9 {s.pid}"]})]
    },
    "env-indirection": lambda s: {
        "method": [
            _act(
                {"type": "process", "path": "sh", "arguments": ["-c", "$C"], "env": {"C": f"kill -9 {s.pid}"}}
            )
        ]
    },
    "python-os-kill": lambda s: {
        "method": [
            _act(
                {
                    "type": "process",
                    "path": sys.executable,
                    "arguments": ["-c", f"import os; os.kill({s.pid}, 9)"],
                }
            )
        ]
    },
    "driver-process-kill": lambda s: {
        "method": [
            _act(
                {
                    "type": "driver",
                    "driver": "process",
                    "name": "kill",
                    "arguments": {"cmdline_pattern": s.marker},
                }
            )
        ]
    },
    "rollback": lambda s: {
        "method": [_act({"type": "process", "path": "true"})],
        "rollbacks": [_act({"type": "process", "path": "kill", "arguments": ["-KILL", str(s.pid)]})],
    },
    "steady-state-probe": lambda s: {
        "steady-state-hypothesis": {
            "title": "up",
            "probes": [
                {
                    **_act({"type": "process", "path": "pkill", "arguments": ["-f", s.marker]}, "probe"),
                    "tolerance": 0,
                }
            ],
        },
        "method": [_act({"type": "process", "path": "true"})],
    },
}


def _doc(name: str, s: Sleeper) -> dict[str, Any]:
    return {"title": f"kill {name}", **KILLS[name](s)}


def _write(project: Path, doc: dict[str, Any]) -> Path:
    path = project / "exp.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(KILLS))
def test_a_process_kill_is_refused_on_every_cli_surface_and_never_runs(
    project: Path, sleeper: Sleeper, name: str
) -> None:
    _write(project, _doc(name, sleeper))
    res = runner.invoke(app, ["guard", "check", "exp.yaml", "--json"])
    assert res.exit_code == 3, res.output
    verdict = json.loads(res.stdout)
    assert not verdict["allowed"] and any("process_kill" in r for r in verdict["approval_required"])
    res = runner.invoke(app, ["validate", "exp.yaml", "--json"])
    assert res.exit_code != 0 and "process_kill" in res.output, res.output
    res = runner.invoke(app, ["run", "--dry-run", "exp.yaml", "--json", "-q"])
    assert res.exit_code == 3 and "process_kill" in res.output, res.output
    res = runner.invoke(app, ["run", "exp.yaml", "-q"])
    assert res.exit_code == 3, res.output
    assert sleeper.alive()


def test_the_same_kill_runs_once_a_person_approved_it(
    project: Path, sleeper: Sleeper, approver: Approver
) -> None:
    """The control: the refusal above is the approval rule, not a broken experiment."""
    path = _write(project, _doc("kill-9", sleeper))
    token = approver.sign(prepare(path).approval_hash, record=False).token
    res = runner.invoke(app, ["run", "exp.yaml", "-q", "--approval", token])
    assert res.exit_code == 0, res.output
    assert sleeper.proc.wait(timeout=30) != 0


def test_mcp_tools_refuse_a_process_kill(tmp_path: Path, sleeper: Sleeper) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))
    from mcp_helpers import make_env, stdio_client

    senv = make_env(tmp_path / "srv")
    problems: list[str] = []

    async def main() -> None:
        async with stdio_client(senv) as client:
            for name in sorted(KILLS):
                text = yaml.safe_dump(_doc(name, sleeper))
                val = await client.call_tool("chaos_validate_experiment", {"experiment": text})
                if val.structured_content["valid"] or "process_kill" not in str(
                    val.structured_content["errors"]
                ):
                    problems.append(f"{name}: validate: {val.structured_content}")
                dry = await client.call_tool("chaos_run_experiment", {"experiment": text, "dry_run": True})
                got = dry.structured_content or {}
                if got.get("status") != "refused" or "process_kill" not in str(got.get("error")):
                    problems.append(f"{name}: dry run: {dry.content}")
                # a real run from a client that cannot ask a person: refused, nothing killed
                run = await client.call_tool("chaos_run_experiment", {"experiment": text})
                if not run.is_error or "needs a human approval" not in run.content[0].text:
                    problems.append(f"{name}: real run: {run.content}")
                if not sleeper.alive():
                    problems.append(f"{name}: the target died")
                    return

    anyio.run(main)
    assert not problems, "\n".join(problems)


# ---- registrations through services --------------------------------------------------------------------------

RESERVED = ["network_partition", "resource_exhaustion"]


@pytest.mark.parametrize("kind", RESERVED)
def test_the_fault_service_refuses_reserved_types_without_a_person(
    project: Path, approver: Approver, kind: str
) -> None:
    reg = FaultRegistry(project / "faults.json")
    store = Store(project / "s.duckdb")
    with pytest.raises(FaultInputError, match="needs a human approval"):
        manage_fault("db", "register", fault_type=kind, probability=0.5, registry=reg, store=store)
    assert list_faults(reg) == []
    # a token for another call (another probability) does not cover this one
    other = fault_approval_hash(approval_spec("db", "register", kind, 1.0, None))
    wrong = approver.sign(other, record=False).token
    with pytest.raises(FaultInputError, match="does not verify"):
        manage_fault("db", "register", fault_type=kind, probability=0.5, registry=reg, approval_token=wrong)
    assert list_faults(reg) == []
    # a person's approval of exactly this call: registered
    ahash = fault_approval_hash(approval_spec("db", "register", kind, 0.5, None))
    token = approver.sign(ahash, record=False).token
    r = manage_fault("db", "register", fault_type=kind, probability=0.5, registry=reg, approval_token=token)
    assert r.status == "registered" and [f.fault_type for f in list_faults(reg)] == [kind]


@pytest.mark.parametrize("kind", RESERVED)
def test_arming_a_registered_reserved_fault_needs_a_person_too(
    project: Path, approver: Approver, kind: str
) -> None:
    reg = FaultRegistry(project / "faults.json")
    reg.register(FaultSpec("db", kind, 1.0))  # as an approved experiment's faults.register would leave it
    with pytest.raises(FaultInputError, match="needs a human approval"):
        manage_fault("db", "inject", seed=1, registry=reg, store=Store(project / "s.duckdb"))
    assert reg.load().armed.get("db", 0) == 0
    # a stored approval (as `faultplane approvals sign` leaves one) counts as well
    approver.sign(fault_approval_hash(approval_spec("db", "inject", kind, None, None)))
    r = manage_fault("db", "inject", seed=1, registry=reg, store=Store(project / "s.duckdb"))
    assert r.status == "injected" and r.was_triggered


def test_ordinary_fault_types_need_nobody(project: Path) -> None:
    reg = FaultRegistry(project / "faults.json")
    for kind in ("latency", "error", "timeout"):
        assert manage_fault(f"f-{kind}", "register", fault_type=kind, registry=reg).status == "registered"


def test_mcp_inject_fault_refuses_reserved_registrations_and_arming(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))
    from mcp_helpers import make_env, stdio_client

    senv = make_env(tmp_path / "srv")
    FaultRegistry(senv.registry).register(FaultSpec("armed-part", "network_partition", 1.0))
    calls = [
        {"fault_name": "x", "action": "register", "fault_type": "network_partition", "probability": 1.0},
        {"fault_name": "y", "action": "register", "fault_type": "resource_exhaustion"},
        {"fault_name": "armed-part", "action": "inject"},  # its registered type counts
    ]
    problems: list[str] = []

    async def main() -> None:
        async with stdio_client(senv) as client:
            for call in calls:
                r = await client.call_tool("chaos_inject_fault", call)
                if not r.is_error or "needs a human approval" not in r.content[0].text:
                    problems.append(f"{call}: {r.content}")

    anyio.run(main)
    assert not problems, "\n".join(problems)
    state = FaultRegistry(senv.registry).load()
    assert sorted(state.faults) == ["armed-part"] and state.armed.get("armed-part", 0) == 0


def _registering(kind: str) -> dict[str, Any]:
    return {
        "title": f"register {kind}",
        "method": [
            _act(
                {
                    "type": "driver",
                    "driver": "faults",
                    "name": "register",
                    "arguments": {"name": "db", "fault_type": kind, "probability": 1.0},
                }
            )
        ],
    }


@pytest.mark.anyio
async def test_a_gameday_cannot_register_reserved_faults_or_kill(project: Path, sleeper: Sleeper) -> None:
    from faultplane.services.gameday import run_gameday

    for i, doc in enumerate([_registering("network_partition"), _registering("resource_exhaustion")]):
        (project / f"reg{i}.yaml").write_text(yaml.safe_dump(doc))
    (project / "kill.yaml").write_text(yaml.safe_dump(_doc("pkill-pattern", sleeper)))
    gd = {
        "name": "sneaky",
        "lanes": [
            {"name": "all", "stop_on_failure": False, "experiments": ["reg0.yaml", "reg1.yaml", "kill.yaml"]}
        ],
    }
    (project / "gameday.yaml").write_text(yaml.safe_dump(gd))
    a = await run_gameday(project / "gameday.yaml", store=Store(project / "s.duckdb"))
    assert [r.status for r in a.runs] == ["refused", "refused", "refused"], a.runs
    assert all("approval" in (r.error or "") for r in a.runs)
    assert list_faults() == [] and sleeper.alive()


@pytest.mark.anyio
async def test_a_search_cannot_sweep_into_reserved_fault_types(project: Path) -> None:
    from faultplane.services.search import run_search

    doc = _registering("${kind}")
    doc["steady-state-hypothesis"] = {
        "title": "t",
        "probes": [
            {
                "type": "probe",
                "name": "p",
                "tolerance": {"type": "range", "range": [0, 10]},
                "provider": {"type": "python", "module": "json", "func": "loads", "arguments": {"s": "1"}},
            }
        ],
    }
    spec = {
        "experiment": doc,
        "parameters": {"kind": {"type": "categorical", "choices": RESERVED}},
        "objective": {"source": "probe", "name": "p", "bound": 5},
        "budget": 2,
        "seed": 3,
        "sampler": "random",
    }
    result = await run_search(spec, store=Store(project / "s.duckdb"))
    assert result.status == "refused", result.message
    assert result.trials and all(t.run_status == "refused" for t in result.trials)
    assert "approval" in result.message
    assert list_faults() == []


@pytest.mark.parametrize("name", ["kill-9", "driver-process-kill", "quoted-shell"])
def test_the_choke_point_refuses_a_kill_that_skipped_phase_0(sleeper: Sleeper, name: str) -> None:
    """A plan run without a phase-0 decision (a surface that skipped it) cannot kill: the engine judges each
    activity's effect again just before it runs, and no person approved this run."""
    from faultplane.core.policy import Policy
    from faultplane.engine.lifecycle import plan, run_plan

    p = plan(_doc(name, sleeper))
    journal = anyio.run(lambda: run_plan(p, policy=Policy()))
    (act,) = journal.run
    assert act.status == "failed" and "needs a person's approval" in (act.exception or ""), act.exception
    assert sleeper.alive()


def test_an_approval_for_one_target_covers_no_other(project: Path, approver: Approver) -> None:
    reg = FaultRegistry(project / "faults.json")
    spec = approval_spec("db", "register", "network_partition", 1.0, None, "127.0.0.1:5432")
    token = approver.sign(fault_approval_hash(spec), record=False).token
    with pytest.raises(FaultInputError, match="does not verify"):
        manage_fault(
            "db",
            "register",
            fault_type="network_partition",
            probability=1.0,
            target="127.0.0.1:6379",
            registry=reg,
            approval_token=token,
        )
    assert list_faults(reg) == []
    r = manage_fault(
        "db",
        "register",
        fault_type="network_partition",
        probability=1.0,
        target="127.0.0.1:5432",
        registry=reg,
        approval_token=token,
    )
    assert r.status == "registered"
