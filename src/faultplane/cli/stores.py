"""Opening the store a command names, with store mistakes told in one line (exit 2) before any work starts.

A command that only reads (`runs list`, `journal show`, `analyze`, reports) refuses a `--store` file that
does not exist instead of creating an empty store there: a typo in the path would otherwise show "no runs"
and leave a stray database behind. The configured store ($FAULTPLANE_STORE, else the XDG data folder's) is
the user's standing choice, not a typo on this line: it is created when missing, so a first
`faultplane runs list` simply lists nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def open_cli_store(store: str | None, *, read: bool) -> Any:
    """The store for a command: `store` (its --store), else $FAULTPLANE_STORE, else the default file."""
    target = store if store is not None else os.environ.get("FAULTPLANE_STORE") or None
    where = "--store" if store is not None else "$FAULTPLANE_STORE"
    if target is not None and "://" not in str(target):
        path = Path(target).expanduser()
        if path.exists() and not path.is_file():
            _fail(f"store {path} is not a file; fix: {where} names a DuckDB file or a clickhouse:// URL")
        if not path.exists():
            if read and store is not None:
                _fail(
                    f"no store at {path}; fix: check {where} (a store is created by the first "
                    "`faultplane run` that records into it)"
                )
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                _fail(
                    f"cannot create the store {path}: {exc.strerror or exc}; fix: {where} in a writable folder"
                )
    from faultplane.core.store import open_store

    return open_store(target)
