"""The `faultplane` console script. `--version`, the root `--help` and the agent hook are answered before any
framework loads; everything else goes to the typer app in `faultplane.cli.main`."""

from __future__ import annotations

import sys


def _fits_root_help() -> bool:
    """click draws help at most 78 columns wide: in any terminal at least 80 wide (or none) the text is fixed.
    The width as `shutil.get_terminal_size` finds it ($COLUMNS, else the terminal, else 80), without its
    ~10 ms of imports (re, fnmatch, compression modules)."""
    import os

    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns if sys.__stdout__ else 0
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns <= 0 or columns >= 80


def main() -> None:
    args = sys.argv[1:]
    if args == ["guard", "hook"]:  # runs before every agent shell command: no CLI imports at all
        from faultplane.hook.entry import main as hook

        raise SystemExit(hook())
    if args in (["--version"], ["-V"]):
        from faultplane import __version__

        sys.stdout.write(f"faultplane {__version__}\n")
        return
    if args in ([], ["--help"]) and _fits_root_help():
        from faultplane.cli.commands import root_help

        # as click does: help asked for on stdout (exit 0); a bare `faultplane` is a usage error (exit 2)
        (sys.stdout if args else sys.stderr).write(root_help())
        raise SystemExit(0 if args else 2)
    from faultplane.cli.main import main as run

    run()
