"""A lab policy for tests, installed where a person's own policy lives.

`--policy` and `$FAULTPLANE_POLICY` only tighten what would be in force without them (core.policy.layers), so a
lab that relaxes gates or approval stages is the user's policy: `$XDG_CONFIG_HOME/faultplane/policy.yaml`
(the root conftest gives every test its own XDG_CONFIG_HOME; subprocesses inherit it)."""

from __future__ import annotations

import os
from pathlib import Path


def use_lab_policy(text: str, config_home: Path | None = None) -> Path:
    """Write `text` as the user's policy and return its path."""
    base = config_home or Path(os.environ["XDG_CONFIG_HOME"])
    folder = base / "faultplane"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    return path
