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

    from faultplane.core.errors import ExperimentError

__all__ = ["Console", "Table", "print_issues", "real_console", "timestamp"]


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


_TABLE: Any = None


def Table(*args: Any, **kwargs: Any) -> RichTable:
    """A rich table whose cells wrap, and fold words too long for their column, instead of cutting them
    short with an ellipsis: at 80 columns a run id or a path is still whole."""
    global _TABLE
    if _TABLE is None:
        from rich.table import Table as RichTable

        class _FoldingTable(RichTable):
            def add_column(self, *a: Any, **kw: Any) -> None:
                kw.setdefault("overflow", "fold")
                super().add_column(*a, **kw)

            def __rich_console__(self, console: Any, options: Any) -> Any:
                narrow = self.columns and self.row_count and self.show_header
                if narrow and self.__rich_measure__(console, options).minimum > options.max_width:
                    yield from _records(self)
                else:
                    yield from super().__rich_console__(console, options)

        _TABLE = _FoldingTable
    return cast("RichTable", _TABLE(*args, **kwargs))


def _records(table: Any) -> Any:
    """A table too wide for the terminal, as one record per row: `column  value` lines, words whole."""
    from rich.table import Table as RichTable
    from rich.text import Text

    if table.title:
        yield Text.from_markup(table.title) if isinstance(table.title, str) else table.title
    cells = [list(column.cells) for column in table.columns]
    for r in range(table.row_count):
        grid = RichTable.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        for column, values in zip(table.columns, cells, strict=False):
            grid.add_row(column.header, values[r] if r < len(values) else "")
        yield grid
        if r < table.row_count - 1:
            yield Text("")


def timestamp(value: Any) -> str:
    """Every time the CLI shows, one way: `2026-11-25 08:27:28Z` (UTC, to the second). Accepts datetimes
    (naive ones are UTC, as the store keeps them), ISO 8601 text and epoch seconds; anything else as given."""
    import datetime as dt

    if value is None or value == "":
        return ""
    when = value
    if isinstance(value, int | float) and not isinstance(value, bool):
        when = dt.datetime.fromtimestamp(value, dt.UTC)
    elif isinstance(value, str):
        try:
            when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    if not isinstance(when, dt.datetime):
        return str(value)
    when = when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%SZ")


def real_console(console: RichConsole) -> RichConsole:
    """The rich console behind a stand-in, for rich APIs that take a console (Live, Progress)."""
    return console.real() if isinstance(console, _LazyConsole) else console


def print_issues(exc: ExperimentError, what: str = "invalid input") -> None:
    """The problems of bad input on stderr: one line when there is one, else each with its field and fix."""
    err_console = Console(stderr=True)
    line = exc.one_line(what)
    if line is not None:
        from rich.markup import escape

        err_console.print(f"[bold red]{escape(line)}[/]", highlight=False)
        return
    err_console.print(f"[bold red]{what}[/] — {len(exc.issues)} problem(s):")
    for issue in exc.issues:
        err_console.print(f"  [red]✗[/] [bold]{issue.field}[/]: {issue.message}\n      fix: {issue.fix}")
