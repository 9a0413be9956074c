"""Guardrail capabilities shared by every surface: check an experiment, approve it, and judge an agent's tool
call before it happens (the PreToolUse hook).

The hook is a seatbelt in front of the engine, not a replacement for it: the engine evaluates the same policy
again in phase 0. So when the hook cannot resolve something an experiment needs (an unset environment
variable), it judges the document as written and lets the engine have the final word; when it cannot read the
experiment at all, it blocks, because then it cannot know.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultplane.core import approval as approvals
from faultplane.core.policy import (
    POLICY_FILENAMES,
    Policy,
    PolicyDecision,
    find_forbidden,
    load_policy,
)
from faultplane.core.store import Store, open_store

__all__ = [
    "HookVerdict",
    "PreparedExperiment",
    "approve_experiment",
    "check_experiment",
    "judge_tool_call",
    "prepare",
    "show_policy",
]


# ---- loading an experiment the way the engine sees it ------------------------------------------------------


@dataclass
class PreparedExperiment:
    document: dict[str, Any]  # what the policy reads: resolved, with the configuration's final values
    content_hash: str
    family: str
    resolved: bool  # False: variables could not be resolved here; the document is the file as written
    approval_hash: str = ""  # what an approval is bound to: the resolved content, secrets digested
    secret_values: list[str] = field(default_factory=list)


def prepare(
    source: str | Path | Mapping[str, Any], variables: Mapping[str, Any] | None = None
) -> PreparedExperiment:
    """Load and plan the experiment exactly as the engine does, so hashes and families agree."""
    from faultplane.core.formats import ExperimentError, load_document
    from faultplane.engine.lifecycle import approval_hash, plan, policy_document
    from faultplane.services.experiments import find_experiment

    if isinstance(source, str) and "\n" not in source and not Path(source).suffix and "{" not in source:
        source = find_experiment(source)  # a listed experiment name (LookupError names the known ones)
    raw = load_document(source)
    try:
        p = plan(raw, variables)
    except ExperimentError:
        from faultplane.core.policy import approval_hash as raw_approval_hash
        from faultplane.core.policy import content_hash, experiment_family

        return PreparedExperiment(
            dict(raw), content_hash(raw), experiment_family(raw), False, raw_approval_hash(raw)
        )
    return PreparedExperiment(
        policy_document(p), p.content_hash, p.family, True, approval_hash(p), list(p.secret_values)
    )


def _decide(
    prepared: PreparedExperiment, policy: Policy, store: Store | None, approval_token: str | None
) -> PolicyDecision:
    """The engine's own evaluation (same driver catalog, same hashes), never a look-alike of it."""
    from faultplane.engine.lifecycle import evaluate_document

    decision: PolicyDecision = evaluate_document(
        prepared.document,
        policy,
        store,
        approval_token,
        content_hash=prepared.content_hash,
        family=prepared.family,
        secret_values=prepared.secret_values,
        approval_hash=prepared.approval_hash,
    )
    return decision


def check_experiment(
    source: str | Path | Mapping[str, Any],
    *,
    variables: Mapping[str, Any] | None = None,
    policy: Policy | None = None,
    policy_path: str | Path | None = None,
    store: Store | None = None,
    approval_token: str | None = None,
) -> PolicyDecision:
    """The policy's decision on an experiment, as the engine would make it now."""
    prepared = prepare(source, variables)
    pol = policy or load_policy(policy_path)
    return _decide(prepared, pol, store, approval_token)


