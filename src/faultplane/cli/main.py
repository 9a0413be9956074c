"""The `faultplane` command. Each area contributes its commands from its own module in this package.

Modules are loaded on demand: `faultplane run` imports the core commands only, and `faultplane --help` lists
every command from the table in faultplane.cli.commands without importing any of them (each costs imports,
and building every command's options costs ~30 ms more). tests/engine/test_cli_startup.py checks that the
table matches what the modules register.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, get_args

if sys.argv[1:] == [
    "guard",
    "hook",
]:  # runs before every agent shell command: skip typer and the CLI's imports
    from faultplane.hook.entry import main as _hook

    raise SystemExit(_hook())

import typer
from typer._click.utils import make_default_short_help
from typer.core import TyperGroup

from faultplane.cli.commands import ABOUT, COMMANDS


def load_module_commands(module: str) -> dict[str, Any]:
    """The click commands one module provides, by name (imports the module)."""
    sub = importlib.import_module(module)
    holder = typer.Typer(add_completion=False)
    if isinstance(getattr(sub, "app", None), typer.Typer):
        name = next(n for n, (m, _) in COMMANDS.items() if m == module)
        holder.add_typer(sub.app, name=name)
    else:
        sub.register(holder)
    # a callback keeps the holder a group even when it holds a single command
    holder.callback()(lambda: None)
    group = typer.main.get_group(holder)
    for cmd in group.commands.values():
        _plain_help(cmd)
    return dict(group.commands)


def _plain_help(cmd: Any) -> None:
    """One help style for every command: the root's plain one (see `app` below), and a repeatable option's
    value shown as one value (`--var <str>`, not `--var <list[str]>`): it is given once per occurrence."""
    cmd.rich_markup_mode = None
    for param in getattr(cmd, "params", []):
        desc = getattr(param, "type_descriptor", None)
        if param.metavar is None and desc is not None and desc.is_list and not desc.is_choice:
            inner = get_args(desc.annotation)
            name = getattr(inner[0], "__name__", "") if inner else ""
            if name:
                param.metavar = f"<{name.lower()}>"
    for sub in getattr(cmd, "commands", {}).values():
        _plain_help(sub)


class _LazyGroup(TyperGroup):
    """Commands load with their module the first time they are asked for."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [*COMMANDS, *(n for n in self.commands if n not in COMMANDS)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            for name, cmd in load_module_commands(COMMANDS[cmd_name][0]).items():
                self.commands.setdefault(name, cmd)
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return self._click_resolve_command(ctx, args)
        except typer._click.exceptions.UsageError as exc:
            import difflib

            matches = difflib.get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if matches:
                exc.message = (
                    exc.message.rstrip(".") + ". Did you mean " + ", ".join(map(repr, matches)) + "?"
                )
            raise

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, make_default_short_help(help_, limit)) for name, (_, help_) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    name="faultplane",
    cls=_LazyGroup,
    help=ABOUT,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help: rich's help renderer costs ~80 ms of imports on every `--help`, and the plain one
    # wraps to the terminal's width just as well
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        from faultplane import __version__

        typer.echo(f"faultplane {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", help="Print the version and exit.", callback=_version, is_eager=True
    ),
    debug: bool = typer.Option(
        False, "--debug", help="Show the traceback of an unexpected error (also FAULTPLANE_DEBUG=1)."
    ),
) -> None:
    # no docstring: it would replace the app's help (ABOUT), which faultplane.cli.commands renders too
    pass


# exit code of an error no command anticipated; 0-3 and 130 are the commands' own (README, "Exit codes")
INTERNAL_ERROR = 4


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "(no message)"
    if isinstance(exc, OSError) and exc.filename is not None and str(exc.filename) not in text:
        text += f": {exc.filename}"
    return f"{type(exc).__name__}: {text}"


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. An error no command handled is one line on stderr (exit 4); `--debug` anywhere on the
    command line, or FAULTPLANE_DEBUG=1, shows its traceback instead."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = os.environ.get("FAULTPLANE_DEBUG", "") not in ("", "0")
    if "--debug" in args:
        args = [a for a in args if a != "--debug"]
        debug = True
    try:
        app(args=args, prog_name="faultplane")
    except KeyboardInterrupt:
        sys.stderr.write("faultplane: interrupted\n")
        raise SystemExit(130) from None
    except Exception as exc:
        if debug:
            raise
        from faultplane.core.clickhouse_wire import StoreError

        if isinstance(exc, StoreError):
            # a store that cannot be reached or is misconfigured: one line naming it and what to check
            sys.stderr.write(f"error: {exc}\n")
            raise SystemExit(2) from None
        if type(exc).__name__ == "IOException" and "duckdb" in type(exc).__module__:
            # DuckDB could not open or write its file: a store that is no database, unreadable or full
            text = " ".join(str(exc).split())
            sys.stderr.write(
                f"error: store: {text}; fix: --store (or $FAULTPLANE_STORE) names a DuckDB file faultplane "
                "can read and write\n"
            )
            raise SystemExit(2) from None
        if isinstance(exc, OSError) and exc.filename is not None:
            # a path the user gave (-o/--output, an input file) that cannot be read or written: name it
            import errno

            fix = {
                errno.ENOENT: "its folder must exist",
                errno.EISDIR: "give a file name, not a folder",
                errno.ENOTDIR: "a part of the path is a file, not a folder",
                errno.EEXIST: "a part of the path is a file, not a folder",
                errno.EACCES: "choose a path this user may write",
                errno.EROFS: "choose a path on a writable file system",
                errno.ENOSPC: "free some space or choose another disk",
            }.get(exc.errno or 0, "check the path")
            sys.stderr.write(f"error: {exc.filename}: {exc.strerror or exc}; fix: {fix}\n")
            raise SystemExit(2) from None
        sys.stderr.write(
            f"faultplane: {_one_line(exc)}\n  run again with --debug for the traceback; if the cause is not "
            "yours, report it with that traceback\n"
        )
        raise SystemExit(INTERNAL_ERROR) from None


if __name__ == "__main__":
    main()
