"""The fault registry: the contract the MCP server, the CLI and the network proxy share."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from faultplane.core.faults import (
    FAULT_TYPES,
    FaultRegistry,
    FaultSpec,
    FaultSpecError,
    UnknownFaultError,
    default_registry_path,
)


def test_default_path_follows_xdg_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_registry_path() == tmp_path / "xdg-state" / "faultplane" / "faults.json"
    assert FaultRegistry().path == default_registry_path()
    monkeypatch.setenv("FAULTPLANE_FAULTS", str(tmp_path / "elsewhere.json"))
    assert FaultRegistry().path == tmp_path / "elsewhere.json"


def test_register_get_active_remove(tmp_path: Path) -> None:
    reg = FaultRegistry(tmp_path / "f.json")
    assert reg.active() == [] and reg.get("a") is None
    spec = FaultSpec("a", "latency", duration_seconds=0.5)
    assert reg.register(spec) == spec
    assert reg.register(spec) == spec  # idempotent
    reg.register(FaultSpec("b", "error", probability=1, error_message="boom", target="netproxy:db"))
    assert [s.name for s in reg.active()] == ["a", "b"]
    assert reg.get("b") == FaultSpec("b", "error", 1.0, None, "boom", "netproxy:db")
    # register overwrites
    reg.register(FaultSpec("a", "timeout", probability=0.3))
    assert reg.get("a") == FaultSpec("a", "timeout", 0.3)
    assert reg.remove("a") is True
    assert reg.remove("a") is False  # idempotent
    assert [s.name for s in reg.active()] == ["b"]
    # another instance on the same file sees the same state
    assert FaultRegistry(tmp_path / "f.json").get("b") is not None
    assert reg.clear() == ["b"] and reg.active() == []


def test_spec_validation_names_field_and_fix() -> None:
    for kwargs, field in [
        ({"name": "", "fault_type": "error"}, "fault_name"),
        ({"name": "x", "fault_type": "meteor"}, "fault_type"),
        ({"name": "x", "fault_type": "error", "probability": 1.01}, "probability"),
        ({"name": "x", "fault_type": "error", "probability": -0.5}, "probability"),
        ({"name": "x", "fault_type": "error", "probability": True}, "probability"),
        ({"name": "x", "fault_type": "latency", "duration_seconds": -1}, "duration_seconds"),
        ({"name": "x", "fault_type": "latency", "duration_seconds": float("inf")}, "duration_seconds"),
        ({"name": "x", "fault_type": "error", "error_message": 5}, "error_message"),
        # an agent registered a 10,000-character name, a NUL and a right-to-left override: all were kept
        ({"name": "x" * 201, "fault_type": "error"}, "fault_name"),
        ({"name": "db\x00query", "fault_type": "error"}, "fault_name"),
        ({"name": "db\u202eyreuq", "fault_type": "error"}, "fault_name"),
        ({"name": "db\nquery", "fault_type": "error"}, "fault_name"),
        ({"name": "x", "fault_type": "error", "error_message": "e" * 4097}, "error_message"),
        ({"name": "x", "fault_type": "error", "target": "t" * 501}, "target"),
    ]:
        with pytest.raises(FaultSpecError) as info:
            FaultSpec(**kwargs)  # type: ignore[arg-type]
        assert info.value.field == field
        assert str(info.value).startswith(field) and "fix:" in str(info.value)
    assert {FaultSpec("x", t).fault_type for t in FAULT_TYPES} == set(FAULT_TYPES)
    assert FaultSpec("x" * 200, "error").name == "x" * 200 and FaultSpec("café.ß", "error").name == "café.ß"
    assert FaultSpec("x", "latency").effective_duration == 1.0


def test_inject_rolls_once_and_arms_one_occurrence(tmp_path: Path) -> None:
    reg = FaultRegistry(tmp_path / "f.json")
    with pytest.raises(UnknownFaultError) as info:
        reg.inject("ghost", random.Random(1))
    assert "ghost" in str(info.value) and "fix:" in str(info.value)
    reg.register(FaultSpec("p0", "error", probability=0.0))
    reg.register(FaultSpec("p1", "error", probability=1.0))
    assert reg.inject("p0", random.Random(1)) is False and reg.armed("p0") == 0
    assert reg.inject("p1", random.Random(1)) is True and reg.armed("p1") == 1
    assert reg.inject("p1", random.Random(2)) is True and reg.armed("p1") == 2
    # the roll is the seeded generator's: same seed, same outcome
    reg.register(FaultSpec("half", "error", probability=0.5))
    outcomes = [reg.inject("half", random.Random(s)) for s in range(40)]
    assert outcomes == [random.Random(s).random() < 0.5 for s in range(40)]
    assert reg.armed("half") == sum(outcomes)
    # consume takes one at a time; disarm drops the rest; remove drops everything
    assert reg.consume("p1") == reg.get("p1") and reg.armed("p1") == 1
    assert reg.disarm("p1") == 1 and reg.consume("p1") is None
    reg.inject("p1", random.Random(1))
    reg.remove("p1")
    reg.register(FaultSpec("p1", "error", probability=1.0))
    assert reg.armed("p1") == 0


def test_file_is_json_and_bad_entries_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    reg = FaultRegistry(path)
    reg.register(FaultSpec("ok", "error"))
    data = json.loads(path.read_text())
    data["faults"]["bad"] = {"fault_type": "meteor"}
    path.write_text(json.dumps(data))
    assert [s.name for s in reg.active()] == ["ok"]
    path.write_text("{not json")
    assert reg.active() == []
    reg.register(FaultSpec("again", "error"))  # a corrupt file is replaced, not fatal
    assert [s.name for s in reg.active()] == ["again"]


def test_concurrent_writers_from_several_processes_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    script = textwrap.dedent(
        """
        import random, sys
        from faultplane.core.faults import FaultRegistry, FaultSpec
        reg = FaultRegistry(sys.argv[1]); w = sys.argv[2]
        reg.register(FaultSpec("shared", "error", probability=1.0))
        for i in range(25):
            reg.register(FaultSpec(f"{w}-{i}", "latency", probability=0.5))
            reg.inject("shared", random.Random(i))
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), f"w{n}"]) for n in range(4)]
    for p in procs:
        assert p.wait(60) == 0
    reg = FaultRegistry(path)
    names = {s.name for s in reg.active()}
    assert names == {"shared"} | {f"w{n}-{i}" for n in range(4) for i in range(25)}
    assert reg.armed("shared") == 100  # every inject of every process counted
    assert not list(tmp_path.glob(".faults-*.tmp"))


def test_armed_occurrence_is_consumed_by_exactly_one_process(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    reg = FaultRegistry(path)
    reg.register(FaultSpec("once", "error", probability=1.0))
    for i in range(5):
        reg.inject("once", random.Random(i))
    script = (
        "import sys; from faultplane.core.faults import FaultRegistry as R; r = R(sys.argv[1]); "
        "print(sum(r.consume('once') is not None for _ in range(10)))"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    taken = [int(p.communicate(timeout=60)[0]) for p in procs]
    assert sum(taken) == 5 and reg.armed("once") == 0