def approve_experiment(
    source: str | Path | Mapping[str, Any],
    *,
    variables: Mapping[str, Any] | None = None,
    reason: str = "",
    ttl_hours: float | None = None,
    policy_path: str | Path | None = None,
    store: Store | None = None,
    key_path: str | Path | None = None,
    passphrase: str | None = None,
) -> approvals.Approval:
    """Sign an approval bound to this exact experiment with these variables (the resolved content: another
    `--var` value is another experiment) with the approver's key; recorded in the audit table when a store is
    given. The key is unlocked with `passphrase`, else $FAULTPLANE_APPROVER_PASSPHRASE, else a terminal prompt;
    with none of them it refuses (ApprovalError), so a process without the person's secret cannot approve."""
    from faultplane.core.formats import ExperimentError, ValidationIssue, load_document
    from faultplane.engine.lifecycle import plan

    prepared = prepare(source, variables)
    if not prepared.resolved:
        try:
            plan(load_document(source), variables)  # re-plan only to report what is missing
        except ExperimentError as exc:
            raise ExperimentError(
                [
                    *exc.issues,
                    ValidationIssue(
                        field="approve",
                        message="an approval binds the experiment as it will run, so every variable must resolve",
                        fix="pass the same --var/--var-file values the run will use",
                    ),
                ]
            ) from None
    pol = load_policy(policy_path)
    ttl = ttl_hours if ttl_hours is not None else pol.approval.ttl_hours
    if not pol.approval.trusted_keys:
        raise approvals.ApprovalError(
            f"the policy in force ({pol.source}) trusts no approver key: a person runs `faultplane approvals "
            "keygen` and adds the printed line to approval.trusted_keys first"
        )
    path = Path(key_path).expanduser() if key_path else approvals.default_key_path()
    if not path.is_file():  # say so before asking a passphrase for nothing
        approvals.load_signing_key(path, "")
    secret = passphrase if passphrase is not None else approvals.read_passphrase()
    granted = approvals.sign_approval(
        prepared.approval_hash,
        key=approvals.load_signing_key(path, secret),
        trusted_keys=pol.approval.trusted_keys,
        family=prepared.family,
        reason=reason,
        ttl_s=ttl * 3600.0,
    )
    if store is not None:
        import datetime as dt
        import json

        store.insert(
            "audit",
            [
                {
                    "ts": dt.datetime.now(dt.UTC),
                    "actor": granted.approver,
                    "action": "approve",
                    "subject": prepared.family,
                    "details": json.dumps(
                        {
                            "content_hash": prepared.content_hash,
                            "approval_hash": prepared.approval_hash,
                            "variables": sorted(variables or {}),
                            "expires_at": granted.expires_at,
                            "reason": reason,
                        }
                    ),
                }
            ],
        )
    return granted


def show_policy(policy_path: str | Path | None = None, *, start: str | Path | None = None) -> dict[str, Any]:
    pol = load_policy(policy_path, start=start)
    return {"source": pol.source, **pol.model_dump(mode="json")}


# ---- the agent hook ---------------------------------------------------------------------------------------


@dataclass
class HookVerdict:
    allow: bool
    reason: str = ""
    checked: list[str] = field(default_factory=list)


_CONTROL = {";", "&&", "||", "|", "&", "(", ")", "|&", ";;"}
_WRAPPERS = {
    "sudo",
    "env",
    "exec",
    "time",
    "nice",
    "nohup",
    "command",
    "builtin",
    "stdbuf",
    "ionice",
    "xargs",
}
_RUNNERS = {
    ("uv", "run"),
    ("poetry", "run"),
    ("pipx", "run"),
    ("pdm", "run"),
    ("hatch", "run"),
    ("rye", "run"),
}
_SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "fish"}
_READ_ONLY = {
    "validate",
    "schema",
    "journal",
    "runs",
    "experiments",
    "abort",
    "drivers",
    "discover",
    "mcp",
    "report",
    "reports",
    "analyze",
    "status",
    "version",
    "--help",
    "-h",
    "--version",
    "demo",
}
_POLICY_ENV = (
    "FAULTPLANE_POLICY",
    "FAULTPLANE_APPROVAL_KEY",
    "FAULTPLANE_APPROVER_KEY",
    "FAULTPLANE_APPROVER_PASSPHRASE",
)
_WRITE_OPS = re.compile(
    r"(>>?|\btee\b|\brm\b|\bmv\b|\bcp\b|\bsed\s+-i|\btruncate\b|\bln\b|\bchmod\b|\bchown\b|\bdd\b|\binstall\b|"
    r"\bgit\s+(?:checkout|restore|rm|mv|reset|stash)\b|\bperl\s+-[a-z]*i|\bpython[0-9.]*\s+-c\b|\bunlink\b)"
)


class _Block(Exception):
    pass


