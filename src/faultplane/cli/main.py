"""The `faultplane` command. Each area contributes a typer sub-app from its own module in this package."""

from __future__ import annotations

import importlib
import importlib.util
import sys

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
}
# modules that add top-level commands to `app` through a `register(app)` function.
_COMMAND_MODULES = (
    "faultplane.cli.core",
    "faultplane.cli.design",
    "faultplane.cli.search",
    "faultplane.cli.report",
    # a command, not a sub-app: mounted alone it would be the app's only command, which typer collapses into
    # the root (`faultplane load URL` would read `load` as the URL)
    "faultplane.cli.load",
)


# top-level commands of faultplane.cli.core: invoking one of these mounts that module alone
_CORE_COMMANDS = {"approve", "validate", "run", "schema", "abort", "demo", "journal", "runs", "experiments"}


def _wanted(argv: list[str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """Only the module behind the invoked command, so `faultplane run` does not import every other area's
    CLI and its dependencies at start-up; help, or anything not recognised here, mounts everything."""
    command = argv[1] if len(argv) > 1 else ""
    if command in _SUBAPPS:
        return {command: _SUBAPPS[command]}, ()
    if command in _CORE_COMMANDS:
        return {}, ("faultplane.cli.core",)
    return _SUBAPPS, _COMMAND_MODULES


def _mount(argv: list[str] | None = None) -> None:
    subapps, command_modules = _wanted(sys.argv if argv is None else argv)
    for name, module in subapps.items():
        if importlib.util.find_spec(module) is None:
            continue
        sub = importlib.import_module(module)
        if isinstance(getattr(sub, "app", None), typer.Typer):
            app.add_typer(sub.app, name=name)
        elif hasattr(sub, "register"):
            sub.register(app)
    for module in command_modules:
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module).register(app)


_mount()


def main() -> None:
    from faultplane.core.clickhouse_wire import ClickHouseStoreError

    try:
        app()
    except ClickHouseStoreError as exc:
        # a store that cannot be reached or is misconfigured: one line naming it and what to check
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
