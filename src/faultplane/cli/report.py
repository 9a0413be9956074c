"""`faultplane report RUN_ID`: a self-contained HTML report of one run (timeline, gates, post-mortem);
`faultplane report exercise` / `report verify`: signed post-exercise reports and their verification."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from typer.core import TyperGroup

from faultplane.cli.options import FormatOpt, JsonOpt, StoreOpt, chosen
from faultplane.cli.term import Console

console = Console()
err_console = Console(stderr=True)


def _file_part(run_id: str) -> str:
    """The run id as part of a file name in the current folder: an imported journal's id is anyone's text, and
    `../../x` or `a/b` must not choose where the report is written."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", run_id).lstrip(".")[:80] or "run"


def report(
    run_id: Annotated[str, typer.Argument(help="the run's id (a unique prefix will do)")],
    store: StoreOpt = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="HTML file to write (default: report-RUN_ID.html)")
    ] = None,
    postmortem_only: Annotated[
        bool, typer.Option("--postmortem", help="print the post-mortem paragraph instead of writing HTML")
    ] = False,
) -> None:
    """Write an HTML report of a run: timeline (latency percentiles, error rate, fault window, gate thresholds),
    the post-mortem paragraph, gates, load figures and activities. Exit 2 when the run is unknown."""
    from faultplane.cli.stores import open_cli_store
    from faultplane.core.store import StoreBusyError
    from faultplane.reports.html import write_report
    from faultplane.reports.postmortem import postmortem
    from faultplane.services.runs import load_journal

    if store is not None and "://" not in store and not Path(store).is_file():
        err_console.print(
            f"[red]--store: {store} does not exist[/]; fix: pass the store file the runs were kept in"
        )
        raise typer.Exit(2)
    try:
        journal = load_journal(run_id, open_cli_store(store, read=True))
    except LookupError as exc:
        err_console.print(f"[red]{exc.args[0]}[/]")
        raise typer.Exit(2) from None
    except StoreBusyError as exc:
        err_console.print(f"[red]{exc}[/]; fix: retry when the running experiment has finished writing")
        raise typer.Exit(2) from None
    if postmortem_only:
        console.print(postmortem(journal), highlight=False, soft_wrap=True)
        return
    path = write_report(journal, output or Path(f"report-{_file_part(str(journal['run_id']))}.html"))
    console.print(f"report of run {journal['run_id']} ({journal.get('status')}): {path}")


def exercise(
    output: Annotated[Path, typer.Option("--output", "-o", help="a new folder for the report")],
    gameday: Annotated[str | None, typer.Option("--gameday", help="a GameDay id, id prefix or name")] = None,
    since: Annotated[str | None, typer.Option("--since", help="a period's start (ISO 8601, UTC)")] = None,
    until: Annotated[str | None, typer.Option("--until", help="the period's end (default: now)")] = None,
    title: Annotated[str, typer.Option("--title", help="the report's title")] = "Resilience exercise report",
    sign: Annotated[bool, typer.Option("--sign/--no-sign", help="sign with your approver key")] = True,
    key: Annotated[
        Path | None, typer.Option("--key", help="approver key (default: ~/.config/faultplane)")
    ] = None,
    store: StoreOpt = None,
) -> None:
    """A signed post-exercise report of a GameDay or a period: HTML, every cited journal, a manifest with a hash
    chain and an Ed25519 signature (ISO 22301, SOC 2 evidence)."""
    from datetime import UTC, datetime

    from faultplane.cli.stores import open_cli_store
    from faultplane.core.approval import ApprovalError, default_key_path, read_passphrase
    from faultplane.services.exercise_report import ReportError, build_report

    def when(text: str | None, name: str) -> datetime | None:
        if text is None:
            return None
        try:
            t = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ReportError(f"{name}: {text!r} is not a date; fix: ISO 8601, e.g. 2026-11-01") from None
        return t.replace(tzinfo=UTC) if t.tzinfo is None else t

    try:
        key_path = (key or default_key_path()) if sign else None
        passphrase = read_passphrase() if key_path is not None and key_path.is_file() else None
        if key_path is not None and passphrase is None:
            raise ReportError(
                f"--key: no approver key at {key_path}; fix: `faultplane approvals keygen`, or --no-sign"
            )
        manifest = build_report(
            open_cli_store(store, read=True),
            output,
            gameday=gameday,
            since=when(since, "--since"),
            until=when(until, "--until"),
            title=title,
            key_path=key_path,
            passphrase=passphrase,
        )
    except (ReportError, ApprovalError, LookupError) as exc:
        err_console.print(f"[red]{exc.args[0]}[/]", highlight=False)
        raise typer.Exit(2) from None
    signed = (
        f", signed by {manifest['signature']['public_key'].split()[-1]}" if "signature" in manifest else ""
    )
    console.print(
        f"wrote {output}: {len(manifest['journals'])} journals, chain {manifest['chain'][:16]}…{signed}",
        highlight=False,
    )


def verify(
    folder: Annotated[Path, typer.Argument(help="the report folder")],
    trusted_key: Annotated[
        list[str] | None, typer.Option("--trusted-key", help="an accepted signer (`ssh-ed25519 AAAA… name`)")
    ] = None,
    policy: Annotated[Path | None, typer.Option("--policy", help="trust the keys this policy lists")] = None,
    fmt: Annotated[Literal["text", "json"], FormatOpt] = "text",
    as_json: JsonOpt = False,
) -> None:
    """Check a report: every cited journal, the HTML, the hash chain and the signature. Exit 0 intact and
    signed by a trusted key, 1 something changed (named), 2 invalid input."""
    from faultplane.core.policy import PolicyError
    from faultplane.services.exercise_report import ReportError, verify_report

    fmt = chosen(fmt, as_json)
    trusted = list(trusted_key or [])
    try:
        if policy is not None:
            from faultplane.core.policy import load_policy

            trusted += list(load_policy(policy).approval.trusted_keys)
        v = verify_report(folder, trusted or None)
    except (ReportError, PolicyError) as exc:
        err_console.print(f"[red]{exc}[/]", highlight=False)
        raise typer.Exit(2) from None
    if fmt == "json":
        import json

        doc = {"ok": v.ok, "problems": v.problems, "signer": v.signer, "trusted": v.trusted}
        typer.echo(json.dumps({**doc, "journals": v.journals}, indent=2))
        raise typer.Exit(0 if v.ok else 1)
    for problem in v.problems:
        console.print(f"[red]✗[/] {problem}", highlight=False)
    if v.ok:
        who = f"signed by {v.signer}" + (
            "" if v.trusted else " (no trusted keys given: the signer is not vouched for)"
        )
        console.print(
            f"[green]✓ intact[/]: {v.journals} journals, the report and the chain match; {who}",
            highlight=False,
        )
    raise typer.Exit(0 if v.ok else 1)


class _ReportGroup(TyperGroup):
    """`faultplane report RUN_ID` stays the run report; `report exercise` and `report verify` are named."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=_ReportGroup,
    help="Reports: a run's HTML report (`report RUN_ID`), a signed post-exercise report, and its check.",
    no_args_is_help=True,
)
app.command("run")(report)
app.command("exercise")(exercise)
app.command("verify")(verify)