def _protected_paths() -> list[str]:
    key = approvals.default_key_path()
    return [
        str(approvals.key_path()),
        str(key),
        str(key.with_name(key.name + ".pub")),
        str(approvals.approvals_dir()),
    ]


def _is_protected_file(path: str, cwd: Path) -> str | None:
    p = Path(path)
    p = p if p.is_absolute() else cwd / p
    if p.name in POLICY_FILENAMES:
        return f"{p} is the guardrail policy; only a person edits it"
    resolved = str(p.resolve()) if p.exists() or p.parent.exists() else str(p)
    for protected in _protected_paths():
        prot = str(Path(protected).resolve()) if Path(protected).exists() else protected
        if resolved == prot or resolved.startswith(prot.rstrip("/") + "/"):
            return f"{p} holds approval secrets or tokens; agents may not touch them"
    return None


def judge_tool_call(
    payload: Mapping[str, Any],
    *,
    policy: Policy | None = None,
    store: Store | None = None,
) -> HookVerdict:
    """Allow or block one PreToolUse call. Never raises: a payload it cannot understand is blocked."""
    if not isinstance(payload, Mapping):
        return HookVerdict(False, "hook input is not a JSON object")
    tool = str(payload.get("tool_name") or "")
    tool_input = payload.get("tool_input") or {}
    if not isinstance(tool_input, Mapping):
        tool_input = {}
    cwd = Path(str(payload.get("cwd") or os.getcwd()))
    judge = _Judge(cwd, policy, store)
    try:
        if tool in ("Bash", "Shell", "shell") or tool.endswith("__bash"):
            judge.shell(str(tool_input.get("command") or ""), cwd)
        elif tool in ("Write", "Edit", "MultiEdit", "NotebookEdit"):
            target = tool_input.get("file_path") or tool_input.get("notebook_path") or ""
            why = _is_protected_file(str(target), cwd) if target else None
            if why:
                raise _Block(why)
        elif tool.startswith("mcp__") and "faultplane" in tool.casefold():
            judge.mcp(tool.rsplit("__", 1)[-1], tool_input)
    except _Block as exc:
        return HookVerdict(False, str(exc), judge.checked)
    return HookVerdict(True, "", judge.checked)


