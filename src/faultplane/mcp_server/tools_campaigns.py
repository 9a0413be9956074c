"""MCP tools for campaigns: GameDays, experiment design and boundary search. Each is a thin call into a
service (faultplane.services.gameday / design / search); errors become tool errors naming the field and the fix.

The lead's `build_server` calls `register(server, cfg)` so the tools share the server's store.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from faultplane.core.formats import ExperimentError, dumps
from faultplane.mcp_server.contracts import param
from faultplane.mcp_server.progress import watch

if TYPE_CHECKING:
    from faultplane.services.gameday_model import GameDayAnalysis

__all__ = ["register"]

T = TypeVar("T")
_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=True)


class GameDayOutput(BaseModel):
    gameday_id: str
    name: str
    score: float | None = Field(description="0-100; see docs/gamedays.md for the formula")
    grade: str
    components: dict[str, float | None]
    planned: int
    passed: int
    findings: list[str]
    compliance: dict[str, Any] | None
    toon: str = Field(description="the whole analysis, runs included, in TOON")


class DesignOutput(BaseModel):
    service: str
    experiments: list[dict[str, Any]] = Field(
        description="stage, title, action, parameters, experiment (YAML)"
    )
    held_back: list[dict[str, Any]] = Field(description="designs that need a human approval first")
    notes: list[str]


class SearchOutput(BaseModel):
    search_id: str
    status: str
    found_breach: bool
    objective: str
    best: dict[str, Any] | None
    boundary: dict[str, Any] | None
    trials: int
    message: str
    toon: str = Field(description="every trial in TOON")


def _issues(exc: ExperimentError) -> str:
    return "; ".join(f"{i.field}: {i.message} (fix: {i.fix})" for i in exc.issues)


def _store(cfg: Any) -> Any:
    if cfg is not None and hasattr(cfg, "store"):
        return cfg.store()
    from faultplane.core.store import open_store

    return open_store()


# The output is the analysis's headline fields, under their own names, and all of it (runs too) as TOON.
_GAMEDAY_HEADLINE = set(GameDayOutput.model_fields) - {"toon"}


def _gameday_out(a: GameDayAnalysis) -> GameDayOutput:
    return GameDayOutput(
        **a.model_dump(include=_GAMEDAY_HEADLINE), toon=dumps(a.model_dump(mode="json"), "toon")
    )


def _text_source(text: str) -> Any:
    """Inline YAML/JSON text, or a file path when it names one."""
    from pathlib import Path

    if "\n" not in text and Path(text).is_file():
        return Path(text)
    return text if "\n" in text else text + "\n"


def register(server: Any, cfg: Any = None) -> None:
    """Add chaos_gameday_run, chaos_gameday_analyze, chaos_design_experiment and chaos_search to `server`."""

    def run_campaign(
        ctx: Context | None, service: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any
    ) -> Awaitable[T]:
        """A campaign service (a GameDay, a search) run against the server's store, its events sent as progress;
        a cancelled request starts no further run and aborts the one under way, which rolls back (progress.watch)."""
        return watch(
            ctx,
            lambda listener: service(
                *args, store=_store(cfg), on_event=listener, stop=listener.stop_reason, **kwargs
            ),
        )

    @server.tool(annotations=_WRITE)
    async def chaos_gameday_run(
        gameday: Annotated[str, Field(description="a GameDay file path, or its YAML/JSON text")],
        variables: Annotated[
            dict[str, Any] | None, Field(description="values for every experiment's variables")
        ] = None,
        dry_run: Annotated[bool, Field(description="walk every run without touching the system")] = False,
        ctx: Context | None = None,
    ) -> GameDayOutput:
        """Run a GameDay: lanes of experiments (ordered or parallel) under one shared load, every run through
        the policy, gates and rollbacks; returns the score (pass rate, recovery, load impact, compliance)."""
        from faultplane.services.gameday import run_gameday

        try:
            analysis = await run_campaign(
                ctx, run_gameday, _text_source(gameday), variables=variables, dry_run=dry_run
            )
        except ExperimentError as exc:
            raise ToolError(_issues(exc)) from None
        return _gameday_out(analysis)

    @server.tool(annotations=_READ)
    async def chaos_gameday_analyze(
        gameday: Annotated[
            str | None, Field(description="GameDay id, id prefix or name; omit for the newest")
        ] = None,
    ) -> GameDayOutput:
        """Score a stored GameDay again: components, findings, compliance coverage from its runs."""
        from faultplane.services.gameday import analyze_gameday

        try:
            analysis = await anyio.to_thread.run_sync(analyze_gameday, gameday, _store(cfg))
        except LookupError as exc:
            raise ToolError(f"gameday: {exc}") from None
        return _gameday_out(analysis)

    @server.tool(annotations=_READ)
    async def chaos_design_experiment(
        service: Annotated[str, Field(description="service name, e.g. orders")],
        kind: Annotated[str, param("what the target is", enum=["http", "postgres", "redis", "process"])],
        url: Annotated[
            str | None, Field(description="http endpoint to measure, or redis://host:port/0")
        ] = None,
        dsn: Annotated[str | None, Field(description="postgres connection string")] = None,
        env: Annotated[str, Field(description="environment label; production is refused")] = "staging",
        slo: Annotated[
            dict[str, float] | None, Field(description="{error_rate: 0.01, latency_p99_ms: 800}")
        ] = None,
        fault_point: Annotated[str | None, Field(description="http: in-process fault point name")] = None,
        proxy: Annotated[
            dict[str, Any] | None, Field(description="http: {route, control_url?} of a netproxy route")
        ] = None,
        process: Annotated[
            dict[str, Any] | None, Field(description="{name | cmdline_pattern, restart_command?}")
        ] = None,
        options: Annotated[
            dict[str, Any] | None,
            Field(
                description="more design fields: health_url, table, key_pattern, hold_seconds, "
                "window_seconds, load, compliance"
            ),
        ] = None,
    ) -> DesignOutput:
        """Design a staged set of experiments from the driver catalog: escalating faults, SLO gates with a
        window, blast radius at the stage the policy allows, rollbacks. Deterministic; each passes the
        policy. Refine the configuration variables, then run with chaos_run_experiment (inline YAML)."""

        from faultplane.services.design import design_experiments

        request: dict[str, Any] = {"service": service, "kind": kind, "env": env, **(options or {})}
        for key, value in (
            ("url", url),
            ("dsn", dsn),
            ("slo", slo),
            ("fault_point", fault_point),
            ("proxy", proxy),
            ("process", process),
        ):
            if value is not None:
                request[key] = value
        try:
            result = await anyio.to_thread.run_sync(lambda: design_experiments(request, store=_store(cfg)))
        except ExperimentError as exc:
            raise ToolError(_issues(exc)) from None

        def row(d: Any) -> dict[str, Any]:
            return {
                "stage": d.stage,
                "title": d.title,
                "fault_type": d.fault_type,
                "action": d.action,
                "parameters": d.parameters,
                "blast_stage": d.blast_stage,
                "experiment_yaml": dumps(d.experiment, "yaml"),
            }

        return DesignOutput(
            service=result.service,
            experiments=[row(d) for d in result.experiments],
            held_back=[row(d) for d in result.held_back],
            notes=result.notes,
        )

    @server.tool(annotations=_WRITE)
    async def chaos_search(
        spec: Annotated[
            str,
            Field(
                description="search spec: a file path, a bundled spec name (search-payment) or YAML/JSON "
                "text with experiment, parameters {name: {type, low, high, severity}}, objective "
                "{source: gate|probe|load, name, bound}, budget, seed, sampler (nsga2|tpe|random). Runs "
                "under the server's policy; a spec naming its own `policy` is refused"
            ),
        ],
        variables: Annotated[dict[str, Any] | None, Field(description="fixed experiment variables")] = None,
        ctx: Context | None = None,
    ) -> SearchOutput:
        """Boundary search: run the experiment up to `budget` times with sampled fault parameters (optuna,
        seeded) and find the combination that takes the SLO just past its bound. Every trial is a real,
        policy-checked, gated run under the server's policy; the search and its trials are stored."""
        from faultplane.services.search import load_search_spec, run_search, with_overrides

        try:
            s = with_overrides(load_search_spec(spec), variables=variables)
            # the agent wrote the spec: it never chooses the policy its trials are checked against
            result = await run_campaign(ctx, run_search, s, allow_spec_policy=False)
        except ExperimentError as exc:
            raise ToolError(_issues(exc)) from None
        except ValueError as exc:  # a broken policy file in force: its message names the fix
            raise ToolError(f"policy: {exc}") from None
        return SearchOutput(
            search_id=result.search_id,
            status=result.status,
            found_breach=result.found_breach,
            objective=result.objective,
            best=result.best.model_dump() if result.best else None,
            boundary=result.boundary,
            trials=len(result.trials),
            message=result.message,
            toon=dumps([t.model_dump() for t in result.trials], "toon"),
        )
