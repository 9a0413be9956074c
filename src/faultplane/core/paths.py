"""Where Faultplane keeps its files on this machine: its own folder in each XDG base directory (configuration,
data, state), with the XDG defaults when the variable is unset or empty, and the files a `$FAULTPLANE_*`
variable may name instead. Read from the environment at each call, so a test or a shell can move them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

__all__ = ["BaseDir", "faultplane_dir", "file_from_env"]

BaseDir = Literal["config", "data", "state"]

# each XDG base directory: its variable and its default below the home folder
_XDG: dict[str, tuple[str, tuple[str, ...]]] = {
    "config": ("XDG_CONFIG_HOME", (".config",)),
    "data": ("XDG_DATA_HOME", (".local", "share")),
    "state": ("XDG_STATE_HOME", (".local", "state")),
}


def faultplane_dir(kind: BaseDir) -> Path:
    """Faultplane's folder in the XDG base directory `kind` (e.g. `~/.local/state/faultplane`)."""
    variable, default = _XDG[kind]
    return Path(os.environ.get(variable) or Path.home().joinpath(*default)) / "faultplane"


def file_from_env(variable: str, kind: BaseDir, name: str) -> Path:
    """The file `$variable` names (`~` expanded), else `name` in Faultplane's folder of `kind`."""
    value = os.environ.get(variable)
    return Path(value).expanduser() if value else faultplane_dir(kind) / name