class _Judge:
    def __init__(self, cwd: Path, policy: Policy | None, store: Store | None) -> None:
        self.cwd = cwd
        self._policy = policy
        self._store = store
        self.checked: list[str] = []

    def policy(self) -> Policy:
        if self._policy is None:
            try:
                self._policy = load_policy(start=self.cwd)
            except ValueError as exc:
                raise _Block(f"the policy cannot be read, so nothing may run: {exc}") from None
        return self._policy

    def store(self, path: str | None = None) -> Store | None:
        if path:
            return Store(path if Path(path).is_absolute() else self.cwd / path)
        if self._store is None:
            try:
                self._store = open_store()
            except Exception:
                return None  # history unavailable: stages start at 0, which is the strict reading
        return self._store

    # -- experiments

    def experiment(
        self,
        source: str | Path | Mapping[str, Any],
        label: str,
        *,
        variables: Mapping[str, Any] | None = None,
        approval_token: str | None = None,
        store_path: str | None = None,
        server_asks: bool = False,
    ) -> None:
        """`server_asks`: the Faultplane MCP server asks a person itself (elicitation) when only an approval is
        missing, and its engine verifies the answer, so the hook leaves that one refusal to it."""
        from faultplane.core.formats import ExperimentError

        try:
            prepared = prepare(source, variables)
        except (ExperimentError, LookupError, OSError, ValueError) as exc:
            raise _Block(f"cannot read experiment {label} to check it against the policy: {exc}") from None
        self.checked.append(label)
        decision = _decide(prepared, self.policy(), self.store(store_path), approval_token)
        if server_asks and all(v.rule == "approval.required" for v in decision.violations):
            return
        if not decision.allowed:
            lines = [f"Faultplane policy refuses experiment {label} ({decision.policy_source}):"]
            lines += [f"- [{v.rule}] {v.field}: {v.message} Fix: {v.fix}" for v in decision.violations]
            raise _Block("\n".join(lines))

    def scan_values(self, values: Mapping[str, Any], label: str) -> None:
        found = find_forbidden(dict(values), self.policy().forbidden)
        if found:
            v = found[0]
            raise _Block(f"Faultplane policy refuses {label}: [{v.rule}] {v.field}: {v.message} Fix: {v.fix}")

    # -- MCP tool calls

    def mcp(self, name: str, tool_input: Mapping[str, Any]) -> None:
        lname = name.casefold()
        if "approve" in lname:
            raise _Block("approvals are given by a person with `faultplane approve`, not by an agent")
        if any(
            w in lname
            for w in (
                "list",
                "status",
                "discover",
                "validate",
                "journal",
                "analyze",
                "get_",
                "abort",
                "schema",
                "search_runs",
            )
        ):
            return
        variables = tool_input.get("variables") if isinstance(tool_input.get("variables"), Mapping) else None
        inline = tool_input.get("experiment")
        named = (
            tool_input.get("experiment_name") or tool_input.get("path") or tool_input.get("experiment_path")
        )
        if isinstance(inline, Mapping):
            self.experiment(inline, f"(inline, {name})", variables=variables, server_asks=True)
        elif isinstance(inline, str) and inline.strip():
            text = inline if "\n" in inline else inline + "\n"
            self.experiment(text, f"(inline, {name})", variables=variables, server_asks=True)
        elif isinstance(named, str) and named.strip():
            src: str | Path = named
            if Path(named).suffix:
                src = Path(named) if Path(named).is_absolute() else self.cwd / named
            self.experiment(src, repr(named), variables=variables, server_asks=True)
        # whatever else the call carries (fault names, targets, variables) must not name production either
        self.scan_values({k: v for k, v in tool_input.items() if k != "experiment"}, f"tool call {name}")

    # -- shell commands

    def shell(self, command: str, cwd: Path, depth: int = 0) -> None:
        if depth > 3:
            raise _Block("shell command nests too deeply to check")
        if not command.strip():
            return
        folded = command.casefold()
        for env in _POLICY_ENV:
            if re.search(rf"\b{env}\s*=", command):
                raise _Block(f"setting {env} switches the guardrail policy; only a person chooses the policy")
        for protected in ("approval.key", "approver.key", *_protected_paths()):
            if protected.casefold() in folded or "faultplane/approvals" in folded:
                raise _Block("the command touches Faultplane's approval secrets; agents may not")
        if any(name in command for name in POLICY_FILENAMES) and _WRITE_OPS.search(command):
            raise _Block("the command would change the guardrail policy file; only a person edits it")
        if "faultplane" not in folded:
            return  # not ours to judge
        if re.search(r"\$\(|`|(^|[;&|(]\s*)\$\{?[A-Za-z_]", command):
            # a command built at run time cannot be checked before it runs
            raise _Block(
                "the command mentions faultplane but builds words at run time ($(...), `...`, $VAR); "
                "write the faultplane command out literally"
            )
        for words in _simple_commands(command):
            cwd = self._one(words, cwd, depth)

    def _one(self, words: list[str], cwd: Path, depth: int) -> Path:
        i = 0
        while i < len(words) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[i]):
            i += 1  # VAR=value prefixes (policy variables were refused above)
        if i >= len(words):
            return cwd
        head = Path(words[i]).name
        if head == "cd":
            target = words[i + 1] if i + 1 < len(words) else str(Path.home())
            new = Path(os.path.expanduser(target))
            return new if new.is_absolute() else (cwd / new)
        if head in _SHELLS:
            for j in range(i + 1, len(words) - 1):
                if words[j].startswith("-") and "c" in words[j].lstrip("-"):
                    self.shell(words[j + 1], cwd, depth + 1)
                    return cwd
            return cwd
        if head == "eval":
            self.shell(" ".join(words[i + 1 :]), cwd, depth + 1)
            return cwd
        argv = _strip_wrappers(words[i:])
        if argv is None:
            return cwd
        self.faultplane(argv, cwd)
        return cwd

    def faultplane(self, args: list[str], cwd: Path) -> None:
        """`args` are the arguments after `faultplane`."""
        positional: list[str] = []
        options: dict[str, list[str]] = {}
        j = 0
        while j < len(args):
            a = args[j]
            if a.startswith("--") and "=" in a:
                k, _, v = a.partition("=")
                options.setdefault(k, []).append(v)
            elif a.startswith("-") and a not in ("-",):
                takes_value = a in (
                    "--var",
                    "--var-file",
                    "--store",
                    "--policy",
                    "--approval",
                    "--journal",
                    "--output",
                    "-o",
                    "--seed",
                    "--format",
                    "-f",
                    "--approver",
                    "--reason",
                )
                if takes_value and j + 1 < len(args):
                    options.setdefault(a, []).append(args[j + 1])
                    j += 1
                else:
                    options.setdefault(a, [])
            else:
                positional.append(a)
            j += 1
        if not positional:
            return
        sub = positional[0]
        second = positional[1] if len(positional) > 1 else ""
        if sub == "approve" or (sub, second) in {
            ("guard", "approve"),
            ("approvals", "keygen"),
            ("approvals", "sign"),
        }:
            raise _Block("approvals are given by a person with `faultplane approve`, not by an agent")
        if "--policy" in options:
            raise _Block("`--policy` switches the guardrail policy; only a person chooses the policy")
        if sub in _READ_ONLY or sub == "guard":
            return
        variables: dict[str, Any] = {}
        try:
            from faultplane.core.config import load_var_file, parse_var

            for vf in options.get("--var-file", []):
                variables.update(load_var_file(vf if Path(vf).is_absolute() else cwd / vf))
            for item in options.get("--var", []):
                k, v = parse_var(item)
                variables[k] = v
        except Exception as exc:
            raise _Block(f"cannot read the command's variables to check them: {exc}") from None
        if variables:
            self.scan_values({"variables": variables}, "the command's --var values")
        approval = _last(options, "--approval") or os.environ.get("FAULTPLANE_APPROVAL")
        store_path = _last(options, "--store")
        if sub == "run" or sub == "gameday" or sub == "search":
            targets = positional[1:] if sub == "run" else [p for p in positional[1:] if Path(p).suffix]
            if sub == "run" and not targets:
                return  # nothing named: the CLI will refuse the command itself
            for t in targets:
                src: str | Path = t
                if Path(t).suffix or (cwd / t).exists():
                    src = Path(os.path.expanduser(t))
                    src = src if src.is_absolute() else cwd / src
                self.experiment(
                    src, repr(t), variables=variables, approval_token=approval, store_path=store_path
                )
            return
        # commands we do not know yet: their arguments must not name production
        self.scan_values({"arguments": positional[1:]}, f"`faultplane {sub}`")


