"""Rich consoles and tables for the commands, created on first use.

Every command module is imported to build `faultplane --help`; importing rich there would cost every
invocation ~20 ms for output most commands never print. These stand-ins import rich when a command first
prints or builds a table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from rich.console import Console as RichConsole
    from rich.table import Table as RichTable

__all__ = ["Console", "Table", "real_console"]


class _LazyConsole:
    def __init__(self, kwargs: dict[str, Any]) -> None:
        self._kwargs = kwargs
        self._console: RichConsole | None = None

    def real(self) -> RichConsole:
        console = self._console
        if console is None:
            from rich.console import Console as RichConsole

            console = self._console = RichConsole(**self._kwargs)
        return console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real(), name)


def Console(**kwargs: Any) -> RichConsole:
    """A `rich.console.Console(**kwargs)` made when first used. On stderr, lines are not broken at the
    terminal's width: an error stays one line, whole for a reader, grep and a log."""
    if kwargs.get("stderr"):
        kwargs.setdefault("soft_wrap", True)
    return cast("RichConsole", _LazyConsole(kwargs))


def Table(*args: Any, **kwargs: Any) -> RichTable:
    from rich.table import Table as RichTable

    return RichTable(*args, **kwargs)


def real_console(console: RichConsole) -> RichConsole:
    """The rich console behind a stand-in, for rich APIs that take a console (Live, Progress)."""
    return console.real() if isinstance(console, _LazyConsole) else console
