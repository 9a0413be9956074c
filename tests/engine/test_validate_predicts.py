"""`validate` predicts phase 0: an experiment that validates is never refused when it runs for a reason
validate could have seen, and one that does not validate never starts. Checked over the compatibility corpus
and over mutations of it (misspelt keys, modules, functions, arguments, strategies)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultplane.core.formats import ExperimentError, load_document
from faultplane.engine.lifecycle import execute
from faultplane.services.experiments import validate_experiment

COMPAT = Path(__file__).parent / "ctk" / "compat"
CORPUS = sorted(p for p in COMPAT.iterdir() if p.suffix in (".yaml", ".json") and p.name[:2].isdigit())
CORPUS = [p for p in CORPUS if p.name != "58-vars.json"]
if str(COMPAT) not in sys.path:
    sys.path.insert(0, str(COMPAT))

pytestmark = pytest.mark.usefixtures("lab_policy")


def _vars(doc: dict[str, Any], tmp: Path) -> dict[str, Any]:
    given_ = {"workdir": str(tmp), "base_url": "http://127.0.0.1:9"}
    return {k: v for k, v in given_.items() if k in (doc.get("configuration") or {})}


def _activities(doc: dict[str, Any]) -> list[dict[str, Any]]:
    items = list((doc.get("steady-state-hypothesis") or {}).get("probes") or [])
    items += list(doc.get("method") or []) + list(doc.get("rollbacks") or [])
    return [a for a in items if isinstance(a, dict) and isinstance(a.get("provider"), dict)]


def _mutate(doc: dict[str, Any], kind: str, pick: int, text: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    acts = _activities(doc)
    act = acts[pick % len(acts)] if acts else None
    prov = act["provider"] if act else None
    if kind == "typo-top" and doc:
        key = sorted(doc)[pick % len(doc)]
        doc[key[:-1] + text[:1] if len(key) > 1 else key + "x"] = doc.pop(key)
    elif kind == "typo-activity" and act:
        key = sorted(act)[pick % len(act)]
        act[key + text[:2]] = act.pop(key)
    elif kind == "typo-provider" and prov:
        key = sorted(prov)[pick % len(prov)]
        prov[key[:-1] or "k"] = prov.pop(key)
    elif kind == "module" and prov and prov.get("type") == "python":
        prov["module"] = prov["module"] + text
    elif kind == "func" and prov and prov.get("type") == "python":
        prov["func"] = prov["func"] + text
    elif kind == "argument" and prov and prov.get("type") == "python":
        prov.setdefault("arguments", {})["extra_" + (text or "x")] = 1
    elif kind == "path" and prov and prov.get("type") == "process":
        prov["path"] = "no-such-" + text
    elif kind == "strategy":
        doc["runtime"] = {"hypothesis": {"strategy": text or "sometimes"}}
    elif kind == "reference":
        doc.setdefault("method", []).append({"ref": "nowhere" + text})
    elif kind == "variable" and act:
        act.setdefault("pauses", {})["before"] = "${undefined_" + (text or "x") + "}"
    elif kind == "control":
        bad = [{"name": "c"}, {"name": "c", "scope": "during" + text, "provider": {"type": "python"}}]
        bad.append({"ref": "nowhere" + text})
        (act if act else doc).setdefault("controls", []).append(bad[pick % len(bad)])
    elif kind == "tolerance" and act:
        act["tolerance"] = {"type": "rnage" + text, "range": [0, 1]}
    elif kind == "dynamic":
        probe = {"type": "python", "module": "ctkfix", "func": "no_such" + text}
        doc.setdefault("configuration", {})["probed"] = {"type": "probe", "name": "p", "provider": probe}
    return doc


def _phase0(doc: dict[str, Any], variables: dict[str, Any]) -> str:
    """What a run decides before anything executes: invalid, refused, or runs (dry run: nothing is touched)."""

    async def go() -> str:
        try:
            journal = await execute(doc, variables=variables, dry_run=True)
        except ExperimentError:
            return "invalid"
        return "refused" if journal.status == "refused" else "runs"

    return anyio.run(go)


def _check(doc: dict[str, Any], tmp: Path) -> None:
    variables = _vars(doc, tmp)
    report = validate_experiment(doc, variables=variables)
    outcome = _phase0(doc, variables)
    if report.valid:
        assert outcome == "runs", f"validated, then {outcome}: {doc}"
    else:
        assert outcome in ("invalid", "refused"), f"did not validate ({report.errors}) but runs: {doc}"


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus(path: Path, tmp_path: Path) -> None:
    _check(load_document(path), tmp_path)


KINDS = [
    "typo-top",
    "typo-activity",
    "typo-provider",
    "module",
    "func",
    "argument",
    "path",
    "strategy",
    "reference",
    "variable",
    "control",
    "tolerance",
    "dynamic",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    index=st.integers(0, len(CORPUS) - 1),
    kind=st.sampled_from(KINDS),
    pick=st.integers(0, 20),
    text=st.text(alphabet="abcé_ü", min_size=0, max_size=3),
)
def test_mutations(index: int, kind: str, pick: int, text: str, tmp_path: Path) -> None:
    _check(_mutate(load_document(CORPUS[index]), kind, pick, text), tmp_path)


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        (
            {"type": "python", "module": "ctkfix", "fnc": "value"},
            [("method[0].provider.func", "rename 'fnc' to 'func'")],
        ),
        (
            {"type": "python", "module": "ctkfix", "func": "value", "arguments": {"vv": 1}},
            [("method[0].provider.arguments.vv", "rename 'vv' to 'v'")],
        ),
        (
            {"type": "python", "module": "ctkfix", "func": "vlaue", "arguments": {"v": 1}},
            [("method[0].provider.func", "did you mean 'value'?")],
        ),
        (
            {"type": "driver", "driver": "faults", "name": "registr", "arguments": {}},
            [("method[0].provider.name", "did you mean 'register'?")],
        ),
    ],
)
def test_one_error_per_root_cause(provider: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    """A bad key inside an activity is one problem, not one per branch of the activity-or-ref union."""
    doc = {
        "title": "t",
        "description": "d",
        "method": [{"type": "action", "name": "a", "provider": provider}],
    }
    report = validate_experiment(doc, with_policy=False)
    assert [(e.field, e.fix) for e in report.errors] == expected


def test_references_controls_and_tolerances_one_error_each_where_written() -> None:
    act = {
        "type": "action",
        "name": "drain",
        "provider": {"type": "python", "module": "ctkfix", "func": "value"},
    }
    act["provider"]["arguments"] = {"v": 1}

    def errors(doc: dict[str, Any], compat: bool | None = None) -> list[tuple[str, str]]:
        report = validate_experiment(
            {"title": "t", "description": "d", **doc}, with_policy=False, ctk_compat=compat
        )
        return [(e.field, e.fix) for e in report.errors]

    assert errors({"method": [act, {"ref": "drian"}]}) == [("method[1].ref", "did you mean 'drain'?")]
    assert errors({"method": [act], "rollbacks": [{"ref": "zzz"}]}) == [
        ("rollbacks[0].ref", "name a declared activity: drain")
    ]
    recorder = {"name": "recorder", "provider": {"type": "python", "module": "ctkfix_control"}}
    with_ref = {**act, "controls": [{"ref": "recordr"}]}
    assert errors({"method": [with_ref], "controls": [recorder]}) == [
        ("method[0].controls[0].ref", "did you mean 'recorder'?")
    ]
    assert [f for f, _ in errors({"method": [act], "controls": [{"name": "x"}]})] == ["controls[0].provider"]
    scoped = {**recorder, "scope": "during"}
    assert [f for f, _ in errors({"method": [act], "controls": [scoped]})] == ["controls[0].scope"]
    # a ref control as documented runs; Chaos Toolkit's validator wants a name on it (docs: control-ref-without-name)
    good_ref = {**act, "controls": [{"ref": "recorder"}]}
    assert errors({"method": [good_ref], "controls": [recorder]}) == []
    assert [f for f, _ in errors({"method": [good_ref], "controls": [recorder]}, compat=True)] == [
        "method[0].controls[0].name"
    ]
    probe = {**act, "type": "probe", "tolerance": {"type": "rnage", "range": [0, 1]}}
    hypo = {"steady-state-hypothesis": {"title": "h", "probes": [probe]}, "method": []}
    found = validate_experiment({"title": "t", "description": "d", **hypo}, with_policy=False).errors
    assert len(found) == 1 and "did you mean 'range'?" in found[0].message


def test_driver_arguments_checked_against_the_schema() -> None:
    def with_args(arguments: dict[str, Any]) -> list[tuple[str, str]]:
        doc = {
            "title": "t",
            "description": "d",
            "method": [
                {
                    "type": "action",
                    "name": "a",
                    "provider": {
                        "type": "driver",
                        "driver": "faults",
                        "name": "register",
                        "arguments": arguments,
                    },
                }
            ],
        }
        return [(e.field, e.fix) for e in validate_experiment(doc, with_policy=False).errors]

    assert with_args({"nam": "x", "fault_type": "latency"}) == [
        ("method[0].provider.arguments.nam", "rename 'nam' to 'name'")
    ]
    errors = with_args({"fault_type": "latency", "bogus": 1})
    assert [f for f, _ in errors] == [
        "method[0].provider.arguments.name",
        "method[0].provider.arguments.bogus",
    ]
    assert with_args({"name": "x", "fault_type": "latency"}) == []
    drv = with_args({})[0]
    assert drv[0] == "method[0].provider.arguments.name"