def _last(options: Mapping[str, list[str]], name: str) -> str | None:
    values = options.get(name) or []
    return values[-1] if values else None


def _simple_commands(command: str) -> list[list[str]]:
    """Split a shell line into simple commands (on ; && || | & and newlines), each a list of words."""
    lexer = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError as exc:
        raise _Block(f"cannot parse the shell command to check it ({exc})") from None
    out: list[list[str]] = [[]]
    for tok in tokens:
        if tok in _CONTROL or set(tok) <= set(";&|()"):
            out.append([])
        else:
            out[-1].append(tok)
    return [c for c in out if c]


def _strip_wrappers(words: list[str]) -> list[str] | None:
    """The arguments after `faultplane` when `words` invokes it (directly, via python -m, uv run, sudo...)."""
    i = 0
    while i < len(words):
        w = words[i]
        name = Path(w).name
        if name in _WRAPPERS or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", w):
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 1  # the wrapper's own options
            if name == "timeout" and i < len(words):
                i += 1
            continue
        if name == "timeout":
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 2 if words[i] in ("-s", "-k", "--signal", "--kill-after") else 1
            i += 1  # the duration
            continue
        if i + 1 < len(words) and (name, words[i + 1]) in _RUNNERS:
            i += 2
            continue
        if name == "faultplane":
            return words[i + 1 :]
        if re.fullmatch(r"python[0-9.]*", name):
            rest = words[i + 1 :]
            if len(rest) >= 2 and rest[0] == "-m" and rest[1].split(".")[0] == "faultplane":
                return rest[2:]
            return None
        return None
    return None
