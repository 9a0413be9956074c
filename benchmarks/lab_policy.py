"""The benchmarks' lab policy, installed where a person's own policy lives.

`--policy` and `$FAULTPLANE_POLICY` may only tighten the policy in force (core.policy.layers), so a benchmark
that relaxes gates for its throwaway experiments writes the user's policy in a private XDG_CONFIG_HOME and hands
that folder to the processes it starts."""

from __future__ import annotations

from pathlib import Path

RELAXED = "gates: {required: false}\n"


def lab_config_home(root: Path, text: str = RELAXED) -> str:
    """Write `text` as the user's policy under `root` and return the folder to use as XDG_CONFIG_HOME."""
    home = root / "xdg-config"
    (home / "faultplane").mkdir(parents=True, exist_ok=True)
    (home / "faultplane" / "policy.yaml").write_text(text, encoding="utf-8")
    return str(home)
