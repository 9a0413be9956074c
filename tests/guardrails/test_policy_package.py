"""The policy package keeps its old import paths and imports none of them itself.

`faultplane.core.policy` was one module, and `core.policy_layers` and `core.inventory` sat beside it in an
import circle; now the package's modules import one another only, and the two old modules re-export them.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import faultplane.core.policy as policy

# every name other code imported from the old paths, with the module that now defines it
OLD_PATHS = {
    "faultplane.core.policy_layers": {
        "SIGNATURE_SUFFIX": "layers",
        "also_from": "layers",
        "combine": "combine",
        "loosening_approved": "layers",
        "policy_file_hash": "layers",
        "policy_in_force": "layers",
        "project_policy_files": "layers",
        "signature_path": "layers",
        "user_policy_path": "layers",
    },
    "faultplane.core.inventory": {
        "Inventory": "inventory",
        "combine_inventories": "inventory",
        "host_declared": "inventory",
        "undeclared": "inventory",
    },
}


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_old_modules_hand_on_the_package_objects(old: str) -> None:
    module = importlib.import_module(old)
    # an alias re-exports its new homes whole, so it may hand on more than the names old code imported
    assert set(OLD_PATHS[old]) <= set(module.__all__)
    for name, home in OLD_PATHS[old].items():
        new = importlib.import_module(f"faultplane.core.policy.{home}")
        assert getattr(module, name) is getattr(new, name), name


def test_the_package_face_names_what_its_modules_define() -> None:
    for name in policy.__all__:
        value = getattr(policy, name)
        home = getattr(value, "__module__", None)
        if home is not None and isinstance(home, str) and home.startswith("faultplane."):
            assert home.startswith("faultplane.core.policy."), (name, home)
    # the decision point and the model are the same objects wherever they are imported from
    from faultplane.core.policy.decide import evaluate
    from faultplane.core.policy.model import Policy

    assert policy.evaluate is evaluate and policy.Policy is Policy


def test_the_package_does_not_load_its_old_paths() -> None:
    """Loading the policy loads neither alias: nothing inside the package leans on them (no circle back)."""
    probe = (
        "import json, sys; import faultplane.core.policy; "
        "print(json.dumps(sorted(m for m in ('faultplane.core.inventory', 'faultplane.core.policy_layers') "
        "if m in sys.modules)))"
    )
    res = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1]) == []
