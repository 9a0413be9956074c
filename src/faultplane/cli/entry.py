"""The `faultplane` console script. `--version` and the agent hook are answered before any framework loads;
everything else goes to the typer app in `faultplane.cli.main`."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:] == ["guard", "hook"]:  # runs before every agent shell command: no CLI imports at all
        from faultplane.hook.entry import main as hook

        raise SystemExit(hook())
    if sys.argv[1:] in (["--version"], ["-V"]):
        from faultplane import __version__

        sys.stdout.write(f"faultplane {__version__}\n")
        return
    from faultplane.cli.main import main as run

    run()
