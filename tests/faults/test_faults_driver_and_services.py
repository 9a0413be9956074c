"""The `faults` driver (actions with reverts) and the fault, discover and analytics services."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from faultplane.core.faults import FaultRegistry, FaultSpec, FaultSpecError, UnknownFaultError
from faultplane.core.store import Store
from faultplane.drivers.base import ActivityContext, DriverError, get_activity
from faultplane.services.analytics import QueryError, analyze
from faultplane.services.discover import discover
from faultplane.services.faults import list_faults, manage_fault
from policy_helpers import use_lab_policy

pytestmark = pytest.mark.anyio


@pytest.fixture
def reg(tmp_path: Path) -> FaultRegistry:
    return FaultRegistry(tmp_path / "faults.json")


async def test_register_action_reverts_to_the_previous_spec(reg: FaultRegistry) -> None:
    register = get_activity("faults", "register")
    reg.register(FaultSpec("db", "latency", probability=0.2))
    ctx = ActivityContext(rng=random.Random(1))
    out = await register.invoke(
        ctx, {"name": "db", "fault_type": "error", "probability": 1.0, "registry": str(reg.path)}
    )
    assert out["status"] == "registered" and reg.get("db") == FaultSpec("db", "error", 1.0)
    await register.invoke(ctx, {"name": "new", "fault_type": "timeout", "registry": str(reg.path)})
    assert {s.name for s in reg.active()} == {"db", "new"}
    outcomes = await ctx.revert_all()
    assert all(exc is None for _, exc in outcomes)
    assert reg.active() == [FaultSpec("db", "latency", probability=0.2)]


async def test_inject_and_remove_actions(reg: FaultRegistry) -> None:
    inject = get_activity("faults", "inject")
    remove = get_activity("faults", "remove")
    ctx = ActivityContext(rng=random.Random(3))
    with pytest.raises(DriverError, match="ghost"):
        await inject.invoke(ctx, {"name": "ghost", "registry": str(reg.path)})
    reg.register(FaultSpec("db", "error", probability=1.0))
    out = await inject.invoke(ctx, {"name": "db", "registry": str(reg.path)})
    assert out["was_triggered"] is True and reg.armed("db") == 1
    out = await remove.invoke(ctx, {"name": "db", "registry": str(reg.path)})
    assert out["existed"] is True and reg.get("db") is None
    await ctx.revert_all()  # only inject's disarm: removing is itself an undo and has no revert
    assert reg.get("db") is None and reg.armed("db") == 0


async def test_remove_in_rollbacks_leaves_the_fault_removed(
    reg: FaultRegistry, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faultplane.services.experiments import run_experiment

    use_lab_policy("gates: {required: false}\n")
    manage_fault("slow-db", "register", fault_type="latency", probability=1.0, registry=reg, store=store)

    def faults(kind: str, activity: str, **arguments: str) -> dict:
        provider = {"type": "driver", "driver": "faults", "name": activity, "arguments": arguments}
        return {"type": kind, "name": f"faults-{activity}", "provider": provider}

    exp = {
        "title": "remove as rollback",
        "method": [faults("probe", "active", registry=str(reg.path))],
        "rollbacks": [faults("action", "remove", name="slow-db", registry=str(reg.path))],
    }
    result = await run_experiment(exp, store=store)
    assert result.status == "completed", result.error
    assert reg.get("slow-db") is None  # the run's own reverts must not put it back


async def test_bad_driver_arguments_name_the_field(reg: FaultRegistry) -> None:
    register = get_activity("faults", "register")
    with pytest.raises(DriverError, match="probability"):
        await register.invoke(ActivityContext(), {"name": "x", "fault_type": "error", "probability": 3})
    with pytest.raises(DriverError, match="fault_type"):
        await register.invoke(ActivityContext(), {"name": "x", "fault_type": "meteor"})


async def test_dry_run_touches_nothing(reg: FaultRegistry) -> None:
    register = get_activity("faults", "register")
    ctx = ActivityContext(dry_run=True)
    out = await register.invoke(ctx, {"name": "x", "fault_type": "error", "registry": str(reg.path)})
    assert out["dry_run"] is True and reg.active() == [] and ctx.reverts == []


def test_manage_fault_audits_every_call(reg: FaultRegistry, store: Store) -> None:
    r = manage_fault(
        "db", "register", fault_type="latency", probability=0.5, registry=reg, store=store, actor="test"
    )
    assert (r.status, r.fault_type, r.probability) == ("registered", "latency", 0.5)
    r = manage_fault("db", "inject", seed=7, registry=reg, store=store)
    assert r.was_triggered is (random.Random(7).random() < 0.5) and r.seed == 7
    with pytest.raises(UnknownFaultError):
        manage_fault("ghost", "inject", registry=reg, store=store)
    with pytest.raises(FaultSpecError, match="fault_type"):
        manage_fault("x", "register", registry=reg, store=store)
    with pytest.raises(FaultSpecError, match="probability"):
        manage_fault("x", "inject", probability=7, registry=reg, store=store)
    with pytest.raises(FaultSpecError, match="action"):
        manage_fault("x", "zap", registry=reg, store=store)
    with pytest.raises(FaultSpecError, match="fault_name"):
        manage_fault(" ", "remove", registry=reg, store=store)
    assert manage_fault("db", "remove", registry=reg, store=store).existed is True
    assert manage_fault("db", "remove", registry=reg, store=store).existed is False
    rows = store.query("SELECT actor, action, subject, details FROM audit ORDER BY ts")
    assert [(r["action"], r["subject"]) for r in rows] == [
        ("fault.register", "db"),
        ("fault.inject", "db"),
        ("fault.inject", "ghost"),
        ("fault.register", "x"),
        ("fault.inject", "x"),
        ("fault.zap", "x"),
        ("fault.remove", " "),
        ("fault.remove", "db"),
        ("fault.remove", "db"),
    ]
    assert rows[0]["actor"] == "test" and json.loads(rows[1]["details"])["seed"] == 7
    assert "fix:" in json.loads(rows[2]["details"])["error"]


def test_list_faults(reg: FaultRegistry) -> None:
    reg.register(FaultSpec("b", "error", probability=1.0))
    reg.register(FaultSpec("a", "latency", duration_seconds=2))
    reg.inject("b", random.Random(0))
    faults = list_faults(reg)
    assert [(f.name, f.fault_type, f.armed) for f in faults] == [("a", "latency", 0), ("b", "error", 1)]


def test_discover_lists_the_faults_driver() -> None:
    d = discover()
    names = {dr.driver for dr in d.drivers}
    assert "faults" in names
    faults = discover("faults").drivers[0]
    assert {a.name for a in faults.actions} >= {"register", "inject", "remove"}
    assert {p.name for p in faults.probes} >= {"active"}
    assert faults.actions[0].parameters["type"] == "object"
    with pytest.raises(LookupError, match="faults"):
        discover("nope")
    providers = {p.type: p for p in d.providers}
    assert set(providers) == {"python", "process", "http", "driver"}
    assert "module" in providers["python"].parameters["properties"]


def test_analyze_is_read_only_and_limited(store: Store, tmp_path: Path) -> None:
    store.insert(
        "audit", [{"actor": "a", "action": f"x{i}", "subject": "s", "details": "{}"} for i in range(30)]
    )
    r = analyze("SELECT action FROM audit ORDER BY action", store=store, limit=5)
    assert r.columns == ["action"] and r.row_count == 5 and r.truncated
    r = analyze("SELECT now() AS t, 1.5::DECIMAL(4,2) AS d, [1,2] AS l, {'k': 1} AS s", store=store)
    t, d, lst, struct = r.rows[0]
    assert isinstance(t, str) and "T" in t and d == 1.5 and lst == [1, 2] and struct == {"k": 1}
    leak = tmp_path / "leak.csv"
    for sql in (
        "DELETE FROM audit",
        "DROP TABLE audit",
        f"COPY audit TO '{leak}'",
        "SELECT * FROM read_text('/etc/hostname')",
        "ATTACH ':memory:' AS m",
        "SET enable_external_access = true",
        "SELECT * FROM no_such_table",
        "",
    ):
        with pytest.raises(QueryError) as info:
            analyze(sql, store=store)
        assert str(info.value).startswith("sql:")
    assert not leak.exists()
    assert store.query("SELECT count(*) AS n FROM audit")[0]["n"] == 30
    with pytest.raises(QueryError, match="limit"):
        analyze("SELECT 1", store=store, limit=0)
