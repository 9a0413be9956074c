"""One spelling per concept, for every command (docs/cli.md, "Conventions"):

- `-o/--output PATH`: a file or folder the command writes;
- `-f/--format NAME`: the format of what it prints (or writes, when the file's suffix does not say);
- `--json`: JSON for programs, the same as `--format json`, on every command a program may read;
- `--store TARGET`: the evidence store a command reads or writes.

The spellings commands used before are rewritten by `faultplane.cli.legacy`, with a notice on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast

import typer
from typer.core import TyperCommand, TyperGroup

# Used inside `Annotated[Literal[...], FormatOpt]`: the Literal lists the choices, which typer both checks
# (exit 2 naming the option and the allowed values) and shows in --help as <text|json|...>.
FormatOpt = typer.Option("--format", "-f", help="what to print")
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for programs (= --format json)")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="no progress, only the result")]
StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="DuckDB file, clickhouse://user:pass@host:8123/db or chdb:///dir "
        "(default: $FAULTPLANE_STORE or the XDG data dir)",
    ),
]


F = TypeVar("F", bound=str)


def variables(var: list[str] | None, var_file: Path | None) -> dict[str, Any]:
    """The variables of `--var-file` (JSON, YAML or .env), then each `--var name=value`, which wins."""
    from faultplane.core.config import load_var_file, parse_var

    values: dict[str, Any] = load_var_file(var_file) if var_file else {}
    for item in var or []:
        k, v = parse_var(item)
        values[k] = v
    return values


def chosen(fmt: F, as_json: bool) -> F:
    """The format asked for: `--json` is `--format json` and wins over any other --format (every command
    with --json lists json among its formats)."""
    return cast(F, "json") if as_json else fmt


def _command_name(callback: Any) -> str:
    fn = getattr(callback, "__wrapped__", callback)
    return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__name__', '')}"


def _warn(line: str) -> None:
    sys.stderr.write(line + "\n")


class Command(TyperCommand):
    """A command that still accepts the option spellings it had before docs/cli.md's conventions."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        from faultplane.cli.legacy import rewrite

        return super().parse_args(ctx, rewrite(_command_name(self.callback), args, _warn))


class Group(TyperGroup):
    """A group whose own options (before the subcommand) had other spellings before docs/cli.md."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        from faultplane.cli.legacy import rewrite

        return super().parse_args(ctx, rewrite(_command_name(self.callback), args, _warn))
