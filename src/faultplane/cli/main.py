"""The `faultplane` command. Each area contributes a typer sub-app from its own module in this package."""

from __future__ import annotations

import importlib
import importlib.util

import typer

app = typer.Typer(
    name="faultplane",
    help="Chaos engineering with guardrails: run experiments, inject real faults, read the evidence.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# sub-command name -> module that defines `app` (a typer.Typer). Modules not present are skipped.
_SUBAPPS = {
    "plane": "faultplane.cli.plane",
    "mcp": "faultplane.cli.mcp",
    "guard": "faultplane.cli.guard",
    "drivers": "faultplane.cli.drivers",
    "analyze": "faultplane.cli.analyze",
    "gameday": "faultplane.cli.gameday",
    "compliance": "faultplane.cli.compliance",
    "load": "faultplane.cli.load",
}
# modules that add top-level commands to `app` through a `register(app)` function.
_COMMAND_MODULES = (
    "faultplane.cli.core",
    "faultplane.cli.design",
    "faultplane.cli.search",
    "faultplane.cli.report",
)


def _mount() -> None:
    for name, module in _SUBAPPS.items():
        if importlib.util.find_spec(module) is None:
            continue
        sub = importlib.import_module(module)
        if isinstance(getattr(sub, "app", None), typer.Typer):
            app.add_typer(sub.app, name=name)
        elif hasattr(sub, "register"):
            sub.register(app)
    for module in _COMMAND_MODULES:
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module).register(app)


_mount()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
