"""The engine's modules after the split of lifecycle.py and load.py (issue #18): every name other code imported
from the old modules is still there and is the very object the new module defines, and the light modules stay
light (a command that only names ExperimentError pays for no pydantic)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

# (old module, name, module that now defines it)
MOVED = [
    ("faultplane.engine.lifecycle", "Plan", "faultplane.engine.plan"),
    ("faultplane.engine.lifecycle", "plan", "faultplane.engine.plan"),
    ("faultplane.engine.lifecycle", "checked_plan", "faultplane.engine.plan"),
    ("faultplane.engine.lifecycle", "content_hash", "faultplane.engine.plan"),
    ("faultplane.engine.lifecycle", "approval_hash", "faultplane.engine.admission"),
    ("faultplane.engine.lifecycle", "policy_document", "faultplane.engine.admission"),
    ("faultplane.engine.lifecycle", "evaluate_document", "faultplane.engine.admission"),
    ("faultplane.engine.lifecycle", "evaluate_plan", "faultplane.engine.admission"),
    ("faultplane.engine.lifecycle", "evaluate_policy", "faultplane.engine.admission"),
    ("faultplane.engine.lifecycle", "_targets_of", "faultplane.engine.admission"),
    ("faultplane.engine.lifecycle", "exit_code", "faultplane.engine.analyse"),
    ("faultplane.engine.lifecycle", "EXIT_CODES", "faultplane.engine.analyse"),
    ("faultplane.engine.lifecycle", "EXIT_ROLLBACK_FAILED", "faultplane.engine.analyse"),
    ("faultplane.engine.lifecycle", "abort_run", "faultplane.engine.runner"),
    ("faultplane.engine.lifecycle", "active_runs", "faultplane.engine.runner"),
    ("faultplane.engine.load", "LoadGenerator", "faultplane.engine.load_generator"),
    ("faultplane.engine.load", "default_workers", "faultplane.engine.load_generator"),
    ("faultplane.engine.load", "LoadSpec", "faultplane.engine.load_spec"),
    ("faultplane.engine.load", "parse_load_spec", "faultplane.engine.load_spec"),
    ("faultplane.engine.load", "percentile", "faultplane.engine.load_hdr"),
    ("faultplane.engine.load", "_Hdr", "faultplane.engine.load_hdr"),
    ("faultplane.engine.load", "_buckets_us", "faultplane.engine.load_hdr"),
    ("faultplane.core.formats", "ValidationIssue", "faultplane.core.issues"),
]


@pytest.mark.parametrize(("old", "name", "new"), MOVED)
def test_a_moved_name_is_the_same_object_at_its_old_path(old: str, name: str, new: str) -> None:
    assert getattr(importlib.import_module(old), name) is getattr(importlib.import_module(new), name)


@pytest.mark.parametrize("module", ["faultplane.engine.lifecycle", "faultplane.engine.load"])
def test_every_exported_name_resolves(module: str) -> None:
    mod = importlib.import_module(module)
    missing = [n for n in mod.__all__ if not hasattr(mod, n)]
    assert not missing


def test_the_runner_has_every_phase() -> None:
    from faultplane.engine.lifecycle import _Runner

    for phase in ("baseline", "inject", "recover", "analyse"):
        assert callable(getattr(_Runner, phase)), phase


def test_naming_the_input_error_loads_neither_formats_nor_pydantic() -> None:
    code = (
        "import sys, faultplane.core.errors\n"
        "print(sorted(m for m in ('faultplane.core.formats', 'pydantic', 'yaml') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
