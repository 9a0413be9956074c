"""Validation: every problem at once, each naming the field and the fix; variables and secrets."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faultplane.core.config import load_var_file, mask_secrets, resolve
from faultplane.core.formats import ExperimentError, dumps, load_document, loads
from faultplane.engine.lifecycle import plan
from faultplane.services.experiments import validate_experiment

PROBE = {
    "type": "probe",
    "name": "p",
    "provider": {"type": "python", "module": "ctk_helpers", "func": "value", "arguments": {"v": 1}},
    "tolerance": 1,
}


def test_unknown_keys_are_warnings_and_all_errors_reported_at_once() -> None:
    doc = {
        "title": "t",
        "methd": [],
        "method": [
            {"type": "action", "name": "a", "provider": {"type": "python", "module": "m", "fnc": "x"}}
        ],
        "steady-state-hypothesis": {"probes": [{**PROBE, "tolerance": {"type": "range", "range": [1]}}]},
    }
    with pytest.raises(ExperimentError) as info:
        plan(doc)
    issues = info.value.issues
    fields = {i.field for i in issues}
    # Chaos Toolkit ignores unknown keys: `methd` is a warning, not a refusal
    assert "methd" not in fields
    # a misspelt required key is one error naming both spellings, not one per branch of a union
    assert [i.field for i in issues if "fnc" in i.message] == ["method[0].provider.func"]
    assert any("rename 'fnc' to 'func'" in i.fix for i in issues)
    assert any(
        "steady-state-hypothesis.probes[0].tolerance" in i.field and "range" in i.message for i in issues
    )
    assert len(issues) == 2
    assert all(i.fix for i in issues)
    fixed = {**doc, "method": [], "steady-state-hypothesis": {"title": "h", "probes": [PROBE]}}
    p = plan(fixed)
    assert [(w.field, w.fix) for w in p.warnings] == [("methd", "did you mean 'method'?")]


def test_bad_provider_type_names_the_choices() -> None:
    doc = {"title": "t", "method": [{"type": "action", "name": "a", "provider": {"type": "shell"}}]}
    report = validate_experiment(doc, with_policy=False)
    assert not report.valid
    assert any("provider.type" in e.field and "python, process, http, driver" in e.fix for e in report.errors)


def test_unknown_activity_reference_is_an_error() -> None:
    report = validate_experiment({"title": "t", "method": [{"ref": "nope"}]}, with_policy=False)
    assert not report.valid and "nope" in report.errors[0].message


def test_unknown_variable_is_reported_with_its_location() -> None:
    doc = {
        "title": "t",
        "method": [{"type": "action", "name": "a", "provider": {"type": "http", "url": "${base}/x"}}],
    }
    with pytest.raises(ExperimentError) as info:
        plan(doc)
    (issue,) = info.value.issues
    assert issue.field == "method[0].provider.url"
    assert "--var base=" in issue.fix
    p = plan(doc, {"base": "http://127.0.0.1:1"})
    assert p.experiment.method[0].provider.url == "http://127.0.0.1:1/x"  # type: ignore[union-attr]


def test_configuration_env_and_types(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FP_TEST_PORT", "8123")
    doc = {
        "title": "t",
        "configuration": {
            "port": {"type": "env", "key": "FP_TEST_PORT", "env_var_type": "int"},
            "host": {"type": "env", "key": "FP_NOT_SET", "default": "127.0.0.1"},
        },
        "method": [
            {
                "type": "probe",
                "name": "p",
                "provider": {
                    "type": "python",
                    "module": "ctk_helpers",
                    "func": "value",
                    "arguments": {"v": "${port}"},
                },
            }
        ],
    }
    p = plan(doc)
    assert p.configuration == {"port": 8123, "host": "127.0.0.1"}
    assert p.experiment.method[0].provider.arguments == {"v": 8123}  # type: ignore[union-attr]
    doc["configuration"]["missing"] = {"type": "env", "key": "FP_MISSING_VAR"}
    with pytest.raises(ExperimentError, match="FP_MISSING_VAR is not set"):
        plan(doc)


def test_secrets_are_masked_everywhere() -> None:
    doc = {
        "title": "t",
        "secrets": {"db": {"password": "s3cr3t-value"}},
        "method": [
            {
                "type": "action",
                "name": "a",
                "provider": {"type": "process", "path": "/bin/echo", "arguments": "--password=${password}"},
            }
        ],
    }
    r = resolve(doc)
    assert r.document["method"][0]["provider"]["arguments"] == "--password=s3cr3t-value"
    masked = mask_secrets({"experiment": doc, "output": "connected with s3cr3t-value ok"}, r.secret_values)
    text = json.dumps(masked)
    assert "s3cr3t-value" not in text
    assert masked["experiment"]["secrets"]["db"]["password"] == "***"
    assert masked["output"] == "connected with *** ok"


def test_formats_are_detected_and_errors_located(tmp_path: os.PathLike[str]) -> None:
    doc = {"title": "round", "method": [PROBE]}
    for fmt in ("json", "yaml", "toon"):
        assert loads(dumps(doc, fmt)) == doc  # type: ignore[arg-type]
    bad = os.path.join(tmp_path, "bad.yaml")
    with open(bad, "w") as fh:
        fh.write("title: x\nmethod:\n  - type: [unclosed\n")
    with pytest.raises(ExperimentError) as info:
        load_document(bad)
    assert "bad.yaml:" in info.value.issues[0].field and "YAML" in info.value.issues[0].message
    with pytest.raises(ExperimentError, match="file not found"):
        load_document(os.path.join(tmp_path, "nope.json"))


# A file that exists but fails to read (here /proc/self/mem: a regular file whose first page is unmapped, EIO
# even for root) is a one-line error naming the file, for an experiment and for a var file alike, not a traceback.
@pytest.mark.parametrize(
    ("read", "field"),
    [
        (lambda p: load_document(p), "/proc/self/mem"),
        (lambda p: load_var_file(p), "--var-file /proc/self/mem"),
    ],
    ids=["experiment", "var-file"],
)
def test_a_file_that_cannot_be_read_is_one_issue_naming_it(read, field) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    with pytest.raises(ExperimentError) as info:
        read(Path("/proc/self/mem"))
    (issue,) = info.value.issues
    assert issue.field == field and issue.message.startswith("cannot read the file") and issue.fix


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=20),
)
_json = st.recursive(
    _scalars,
    lambda c: (
        st.lists(c, max_size=4)
        | st.dictionaries(
            st.text(st.characters(codec="utf-8", categories=("L", "N")), min_size=1, max_size=8),
            c,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.text(st.characters(categories=("L",)), min_size=1, max_size=8), _json, min_size=1, max_size=5
    )
)
def test_json_and_toon_round_trip(doc: dict) -> None:
    assert loads(dumps(doc, "json"), "json") == doc
    assert loads(dumps(doc, "toon"), "toon") == doc


# Windows editors save UTF-8 with a byte-order mark; JSON parsers refuse it, so it is dropped wherever a file is read
@pytest.mark.parametrize("fmt", ["json", "yaml", "toon"])
def test_files_saved_with_a_byte_order_mark_read_as_without(tmp_path: os.PathLike[str], fmt: str) -> None:
    from pathlib import Path

    from faultplane.plane.plan import load_plan

    doc = {"title": "bom", "method": [PROBE]}
    exp = Path(tmp_path) / f"exp.{fmt}"
    exp.write_text("\ufeff" + dumps(doc, fmt), encoding="utf-8")  # type: ignore[arg-type]
    assert load_document(exp) == doc
    var = Path(tmp_path) / f"vars.{'json' if fmt == 'toon' else fmt}"
    var.write_text("\ufeff" + dumps({"configuration": {"expected": 7}}, "json"), encoding="utf-8")
    assert load_var_file(var) == {"expected": 7}
    plan_file = Path(tmp_path) / f"plan.{fmt}"
    plan_file.write_text("\ufeff" + dumps({"seed": 3, "faults": []}, fmt), encoding="utf-8")  # type: ignore[arg-type]
    assert load_plan(plan_file).seed == 3


def test_an_env_var_file_with_a_byte_order_mark_keeps_its_first_name(tmp_path: os.PathLike[str]) -> None:
    from pathlib import Path

    env = Path(tmp_path) / "vars.env"
    env.write_text("\ufeffexpected=7\nlabel='x'\n", encoding="utf-8")
    assert dict(load_var_file(env)) == {"expected": "7", "label": "x"}


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("localhost:8080/health", "must start with http://"),
        ("http://[::1/x", "not a valid URL"),
        ("http://127.0.0.1:99999/", "not a valid URL"),
        ("http:///health", "names no host"),
        ("http://127.0.0.1:8080/a b", "spaces"),
    ],
)
def test_an_http_provider_url_no_request_can_reach_is_a_warning_naming_it(url: str, problem: str) -> None:
    """A warning, not a refusal: Chaos Toolkit runs such an experiment (the activity fails)."""
    http = {"type": "probe", "name": "h", "provider": {"type": "http", "url": "${base}"}}
    doc = {"title": "t", "description": "d", "configuration": {"base": url}, "method": [http]}
    report = validate_experiment(doc, with_policy=False)
    warned = [w for w in report.warnings if w.field == "method[0].provider.url"]
    assert len(warned) == 1 and problem in warned[0].message and url in warned[0].message, report.warnings
    doc["configuration"] = {"base": "http://127.0.0.1:8080/health"}
    assert not [w for w in validate_experiment(doc, with_policy=False).warnings if w.field.endswith(".url")]
