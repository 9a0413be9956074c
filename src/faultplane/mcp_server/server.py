"""The Faultplane MCP server: every capability as a tool, each a thin call into a service function.

No logic lives here: a tool validates nothing the service does not, turns the service's result into the tool's
structured output and the service's errors into MCP tool errors (`isError`) whose text names the field and
the fix. Blocking services (DuckDB, the registry file) run in worker threads so one slow query does not stall
other requests.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from faultplane import __version__
from faultplane.core.faults import FAULT_TYPES, FaultRegistry, FaultSpecError, UnknownFaultError
from faultplane.mcp_server.access import AccessCheck, AccessPolicy
from faultplane.mcp_server.approval import ApprovalBroker
from faultplane.mcp_server.arguments import ArgumentCheck
from faultplane.mcp_server.contracts import close_input_schemas, param
from faultplane.mcp_server.progress import watch
from faultplane.mcp_server.readcache import MISS, StoreReadCache
from faultplane.services.analytics import DEFAULT_ROW_LIMIT, QueryError, QueryResult, analyze
from faultplane.services.discover import DiscoverResult, discover
from faultplane.services.experiment_info import ExperimentInfo
from faultplane.services.faults import (
    FaultResult,
    FaultSummary,
    list_faults,
    manage_fault,
    record_refused_call,
)

__all__ = ["ServerConfig", "build_server"]

INSTRUCTIONS = """\
Faultplane runs chaos experiments and injects real faults. Typical flow: chaos_discover (what drivers can do),
chaos_list_experiments, chaos_validate_experiment, chaos_run_experiment (dry_run first), chaos_get_journal,
chaos_status. chaos_inject_fault registers named faults that Python services see at
faultplane.fault_point("<name>"). chaos_analyze runs read-only SQL over the store (tables runs, activities,
journals, audit). chaos_abort stops running experiments and rolls them back."""


@dataclass
class ServerConfig:
    """How one server process runs: where its state lives and the seed of its fault rolls."""

    seed: int | None = None
    store_path: str | Path | None = None
    registry_path: Path | None = None
    actor: str = "mcp"
    # The text block of each result: TOON is compact for agents; structuredContent is always JSON.
    text_format: Literal["toon", "json"] = "toon"
    rng: random.Random = field(init=False)
    # asks a person (elicitation) when a call needs an approval nobody signed yet
    approvals: ApprovalBroker = field(init=False, default_factory=ApprovalBroker)
    # What the agent may call (see access): --read-only and --allow-tool.
    access: AccessPolicy = field(default_factory=AccessPolicy)
    # Read-tool answers reused while the store is unchanged (see readcache).
    reads: StoreReadCache = field(init=False, default_factory=StoreReadCache)

    def __post_init__(self) -> None:
        # Every inject draws its own seed from this generator and records it in the audit log, so a session
        # started with the same --seed rolls the same outcomes, and any single roll can be replayed.
        if self.seed is None:
            self.seed = secrets.randbits(63)
        self.rng = random.Random(self.seed)
        self.approvals.store = self.store  # a person's answers to approval questions are audited

    def store(self) -> Any:
        from faultplane.core.store import open_store

        return open_store(self.store_path)

    def registry(self) -> FaultRegistry:
        return FaultRegistry(self.registry_path)

    def render(self, model: BaseModel) -> CallToolResult:
        """A tool result: the model as structured content, and as TOON (or JSON) text for the model."""
        from faultplane.core.formats import dumps

        data = model.model_dump(mode="json")
        return CallToolResult(
            content=[TextContent(type="text", text=dumps(data, self.text_format))],
            structured_content=data,
        )


# ---- structured outputs -------------------------------------------------------------------------------------


class InjectFaultOutput(FaultResult):
    # The service's result, published under the name chaos_inject_fault's output schema has always had.
    pass


class RunExperimentOutput(BaseModel):
    experiment_name: str
    run_id: str
    status: str = Field(description="completed|failed|deviated|aborted|interrupted|refused")
    success: bool
    steady_state_before: bool | None
    steady_state_after: bool | None
    duration_seconds: float
    error: str | None = Field(description="rollback failures are appended after '; '")
    started_at: str = Field(description="ISO 8601")
    exit_code: int
    verdict: str | None = None
    dry_run: bool
    journal_toon: str = Field(description="compact TOON journal; chaos_get_journal has the full one")


class ActiveFaultOut(FaultSummary):
    # The service's summary, published under the name chaos_status' output schema has always had.
    pass


class StatusOutput(BaseModel):
    active_faults: list[ActiveFaultOut]
    registered_experiments: int = Field(description="how many experiments are registered")
    experiment_names: list[str] = Field(description="their names, for experiment_name arguments")
    results: list[dict[str, Any]] | None = Field(default=None, description="recent runs (include_results)")
    total_runs: int
    success_rate: float | None = Field(description="share of finished, non-dry runs that succeeded")


class ValidationIssueOut(BaseModel):
    field: str
    message: str
    fix: str


class ValidateOutput(BaseModel):
    valid: bool
    title: str | None = None
    errors: list[ValidationIssueOut]
    warnings: list[ValidationIssueOut] = []  # keys ignored, unloadable controls: the run goes on


class ExperimentOut(ExperimentInfo):
    # The service's listing entry, published under the name chaos_list_experiments' schema has always had.
    pass


class ListExperimentsOutput(BaseModel):
    experiments: list[ExperimentOut]


class JournalOutput(BaseModel):
    run_id: str
    format: Literal["json", "toon"]
    journal: str


class AbortOutput(BaseModel):
    aborted: list[str] = Field(
        description="run ids told to stop; each rolls back, then ends with status interrupted"
    )


# ---- helpers --------------------------------------------------------------------------------------------


def _jsonable_row(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        out[k] = v.isoformat() if isinstance(v, datetime) else v
    return out


def _source(experiment_name: str | None, experiment: str | dict[str, Any] | None) -> tuple[str, Any]:
    """(display name, source for the services) from exactly one of the two arguments.

    `experiment` may be an object, JSON/YAML/TOON text, or the path of an experiment file."""
    if bool(experiment_name) == bool(experiment):
        raise ToolError(
            "experiment_name / experiment: pass exactly one; fix: give experiment_name (see "
            "chaos_list_experiments) or experiment (an object, the YAML, JSON or TOON text of an experiment, "
            "or the path of an experiment file)"
        )
    if experiment_name:
        from faultplane.services.experiments import find_experiment

        try:
            return experiment_name, find_experiment(experiment_name)
        except LookupError as exc:
            raise ToolError(f"experiment_name: {exc}; fix: use one of the listed names") from None
    if isinstance(experiment, dict):
        return "", experiment
    text = str(experiment).strip()
    if "\n" not in text and Path(text).suffix.lower() in _EXPERIMENT_SUFFIXES and not text.startswith("{"):
        path = Path(text).expanduser()
        if not path.is_file():
            raise ToolError(
                f"experiment: no experiment file at {text}; fix: pass an existing .yaml/.json/.toon path"
            )
        return "", path
    # A one-line document would be taken for an experiment name or a path by the loader.
    return "", text + "\n"


_EXPERIMENT_SUFFIXES = (".yaml", ".yml", ".json", ".toon")

# Running and validating take an experiment in the same forms (`_source`), so they describe it alike.
_InlineExperiment = Annotated[
    str | dict[str, Any] | None,
    Field(description="or an inline experiment (an object, or YAML, JSON or TOON text), or a file path"),
]


def _analyze_cached(cfg: ServerConfig, sql: str, limit: int) -> QueryResult:
    store = cfg.store()
    return cfg.reads.get(store, ("analyze", sql, limit), lambda: analyze(sql, store=store, limit=limit))


def _issues_text(issues: list[Any]) -> str:
    return "; ".join(f"{i.field}: {i.message} (fix: {i.fix})" for i in issues)


def _fault_error(fault_name: str, exc: Exception) -> CallToolResult:
    out = InjectFaultOutput(status="error", fault_name=fault_name, error=str(exc))
    return CallToolResult(
        content=[TextContent(type="text", text=str(exc))],
        structured_content=out.model_dump(mode="json"),
        is_error=True,
    )


_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=True)


def build_server(config: ServerConfig | None = None) -> MCPServer:
    """A server with every Faultplane tool, sharing `config` (seed, store, registry)."""
    cfg = config or ServerConfig()
    server = MCPServer("faultplane", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool(annotations=_WRITE)
    async def chaos_inject_fault(
        fault_name: Annotated[
            str,
            param(
                "name of the fault; fault points of this name apply it",
                minLength=1,
                maxLength=200,
                examples=["slow-database"],
            ),
        ],
        action: Annotated[
            str,
            param(
                "register (add or overwrite), inject (roll once; arm one occurrence), remove",
                enum=["register", "inject", "remove"],
            ),
        ],
        fault_type: Annotated[str | None, param("required for register", enum=[*FAULT_TYPES, None])] = None,
        probability: Annotated[
            float,
            param(
                "chance (0.0-1.0) that a call through the fault point triggers it", minimum=0.0, maximum=1.0
            ),
        ] = 0.1,
        duration_seconds: Annotated[
            float | None,
            param("latency/timeout: how long (default 1 s)", minimum=0.0, maximum=3600.0, examples=[0.5]),
        ] = None,
        error_message: Annotated[str | None, Field(description="error/timeout: the raised message")] = None,
        ctx: Context | None = None,
    ) -> Annotated[CallToolResult, InjectFaultOutput]:
        """Register, inject or remove a named fault. A registered fault takes effect at in-process fault
        points of the same name (`faultplane.fault_point(name)`), triggering per call with its probability;
        inject rolls the probability once (seeded) and, when triggered, fails the next call through the point.
        register overwrites; remove is idempotent. Every call is written to the audit log."""
        fault_token: str | None = None
        if ctx is not None and action in ("register", "inject"):
            spec = {"fault_name": fault_name, "action": action, "fault_type": fault_type}
            asked = await cfg.approvals.for_fault(
                ctx,
                {**spec, "probability": probability, "duration_seconds": duration_seconds},
                cfg.registry(),
            )
            if isinstance(asked, InputRequiredResult):
                return asked  # type: ignore[return-value]  # the 2026-07-28 round trip: the client retries
            fault_token = asked
        call_seed = cfg.rng.getrandbits(63) if action == "inject" else None

        def work() -> Any:
            return manage_fault(
                fault_name,
                action,
                fault_type=fault_type,
                probability=probability,
                duration_seconds=duration_seconds,
                error_message=error_message,
                seed=call_seed,
                actor=cfg.actor,
                registry=cfg.registry(),
                store=cfg.store(),
                approval_token=fault_token,
            )

        try:
            with cfg.approvals.trust(fault_token):  # the service verifies the person's answer itself
                result = await anyio.to_thread.run_sync(work)
        except (FaultSpecError, UnknownFaultError) as exc:
            return _fault_error(fault_name, exc)
        return cfg.render(InjectFaultOutput(**result.model_dump()))

    @server.tool(annotations=_WRITE)
    async def chaos_run_experiment(
        experiment_name: Annotated[
            str | None, Field(description="a listed experiment (chaos_list_experiments)")
        ] = None,
        experiment: _InlineExperiment = None,
        dry_run: Annotated[bool, Field(description="walk every phase without touching the system")] = False,
        variables: Annotated[
            dict[str, Any] | None, Field(description="values for the experiment's configuration variables")
        ] = None,
        ctx: Context | None = None,
    ) -> Annotated[CallToolResult, RunExperimentOutput]:
        """Run an experiment through plan, baseline, inject, recover and analyse; rollbacks always run.
        Returns the outcome, the run id and a compact TOON journal."""
        from faultplane.core.formats import ExperimentError
        from faultplane.services.experiments import journal_toon, run_experiment

        name, source = _source(experiment_name, experiment)
        store = cfg.store()
        token = None
        if ctx is not None and not dry_run:  # a person approves through the client (mcp_server/approval.py)
            asked = await cfg.approvals.for_run(ctx, source, variables, store)
            if isinstance(asked, InputRequiredResult):
                return asked  # type: ignore[return-value]  # the 2026-07-28 round trip: the client retries
            token = asked
        try:
            with cfg.approvals.trust(token):
                result = await watch(
                    ctx,
                    lambda on_event: run_experiment(
                        source,
                        dry_run=dry_run,
                        variables=variables,
                        store=store,
                        approval_token=token,
                        on_event=on_event,
                    ),
                )
        except ExperimentError as exc:
            raise ToolError(_issues_text(exc.issues)) from None
        except ValueError as exc:  # policy/approval configuration problems: their messages name the fix
            raise ToolError(str(exc)) from None
        try:
            toon = await anyio.to_thread.run_sync(journal_toon, result.run_id, store)
        except LookupError:
            toon = ""
        return cfg.render(
            RunExperimentOutput(
                experiment_name=name or result.experiment_title,
                run_id=result.run_id,
                status=result.status,
                success=result.success,
                steady_state_before=result.steady_state_before,
                steady_state_after=result.steady_state_after,
                duration_seconds=result.duration_seconds,
                error=result.error,
                started_at=result.started_at.isoformat(),
                exit_code=result.exit_code,
                verdict=result.verdict,
                dry_run=dry_run,
                journal_toon=toon,
            )
        )

    @server.tool(annotations=_READ)
    async def chaos_status(
        include_results: Annotated[bool, Field(description="also return recent runs")] = False,
        experiment_name: Annotated[
            str | None, Field(description="only runs of this experiment (name or title)")
        ] = None,
    ) -> Annotated[CallToolResult, StatusOutput]:
        """Active faults, registered experiments, run count and success rate (and recent runs if asked)."""
        from faultplane.services.experiments import list_experiments
        from faultplane.services.runs import list_runs, run_stats

        def work(cached_only: bool = False) -> StatusOutput | None:
            experiments = list_experiments()
            title = experiment_name
            for info in experiments:
                if experiment_name and info.name == experiment_name and info.title:
                    title = info.title
            store = cfg.store()
            if cached_only:
                # In the event loop: only when the store's answers are cached (no database open here).
                stats = cfg.reads.peek(store, ("run_stats", title))
                rows = cfg.reads.peek(store, ("list_runs", title)) if include_results else None
                if stats is MISS or rows is MISS:
                    return None
            else:
                stats = cfg.reads.get(store, ("run_stats", title), lambda: run_stats(store, experiment=title))
                rows = None
                if include_results:
                    rows = cfg.reads.get(
                        store, ("list_runs", title), lambda: list_runs(store, experiment=title)
                    )
            results = None
            if rows is not None:
                results = [_jsonable_row(r) for r in rows]
            return StatusOutput(
                active_faults=[
                    ActiveFaultOut(**f.model_dump(exclude={"error_message"}))
                    for f in list_faults(cfg.registry())
                ],
                registered_experiments=len(experiments),
                experiment_names=[i.name for i in experiments],
                results=results,
                total_runs=int(stats["total_runs"]),
                success_rate=stats["success_rate"],
            )

        # A worker thread costs more than the whole answer when it is cached, so try that first.
        out = work(cached_only=True) or await anyio.to_thread.run_sync(work)
        assert out is not None
        return cfg.render(out)

    @server.tool(annotations=_READ)
    async def chaos_discover(
        driver: Annotated[str | None, Field(description="only this driver")] = None,
    ) -> Annotated[CallToolResult, DiscoverResult]:
        """Drivers with their actions and probes, each with the JSON schema of its arguments."""
        try:
            return cfg.render(await anyio.to_thread.run_sync(discover, driver))
        except LookupError as exc:
            raise ToolError(str(exc)) from None

    @server.tool(annotations=_READ)
    async def chaos_validate_experiment(
        experiment_name: Annotated[str | None, Field(description="a listed experiment")] = None,
        experiment: _InlineExperiment = None,
        ctk_compat: Annotated[
            bool, Field(description="check as Chaos Toolkit would (docs/chaostoolkit.md)")
        ] = False,
    ) -> Annotated[CallToolResult, ValidateOutput]:
        """Check everything a run checks before it executes anything (structure, values, provider modules and
        signatures, drivers and their arguments, the policy) without running anything."""
        from faultplane.services.experiments import validate_experiment

        _, source = _source(experiment_name, experiment)
        try:
            report = await anyio.to_thread.run_sync(
                lambda: validate_experiment(source, ctk_compat=ctk_compat or None)
            )
        except ValueError as exc:  # a broken policy file: its message names the fix
            raise ToolError(str(exc)) from None
        return cfg.render(
            ValidateOutput(
                valid=report.valid,
                title=report.title,
                errors=[
                    ValidationIssueOut(field=e.field, message=e.message, fix=e.fix) for e in report.errors
                ],
                warnings=[
                    ValidationIssueOut(field=w.field, message=w.message, fix=w.fix) for w in report.warnings
                ],
            )
        )

    @server.tool(annotations=_READ)
    async def chaos_list_experiments() -> Annotated[CallToolResult, ListExperimentsOutput]:
        """Experiments found in $FAULTPLANE_EXPERIMENTS, ./experiments and the bundled examples."""
        from faultplane.services.experiments import list_experiments

        infos = await anyio.to_thread.run_sync(list_experiments)
        return cfg.render(ListExperimentsOutput(experiments=[ExperimentOut(**i.model_dump()) for i in infos]))

    @server.tool(annotations=_READ)
    async def chaos_get_journal(
        run_id: Annotated[str, param("the run id (a unique prefix is enough)", examples=["3f2c9a1e"])],
        format: Annotated[str, param("json (full) or toon (compact)", enum=["json", "toon"])] = "json",
    ) -> Annotated[CallToolResult, JournalOutput]:
        """The journal of one run: phases, every activity with output and error, gates, verdict."""
        from faultplane.services.runs import get_journal

        if format not in ("json", "toon"):
            raise ToolError(f"format: {format!r} is not a journal format; fix: use json or toon")
        try:
            fmt: Literal["json", "toon"] = "toon" if format == "toon" else "json"
            store = cfg.store()
            text = await anyio.to_thread.run_sync(
                lambda: cfg.reads.get(
                    store, ("journal", run_id, fmt), lambda: get_journal(run_id, fmt, store)
                )
            )
        except LookupError as exc:
            raise ToolError(f"run_id: {exc}") from None
        # The text block is the journal itself, so TOON arrives as TOON, not as a string quoted inside TOON.
        out = JournalOutput(run_id=run_id, format=fmt, journal=text)
        return CallToolResult(
            content=[TextContent(type="text", text=text)], structured_content=out.model_dump(mode="json")
        )

    @server.tool(annotations=_READ)
    async def chaos_analyze(
        sql: Annotated[
            str,
            param(
                "SQL over tables runs, activities, journals, audit",
                examples=["SELECT status, count(*) FROM runs GROUP BY status"],
            ),
        ],
        limit: Annotated[int, param("maximum rows returned", minimum=1, maximum=10000)] = DEFAULT_ROW_LIMIT,
    ) -> Annotated[CallToolResult, QueryResult]:
        """Read-only SQL over the evidence store. The database is opened read-only with file access
        disabled, so writes, COPY, ATTACH and file reads fail."""
        try:
            return cfg.render(await anyio.to_thread.run_sync(lambda: _analyze_cached(cfg, sql, limit)))
        except QueryError as exc:
            raise ToolError(str(exc)) from None

    @server.tool(annotations=_WRITE)
    async def chaos_abort(
        run_id: Annotated[
            str | None, Field(description="the run to stop; omit to stop every running one")
        ] = None,
    ) -> Annotated[CallToolResult, AbortOutput]:
        """Stop running experiments. Each one rolls back, then ends with status "interrupted" (exit code 130)
        and an error starting "interrupted: aborted by request"; status "aborted" is kept for SLO gates."""
        from faultplane.services.runs import abort_runs

        # In the event loop, not a worker thread: aborting a run of this process cancels its cancel scope,
        # which is only safe from the loop that owns it.
        aborted = abort_runs(run_id, cfg.store())
        return cfg.render(AbortOutput(aborted=aborted))

    from faultplane.mcp_server.tools_campaigns import register as register_campaigns

    register_campaigns(server, cfg)
    from faultplane.mcp_server.tools_dora import register as register_dora

    register_dora(server, cfg)

    async def refused_inject(arguments: Any, message: str) -> CallToolResult:
        await anyio.to_thread.run_sync(
            lambda: record_refused_call(arguments, message, actor=cfg.actor, store=cfg.store())
        )
        name = arguments.get("fault_name")
        return _fault_error(name if isinstance(name, str) else "", ValueError(message))

    server.middleware.append(ArgumentCheck(server, {"chaos_inject_fault": refused_inject}))
    close_input_schemas(server)
    if cfg.access.restricts:
        cfg.access.check_names([t.name for t in server._tool_manager.list_tools()])
        server.middleware.insert(0, AccessCheck(server, cfg.access))
    return server


def record_start(cfg: ServerConfig, transport: str, details: dict[str, Any] | None = None) -> None:
    """Audit the server's start with the seed it rolls faults with, so a session can be replayed."""
    import json
    from datetime import UTC

    cfg.store().insert(
        "audit",
        [
            {
                "ts": datetime.now(UTC),
                "actor": cfg.actor,
                "action": "mcp.start",
                "subject": transport,
                "details": json.dumps({"seed": cfg.seed, **(details or {})}, sort_keys=True),
            }
        ],
    )
