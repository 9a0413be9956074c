"""The table of `faultplane` commands and the root help rendered from it, with no import at all: `faultplane
--help` (and a bare `faultplane`) are answered from here in a few milliseconds, before typer loads.
tests/engine/test_cli_startup.py checks that the text is what click renders for the app."""

from __future__ import annotations

# command -> (module that provides it, its one-line help as the module gives it). A module provides its
# commands either as `app` (a typer.Typer mounted under the command's name) or through `register(app)`,
# which adds top-level commands.
COMMANDS: dict[str, tuple[str, str]] = {
    "approve": (
        "faultplane.cli.core",
        "Approve one exact version of an experiment (alias of `guard approve`).",
    ),
    "validate": (
        "faultplane.cli.core",
        "Validate an experiment (schema, variables, policy) without running anything.",
    ),
    "run": ("faultplane.cli.core", "Run an experiment."),
    "schema": ("faultplane.cli.core", "Print the JSON Schema of experiments or journals."),
    "abort": (
        "faultplane.cli.core",
        "Stop running experiments (they roll back) and, with --all, revert every active fault.",
    ),
    "demo": (
        "faultplane.cli.core",
        "Start a small HTTP service on loopback, run the bundled latency experiment against it, stop it.",
    ),
    "journal": ("faultplane.cli.core", "Read, export and import run journals."),
    "runs": ("faultplane.cli.core", "List and manage runs."),
    "experiments": (
        "faultplane.cli.core",
        "Named experiments (./experiments, $FAULTPLANE_EXPERIMENTS, bundled).",
    ),
    "init": (
        "faultplane.cli.init",
        "Start a project: policy with a lab inventory, a first experiment, the coding-agent hook, chaos rules.",
    ),
    "design": (
        "faultplane.cli.design",
        "Design escalating experiments (SLO gates, blast radius, rollbacks) that pass the policy; no LLM.",
    ),
    "search": (
        "faultplane.cli.search",
        "Search fault parameters for the combination that takes an SLO just past its bound.",
    ),
    "report": (
        "faultplane.cli.report",
        "Reports: a run's HTML report (`report RUN_ID`), a signed post-exercise report, and its check.",
    ),
    "load": (
        "faultplane.cli.load",
        "Send HTTP requests at a constant arrival rate and measure them without coordinated omission.",
    ),
    "plane": (
        "faultplane.cli.plane",
        "Tool-call-plane chaos: inject MCP faults (offline or via a proxy) and measure what agents feel.",
    ),
    "mcp": (
        "faultplane.cli.mcp",
        "Serve every Faultplane capability to agents over MCP (stdio, or streamable HTTP).",
    ),
    "guard": (
        "faultplane.cli.guard",
        "Guardrails: check an experiment against the policy, approve it, and gate a coding agent's tool calls.",
    ),
    "drivers": (
        "faultplane.cli.drivers",
        "Fault drivers: activities, the standalone TCP fault proxy, fault leases.",
    ),
    "analyze": (
        "faultplane.cli.analyze",
        "The evidence of past runs: scorecards, trends, anomalies, estimate vs actual, SQL, exports, baselines.",
    ),
    "gameday": (
        "faultplane.cli.gameday",
        "GameDays: campaigns of experiments in lanes (ordered or parallel), under one shared load, scored by "
        "pass rate, recovery, load impact and compliance coverage (formula: docs/gamedays.md).",
    ),
    "dora": (
        "faultplane.cli.dora",
        "DORA Four Keys from CI/CD (deployments, incidents) beside what chaos experiments showed.",
    ),
    "approvals": (
        "faultplane.cli.approvals",
        "Approver keys: create one (kept outside the project, under a passphrase), sign, verify.",
    ),
    "compliance": (
        "faultplane.cli.compliance",
        "Compliance evidence: which framework requirements your experiments cover.",
    ),
}

ABOUT = "Chaos engineering with guardrails: run experiments, inject real faults, read the evidence."

# The root's options as click lays them out in a 78-column help (the widest it ever draws).
_OPTIONS = """\
Options:
  -V, --version  Print the version and exit.
  --debug        Show the traceback of an unexpected error (also
                 FAULTPLANE_DEBUG=1).
  --help         Show this message and exit."""

HELP_WIDTH = 78  # click's help width: the terminal's less 2, at most 80 less 2


def short_help(text: str, limit: int) -> str:
    """click's `make_default_short_help`: the first sentence, or as many words as fit with "..."."""
    words = text.split()
    total = 0
    i = 0
    for i, word in enumerate(words):
        total += len(word) + (i > 0)
        if total > limit:
            break
        if word.endswith("."):
            return " ".join(words[: i + 1])
        if total == limit and i != len(words) - 1:
            break
    else:
        return " ".join(words)
    total += 3
    while i > 0:
        total -= len(words[i]) + 1
        if total <= limit:
            break
        i -= 1
    return " ".join(words[:i]) + "..."


def _wrap(text: str, width: int, indent: str) -> list[str]:
    lines: list[str] = []
    line = ""
    for word in text.split():
        if line and len(indent) + len(line) + 1 + len(word) > width:
            lines.append(indent + line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, indent + line] if line else lines


def root_help() -> str:
    """`faultplane --help` as click renders it in a terminal of 80 columns or more."""
    name_width = max(map(len, COMMANDS))
    limit = HELP_WIDTH - 6 - name_width
    rows = [f"  {name:<{name_width}}  {short_help(text, limit)}" for name, (_, text) in COMMANDS.items()]
    return (
        "\n".join(
            [
                "Usage: faultplane [OPTIONS] COMMAND [ARGS]...",
                "",
                *_wrap(ABOUT, HELP_WIDTH, "  "),
                "",
                _OPTIONS,
                "",
                "Commands:",
                *rows,
            ]
        )
        + "\n"
    )
