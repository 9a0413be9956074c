"""Starting a project: `faultplane init` writes a policy, a first experiment, the coding-agent hook and the
agent's chaos rules; `faultplane init --from-ctk` turns a Chaos Toolkit experiment into one Faultplane's
policy accepts, saying why each addition was made."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from faultplane.core.errors import ExperimentError

__all__ = ["Conversion", "Written", "convert_ctk", "init_project"]

HOOK_COMMAND = "faultplane guard hook"
RULES_HEADING = "## Chaos rules"

_DEMO_HEADER = """\
# Your first experiment: the bundled demo service under a 300 ms database slowdown.
# 1. start the demo service:   python -m faultplane.examples.demo_service --port 8080
# 2. check it (nothing runs):  faultplane validate experiments/first-experiment.yaml
# 3. run it:                   faultplane run experiments/first-experiment.yaml
# (`faultplane demo` does all three in one go, on a free port.)
"""

_RULES = f"""{RULES_HEADING}

Chaos experiments in this project run only through Faultplane, under its policy (`faultplane.policy.yaml`).

- Inject faults only with `faultplane run`, `faultplane gameday run` or the Faultplane MCP tools (`chaos_*`);
  never with fault tools directly (tc, iptables, kubectl delete/drain, stress-ng, toxiproxy-cli, kill).
- Only the targets the policy's inventory declares; never anything named or labelled production.
- Every experiment declares numeric SLO gates with a window; run `faultplane validate FILE` before running it.
- Never edit the policy, approval or key files, and never approve your own experiment: when a run needs
  approval, stop and ask a person to approve it.
- When the policy refuses a run, change the experiment, not the policy, and quote the refusal to the user.
- `faultplane abort --all` stops every run and reverts every fault: use it when anything looks wrong.
"""


@dataclass
class Written:
    """One file `init` touched: `created`, `updated` (a section or an entry added) or `kept` (already there)."""

    path: Path
    action: Literal["created", "updated", "kept"]
    what: str


_PACKAGE = Path(__file__).resolve().parent.parent


def _policy_template() -> str:
    return (_PACKAGE / "data" / "init-policy.yaml").read_text(encoding="utf-8")


def _demo_experiment() -> str:
    return _DEMO_HEADER + (_PACKAGE / "examples" / "demo-latency.yaml").read_text(encoding="utf-8")


def _write_new(path: Path, text: str, what: str, force: bool) -> Written:
    if path.exists() and not force:
        return Written(path, "kept", what + " (exists; --force replaces it)")
    path.parent.mkdir(parents=True, exist_ok=True)
    existed = path.exists()
    path.write_text(text, encoding="utf-8")
    return Written(path, "updated" if existed else "created", what)


def _hook_entry(groups: list[Any]) -> bool:
    for group in groups:
        hooks = group.get("hooks") if isinstance(group, Mapping) else None
        for hook in hooks if isinstance(hooks, list) else []:
            if isinstance(hook, Mapping) and HOOK_COMMAND in str(hook.get("command", "")):
                return True
    return False


def _read_json_object(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ExperimentError(
            _issue(str(path), f"{what} is not valid JSON ({exc})", "fix the file by hand")
        ) from None
    if not isinstance(data, dict):
        raise ExperimentError(_issue(str(path), f"{what} must be a JSON object", "fix the file by hand"))
    return data


def _agent_hook(root: Path) -> Written:
    path = root / ".claude" / "settings.json"
    settings = _read_json_object(path, "Claude Code settings") if path.exists() else {}
    hooks = settings.setdefault("hooks", {})
    groups = hooks.setdefault("PreToolUse", []) if isinstance(hooks, dict) else None
    if not isinstance(groups, list):
        raise ExperimentError(
            _issue(str(path), "`hooks.PreToolUse` is not a list", "fix the file, then run init again")
        )
    if _hook_entry(groups):
        return Written(path, "kept", "agent hook (already installed)")
    groups.append(
        {
            "matcher": "Bash|Write|Edit|MultiEdit|NotebookEdit|mcp__faultplane__.*",
            "hooks": [{"type": "command", "command": HOOK_COMMAND, "timeout": 30}],
        }
    )
    existed = path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    return Written(
        path, "updated" if existed else "created", "agent hook: every tool call judged by the policy"
    )


def _mcp_config(root: Path) -> Written:
    path = root / ".mcp.json"
    config = _read_json_object(path, "MCP client configuration") if path.exists() else {}
    servers = config.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise ExperimentError(_issue(str(path), "`mcpServers` is not an object", "fix the file by hand"))
    if "faultplane" in servers:
        return Written(path, "kept", "MCP server entry (already there)")
    servers["faultplane"] = {"command": "faultplane", "args": ["mcp"]}
    existed = path.exists()
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return Written(path, "updated" if existed else "created", "MCP server for agents (stdio)")


def _rules(path: Path) -> Written:
    # the user's own file: left as it is when it is not UTF-8, never rewritten in another encoding
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
    except UnicodeDecodeError as exc:
        raise ExperimentError(
            _issue(str(path), f"not UTF-8 text (byte {exc.start})", "save it as UTF-8, then run init again")
        ) from None
    if RULES_HEADING in text:
        return Written(path, "kept", "agent chaos rules (section already there)")
    joined = (text.rstrip("\n") + "\n\n" if text.strip() else "") + _RULES
    path.write_text(joined, encoding="utf-8")
    return Written(path, "updated" if text else "created", "agent chaos rules")


def init_project(root: str | Path = ".", *, force: bool = False) -> list[Written]:
    """Scaffold a project in `root`. Existing files are kept (policy, experiment) or extended (the agent
    settings, AGENTS.md, CLAUDE.md): nothing a user wrote is lost. `force` replaces the policy and the
    experiment."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ExperimentError(_issue("directory", f"{root} is not a directory", "give a project directory"))
    root.mkdir(parents=True, exist_ok=True)
    return [
        _write_new(
            root / "faultplane.policy.yaml",
            _policy_template(),
            "policy: production refused, gates required, staged blast radius",
            force,
        ),
        _write_new(
            root / "experiments" / "first-experiment.yaml",
            _demo_experiment(),
            "first experiment, against the bundled demo service",
            force,
        ),
        _agent_hook(root),
        _mcp_config(root),
        _rules(root / "AGENTS.md"),
        _rules(root / "CLAUDE.md"),
    ]


