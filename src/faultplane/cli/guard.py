"""`faultplane guard`: the agent hook, approvals, policy checks. Logic lives in faultplane.services.guard."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from faultplane.cli.options import Command, FormatOpt, JsonOpt, StoreOpt, chosen, variables

app = typer.Typer(
    help="Guardrails: check an experiment against the policy, approve it, and gate a coding agent's tool calls.",
    no_args_is_help=True,
)
policy_app = typer.Typer(help="The guardrail policy in force.", no_args_is_help=True)
app.add_typer(policy_app, name="policy")

VarOpt = Annotated[list[str] | None, typer.Option("--var", help="name=value; overrides configuration")]
VarFileOpt = Annotated[Path | None, typer.Option("--var-file", help=".json/.yaml/.env file of variables")]
PolicyOpt = Annotated[
    Path | None,
    typer.Option("--policy", help="policy file (default: faultplane.policy.yaml, $FAULTPLANE_POLICY)"),
]
TextOrJson = Annotated[Literal["text", "json"], FormatOpt]


def _store(path: str | None) -> Any:
    from faultplane.core.store import open_store

    return open_store(path)


def _fail(message: str, code: int = 2) -> None:
    typer.echo(message, err=True)
    raise typer.Exit(code)


@app.command()
def hook() -> None:
    """PreToolUse hook for coding agents: reads the hook JSON on stdin; exit 2 (reason on stderr) blocks."""
    from faultplane.hook.entry import main

    code = main()
    if code:
        raise typer.Exit(code)


KeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--key",
        help="approver private key (default: $FAULTPLANE_APPROVER_KEY, ~/.config/faultplane/approver.key)",
    ),
]


@app.command(cls=Command)
def approve(
    experiment: Annotated[str, typer.Argument(help="experiment file (or listed name) to approve")],
    var: VarOpt = None,
    var_file: VarFileOpt = None,
    reason: Annotated[str, typer.Option("--reason", help="why this is acceptable")] = "",
    ttl_hours: Annotated[
        float | None, typer.Option("--ttl-hours", help="validity (default: the policy's approval.ttl_hours)")
    ] = None,
    key: KeyOpt = None,
    policy: PolicyOpt = None,
    store: StoreOpt = None,
    fmt: TextOrJson = "text",
    as_json: JsonOpt = False,
) -> None:
    """Sign an approval of exactly this version of an experiment with your approver key (passphrase asked on
    the terminal, or $FAULTPLANE_APPROVER_PASSPHRASE in CI). Any later change to it needs a new approval."""
    from faultplane.core.approval import ApprovalError
    from faultplane.core.formats import ExperimentError
    from faultplane.core.policy import PolicyError
    from faultplane.services.guard import approve_experiment, check_experiment

    output = chosen(fmt, as_json)
    try:
        values = variables(var, var_file)
        st = _store(store)
        granted = approve_experiment(
            experiment,
            variables=values,
            reason=reason,
            ttl_hours=ttl_hours,
            policy_path=policy,
            store=st,
            key_path=key,
        )
        decision = check_experiment(experiment, variables=values, policy_path=policy, store=st)
    except (ApprovalError, ExperimentError, PolicyError, LookupError, ValueError) as exc:
        _fail(f"cannot approve: {exc}")
        return
    if output == "json":
        typer.echo(json.dumps({**granted.to_dict(), "decision": decision.to_dict()}, indent=2))
        return
    typer.echo(
        f"approved {granted.family} (approval hash {granted.content_hash[:12]}…) by {granted.approver}"
    )
    typer.echo(f"token: {granted.token}")
    remaining = [v for v in decision.violations if v.rule != "approval.required"]
    if remaining:
        typer.echo("note: the policy still refuses this experiment for other reasons:")
        for v in remaining:
            typer.echo(f"  - [{v.rule}] {v.field}: {v.message}")


@app.command(cls=Command)
def check(
    experiment: Annotated[str, typer.Argument(help="experiment file (or listed name)")],
    var: VarOpt = None,
    var_file: VarFileOpt = None,
    policy: PolicyOpt = None,
    store: StoreOpt = None,
    approval: Annotated[str | None, typer.Option("--approval", envvar="FAULTPLANE_APPROVAL")] = None,
    fmt: TextOrJson = "text",
    as_json: JsonOpt = False,
) -> None:
    """Would the policy let this experiment run now? Exit 0 allowed, 3 refused, 2 unreadable."""
    from faultplane.core.formats import ExperimentError
    from faultplane.core.policy import PolicyError
    from faultplane.services.guard import check_experiment

    output = chosen(fmt, as_json)
    try:
        decision = check_experiment(
            experiment,
            variables=variables(var, var_file),
            policy_path=policy,
            store=_store(store),
            approval_token=approval,
        )
    except (ExperimentError, PolicyError, LookupError, ValueError) as exc:
        _fail(f"cannot check: {exc}")
        return
    if output == "json":
        typer.echo(json.dumps(decision.to_dict(), indent=2))
    else:
        typer.echo(decision.summary())
    if not decision.allowed:
        raise typer.Exit(3)


@policy_app.command("show", cls=Command)
def policy_show(
    policy: PolicyOpt = None,
    fmt: Annotated[Literal["yaml", "json"], FormatOpt] = "yaml",
    as_json: JsonOpt = False,
) -> None:
    """Print the policy in force and where it comes from."""
    import yaml

    from faultplane.core.policy import PolicyError
    from faultplane.services.guard import show_policy

    output = chosen(fmt, as_json)
    try:
        shown = show_policy(policy)
    except PolicyError as exc:
        _fail(str(exc))
        return
    if output == "json":
        typer.echo(json.dumps(shown, indent=2))
    else:
        typer.echo(f"# source: {shown.pop('source')}")
        typer.echo(yaml.safe_dump(shown, sort_keys=False).rstrip())