# --- Chaos Toolkit conversion ---------------------------------------------------------------------------


@dataclass
class Conversion:
    """A Chaos Toolkit experiment made ready for Faultplane's policy, and why each addition was made."""

    experiment: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def _issue(field_: str, message: str, fix: str) -> list[Any]:
    from faultplane.core.formats import ValidationIssue

    return [ValidationIssue(field=field_, message=message, fix=fix)]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "experiment"


def _activities(doc: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    ssh = doc.get("steady-state-hypothesis") or doc.get("steady_state_hypothesis") or {}
    for i, probe in enumerate(ssh.get("probes") or [] if isinstance(ssh, Mapping) else []):
        if isinstance(probe, Mapping):
            yield f"steady-state-hypothesis.probes[{i}]", probe
    for key in ("method", "rollbacks"):
        for i, item in enumerate(doc.get(key) or []):
            if isinstance(item, Mapping):
                yield f"{key}[{i}]", item


def _url_of(activity: Mapping[str, Any]) -> str | None:
    provider = activity.get("provider")
    if not isinstance(provider, Mapping):
        return None
    url = provider.get("url")
    if url is None and isinstance(provider.get("arguments"), Mapping):
        url = provider["arguments"].get("url")
    return url if isinstance(url, str) and url.strip() else None


def _range_gate(where: str, probe: Mapping[str, Any]) -> tuple[dict[str, Any], str] | None:
    tol = probe.get("tolerance")
    if not (isinstance(tol, Mapping) and tol.get("type") == "range"):
        return None
    bounds = tol.get("range")
    if not (
        isinstance(bounds, list) and len(bounds) == 2 and all(isinstance(b, int | float) for b in bounds)
    ):
        return None
    if "target" in tol or "path" in tol:
        return None  # a range on part of the output: the gate would need the same path, left to the author
    gate_probe = {k: v for k, v in probe.items() if k not in ("tolerance", "ref")}
    gate_probe["name"] = f"{probe.get('name', 'probe')}-gate"
    gate = {
        "name": f"{probe.get('name', 'probe')}-in-range",
        "sli": "probe",
        "rollback_on": f"probe > {bounds[1]:g} for 10s",
        "interval_s": 1.0,
        "probe": gate_probe,
    }
    why = (
        f"slo_gates[0]: watches {where} (`{probe.get('name')}`) while the fault runs and rolls back when it "
        f"stays above its tolerance's upper bound {bounds[1]:g} for 10 s; Faultplane requires a numeric gate "
        "with a window so a fault is stopped while it happens, not judged only afterwards"
    )
    return gate, why


def _latency_gate(where: str, url: str) -> tuple[dict[str, Any], str]:
    gate = {
        "name": "latency-gate",
        "sli": "probe",
        "rollback_on": "probe > 1000 for 10s",
        "interval_s": 1.0,
        "value_path": "p50_ms",
        "probe": {
            "type": "probe",
            "name": "latency-gate-probe",
            "provider": {
                "type": "driver",
                "driver": "http",
                "name": "latency",
                "arguments": {"url": url, "samples": 3},
            },
        },
    }
    why = (
        f"slo_gates[0]: samples the median latency of {url} (from {where}) every second and rolls back when "
        "it stays above 1000 ms for 10 s; Faultplane requires a numeric gate with a window. Set the bound "
        "to your SLO"
    )
    return gate, why


def convert_ctk(source: str | Path | Mapping[str, Any]) -> Conversion:
    """Add what Faultplane's default policy requires to a Chaos Toolkit experiment: a family, a numeric SLO
    gate with a window (from a range-tolerance probe, else from an HTTP URL the experiment calls), and lab
    labels on the targets it names. Nothing of the original is removed or changed."""
    from faultplane.core.formats import load_document

    doc = load_document(source)
    missing = [k for k in ("title", "method") if not doc.get(k)]
    if missing:
        raise ExperimentError(
            _issue(
                missing[0],
                f"a Chaos Toolkit experiment needs `{missing[0]}`",
                "give the experiment a title and a method",
            )
        )
    out = dict(doc)
    notes: list[str] = []
    if not out.get("family"):
        out["family"] = _slug(str(out["title"]))
        notes.append(
            f"family: {out['family']!r} groups this experiment's runs, so its blast radius can grow in "
            "stages as runs come back green"
        )
    if not out.get("slo_gates"):
        activities = list(_activities(doc))
        made = next((g for w, a in activities if (g := _range_gate(w, a)) is not None), None)
        if made is None:
            url = next(((w, u) for w, a in activities if (u := _url_of(a)) is not None), None)
            made = _latency_gate(*url) if url else None
        if made is None:
            notes.append(
                "slo_gates: none could be derived (no probe with a numeric range tolerance, no HTTP URL); add "
                "one before running, e.g. `{name: errors, sli: probe, rollback_on: 'probe > 0.05 for 10s', "
                "probe: {...}}` (docs/guardrails.md, Gates)"
            )
        else:
            out["slo_gates"] = [made[0]]
            notes.append(made[1])
    urls = sorted({u for _, a in _activities(doc) if (u := _url_of(a)) is not None})
    hosts = sorted({h for u in urls if (h := _host(u))})
    if hosts and not out.get("targets"):
        out["targets"] = [{"name": h, "labels": {"env": "lab"}} for h in hosts]
        out.setdefault("blast_radius", {"percent": 10})
        notes.append(
            f"targets: {', '.join(hosts)} labelled env=lab: guardrails judge targets by their labels and "
            "refuse production ones; rename the label to your lab's environment name"
        )
        notes.append(
            "blast_radius: 10 percent, the default policy's first stage: the policy asks an experiment with "
            "targets to say how many it may touch, and raises the share in stages as runs come back green"
        )
    tags = list(out.get("tags") or [])
    if "chaostoolkit" not in tags:
        out["tags"] = [*tags, "chaostoolkit"]
        notes.append("tags: `chaostoolkit` marks the experiment's origin in reports and trends")
    return Conversion(out, notes)


def _host(url: str) -> str | None:
    from urllib.parse import urlsplit

    if "${" in url.split("//", 1)[-1].split("/", 1)[0]:
        return None  # the host is a variable: it names no target until run time
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None
