"""Allow or refuse one PreToolUse call: a shell command, a file edit, a call to the Faultplane MCP server.

The hook is a fast pre-filter in front of the engine, not the boundary: the engine evaluates the same policy
again before anything runs. What it adds is refusing early and telling the agent what to run instead, and
guarding what the engine cannot: the policy and approval files themselves.

Rules for shell commands, each applied to every simple command bash will start (see parse.py, argv.py):
- a command that could start Faultplane or another chaos tool but is built at run time (`$f run`, `$(...)` as
  an argument, a loop variable, words arriving through xargs/find) is refused: the agent writes it literally;
- a script written and run in the same command, or text piped into a shell or interpreter, is refused;
- `faultplane run/gameday/search` and Chaos Toolkit's `chaos run` have their experiment checked by the
  engine's own policy evaluation; fault tools (kubectl delete/drain/..., helm uninstall, tc, iptables, nft,
  stress-ng, toxiproxy-cli, pumba, kill/pkill ...) are refused when they name production;
- writes to guardrail files (policy, approvals, keys) are refused whatever the tool; reading keys too.
Everything else, including reading files, tests, git and read-only kubectl against production, passes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from faultplane.hook import protect
from faultplane.hook.argv import INTERPRETERS, PYTHON, SHELLS, Resolved, python_module, resolve
from faultplane.hook.parse import UNKNOWN, Command, is_known, parse, resolve_path

TYPE_CHECKING = False  # typing itself costs the hook ~5 ms; annotations are strings here anyway
if TYPE_CHECKING:
    from typing import Any

    from faultplane.core.policy import Policy
    from faultplane.core.store import Store

__all__ = ["HookVerdict", "judge_tool_call"]

_MAX_NESTING = 6  # bash -c 'bash -c "..."': deeper is refused, not followed
_MAX_SCRIPT_BYTES = 256_000


class HookVerdict:
    """allow, the reason shown to the agent when refused, and the experiments checked on the way."""

    __slots__ = ("allow", "checked", "reason")

    def __init__(self, allow: bool, reason: str = "", checked: list[str] | None = None) -> None:
        self.allow = allow
        self.reason = reason
        self.checked = checked if checked is not None else []

    def __repr__(self) -> str:
        return f"HookVerdict(allow={self.allow}, reason={self.reason!r}, checked={self.checked!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HookVerdict) and (self.allow, self.reason, self.checked) == (
            other.allow,
            other.reason,
            other.checked,
        )

    __hash__ = None  # type: ignore[assignment]


class Refuse(Exception):
    pass


_READ_ONLY = {
    "validate", "schema", "journal", "runs", "experiments", "abort", "drivers", "discover", "mcp", "report",
    "reports", "analyze", "status", "version", "--help", "-h", "--version", "demo", "compliance", "design",
}  # fmt: skip
_TAKES_VALUE = {
    "--var", "--var-file", "--store", "--policy", "--approval", "--journal", "--output", "-o", "--seed",
    "--format", "-f", "--approver", "--reason", "--ttl-hours", "--stage", "--rollback-strategy",
    "--log-file", "--settings", "--journal-path", "--hypothesis-strategy", "--hypothesis-frequency",
}  # fmt: skip
_POLICY_ENV = (
    "FAULTPLANE_POLICY",
    "FAULTPLANE_APPROVAL_KEY",
    "FAULTPLANE_POLICY_DIR",
    "FAULTPLANE_APPROVER_KEY",
    "FAULTPLANE_APPROVER_PASSPHRASE",
)
_CHAOS_WORD = re.compile(
    r"faultplane|chaos|kubectl|\boc\b|helm|\btc\b|iptables|\bnft\b|stress|toxiproxy|pumba|kill|blade|"
    r"litmus|gremlin|chaosd|policy|approval",
    re.IGNORECASE,
)

# fault tools: verbs that change the system (None: every use changes it)
_KUBE_MUTATING = {
    "delete", "drain", "cordon", "uncordon", "scale", "rollout", "taint", "patch", "edit", "apply", "replace",
    "set", "label", "annotate", "create", "run", "expose", "autoscale", "exec", "debug", "cp", "evict",
    "attach",
}  # fmt: skip
_KUBE_GLOBAL_VALUE = {
    "-n",
    "--namespace",
    "--context",
    "--cluster",
    "--kubeconfig",
    "-s",
    "--server",
    "--user",
    "--as",
    "--as-group",
    "--token",
    "--request-timeout",
    "-v",
    "--v",
}
_HELM_MUTATING = {"uninstall", "delete", "del", "un", "rollback", "upgrade", "install", "test"}
_FAULT_TOOLS = {
    "tc", "iptables", "ip6tables", "iptables-legacy", "iptables-nft", "ip6tables-legacy", "nft", "ebtables",
    "stress-ng", "stress", "toxiproxy-cli", "toxiproxy", "pumba", "kill", "pkill", "killall", "blade",
    "chaosd", "litmusctl", "gremlin", "powerfulseal", "comcast", "tcset", "tcdel", "stressor", "chaosblade",
}  # fmt: skip
_VERB_TOOLS = {"kubectl", "oc", "kubecolor", "helm", "docker", "podman", "nerdctl", "crictl", "aws", "gcloud",
               "az", "doctl", "systemctl", "service"}  # fmt: skip
_CONTAINER_MUTATING = {"kill", "stop", "rm", "pause", "restart", "network", "update", "exec"}
_CLOUD_MUTATING = re.compile(
    r"delete|terminate|stop|reboot|reset|failover|detach|deregister|start-experiment|scale|drain|remove",
)
_SHORT_FLAG_NAMES = {"n": "--namespace"}
_KUBE_CONFIG_FLAGS = {
    "--namespace": "namespace",
    "--context": "context",
    "--cluster": "cluster",
    "--kube-context": "context",
    "--env": "env",
    "--environment": "env",
}
_WRITE_ALL = {
    "rm",
    "unlink",
    "shred",
    "truncate",
    "chmod",
    "chown",
    "chgrp",
    "touch",
    "rmdir",
    "chattr",
    "setfacl",
    "ln",
    "mv",
    "srm",
    "wipe",
}


def judge_tool_call(
    payload: Mapping[str, Any], *, policy: Policy | None = None, store: Store | None = None
) -> HookVerdict:
    """Allow or refuse one PreToolUse call. Never raises: a payload it cannot understand is refused."""
    if not isinstance(payload, Mapping):
        return HookVerdict(False, "hook input is not a JSON object")
    tool = str(payload.get("tool_name") or "")
    tool_input = payload.get("tool_input") or {}
    if not isinstance(tool_input, Mapping):
        return HookVerdict(False, "hook input's tool_input is not a JSON object; blocking to be safe")
    cwd = Path(str(payload.get("cwd") or os.getcwd()))
    judge = Judge(cwd, policy, store)
    short = tool.rsplit("__", 1)[-1] if tool.startswith("mcp__") else tool  # other MCP servers' tools too
    try:
        if tool.startswith("mcp__") and "faultplane" in tool.casefold():
            judge.mcp(short, tool_input)
        elif short in _SHELL_TOOLS:
            command = tool_input.get("command", tool_input.get("cmd", ""))
            if not isinstance(command, str):
                raise Refuse(f"{tool}: `command` is not a string; blocking to be safe")
            judge.shell(command, cwd)
        elif short in _WRITE_TOOLS:
            for target in _paths(tool_input):
                why = protect.protected(_abs(target, cwd))
                if why:
                    raise Refuse(f"{why}. Instead: ask the person to make this change.")
        elif short in _READ_TOOLS:
            for target in _paths(tool_input):
                why = protect.secret(_abs(target, cwd))
                if why:
                    raise Refuse(why)
    except Refuse as exc:
        return HookVerdict(False, str(exc), judge.checked)
    except RecursionError:
        return HookVerdict(False, "the command nests too deeply to check", judge.checked)
    return HookVerdict(True, "", judge.checked)


_SHELL_TOOLS = {"Bash", "Shell", "shell", "bash", "run_shell_command", "execute_command", "run_command",
                "run_terminal_cmd", "terminal", "exec_command"}  # fmt: skip
_WRITE_TOOLS = {"Write", "Edit", "MultiEdit", "NotebookEdit", "write_file", "edit_file", "replace", "move_file",
                "create_file", "delete_file", "str_replace_based_edit_tool", "apply_patch"}  # fmt: skip
_READ_TOOLS = {"Read", "NotebookRead", "Grep", "Glob", "LS", "read_file", "read_multiple_files",
               "read_text_file", "search_files", "list_directory", "directory_tree"}  # fmt: skip
_PATH_KEYS = ("file_path", "notebook_path", "path", "paths", "source", "destination", "target", "dir")


def _paths(tool_input: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for key in _PATH_KEYS:
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            out.append(value)
        elif isinstance(value, list):
            out += [v for v in value if isinstance(v, str) and v]
    return out


def _abs(target: str, cwd: Path) -> Path:
    path = Path(os.path.expanduser(target))
    return path if path.is_absolute() else cwd / path


class Judge:
    def __init__(self, cwd: Path, policy: Policy | None = None, store: Store | None = None) -> None:
        self.cwd = cwd
        self._policy = policy
        self._store = store
        self.checked: list[str] = []

    # -- the heavy parts, loaded only for chaos

    def policy(self) -> Policy:
        if self._policy is None:
            from faultplane.core.policy import load_policy

            try:
                self._policy = load_policy(start=self.cwd)
            except ValueError as exc:
                raise Refuse(f"the policy cannot be read, so nothing may run: {exc}") from None
        return self._policy

    def store(self, path: str | None = None) -> Store | None:
        from faultplane.core.store import Store, open_store

        if path:
            return Store(path if Path(path).is_absolute() else self.cwd / path)
        if self._store is None:
            try:
                self._store = open_store()
            except Exception:
                return None  # history unavailable: stages start at 0, which is the strict reading
        return self._store

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
        from faultplane.services.guard import _decide, prepare

        try:
            prepared = prepare(source, variables)
        except (ExperimentError, LookupError, OSError, ValueError) as exc:
            raise Refuse(f"cannot read experiment {label} to check it against the policy: {exc}") from None
        self.checked.append(label)
        decision = _decide(prepared, self.policy(), self.store(store_path), approval_token)
        if server_asks and all(v.rule == "approval.required" for v in decision.violations):
            return
        if not decision.allowed:
            lines = [f"Faultplane policy refuses experiment {label} ({decision.policy_source}):"]
            lines += [f"- [{v.rule}] {v.field}: {v.message} Fix: {v.fix}" for v in decision.violations]
            raise Refuse("\n".join(lines))

    def scan_values(self, values: Mapping[str, Any], label: str) -> None:
        from faultplane.hook.names import production_finding

        policy = self.policy()
        found = production_finding(values, policy)
        if found:
            raise Refuse(
                f"Faultplane policy refuses {label}: {found}. Instead: point it at a staging or local target."
            )
        if policy.inventory is not None:
            # the lab's declared targets, as the engine and the MCP server apply them: anything else is refused
            from faultplane.core.policy import undeclared

            missing = undeclared(dict(values), policy.inventory)
            if missing:
                v = missing[0]
                raise Refuse(
                    f"Faultplane policy refuses {label}: [{v.rule}] {v.message} (the policy's target inventory "
                    f"lists the lab; {policy.source}). Instead: {v.fix}."
                )

    # -- MCP tool calls

    def mcp(self, name: str, tool_input: Mapping[str, Any]) -> None:
        lname = name.casefold()
        if "approve" in lname:
            raise Refuse("approvals are given by a person with `faultplane approve`, not by an agent")
        read_only = ("list", "status", "discover", "validate", "journal", "analyze", "get_", "abort", "schema",
                     "search_runs")  # fmt: skip
        if any(w in lname for w in read_only):
            return
        raw_vars = tool_input.get("variables")
        variables = raw_vars if isinstance(raw_vars, Mapping) else None
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

    # -- shell

    def shell(
        self, command: str, cwd: Path | None, depth: int = 0, variables: dict[str, str] | None = None
    ) -> None:
        if depth > _MAX_NESTING:
            raise Refuse(
                "the command nests shells too deeply to check. Instead: run the inner command directly."
            )
        if not command.strip():
            return
        script = parse(command, cwd, variables=variables)
        if script.errors and _CHAOS_WORD.search(command):
            raise Refuse(
                f"cannot parse the shell command to check it (near {script.errors[0][:60]!r}). "
                "Instead: fix the quoting and write the command out plainly."
            )
        for name, _value in script.assignments:
            if name in _POLICY_ENV:
                raise Refuse(
                    f"setting {name} switches the guardrail policy; only a person chooses the policy"
                )
        written: set[Path] = set()
        for cmd in script.commands:
            self.command(cmd, depth, written)

    def command(self, cmd: Command, depth: int, written: set[Path]) -> None:
        if not cmd.argv:
            self.writes(cmd, Resolved([]), written)
            return
        res = resolve(cmd.argv, cmd.env)
        for name in res.env:
            if name in _POLICY_ENV:
                raise Refuse(
                    f"setting {name} switches the guardrail policy; only a person chooses the policy"
                )
        if res.shell_string is not None:
            self.shell(res.shell_string, cmd.cwd, depth + 1)
            return
        if res.remote is not None:
            self.remote(res, cmd, depth)
            return
        self.writes(cmd, res, written)
        self.secrets(cmd)
        if not res.argv:
            return
        head = res.argv[0]
        if not is_known(head):
            raise Refuse(
                f"the command name in {cmd.text[:80]!r} is only known at run time, so it cannot be checked. "
                "Instead: write the program's name literally."
            )
        args = res.argv[1:]
        if head in SHELLS:
            self.shell_program(cmd, res, depth, written)
        elif head in ("eval",):
            if not all(is_known(a) for a in args):
                raise Refuse(
                    "`eval` of words built at run time cannot be checked. Instead: run the command itself."
                )
            self.shell(" ".join(args), cmd.cwd, depth + 1)
        elif head in ("source", "."):
            self.script_file(args[0] if args else "", cmd, depth, written, "source")
        elif PYTHON.fullmatch(head) or head in INTERPRETERS:
            self.interpreter(cmd, res, depth, written)
        elif head == "faultplane":
            self.faultplane(args, cmd, res)
        elif head == "chaos":
            self.chaostoolkit(args, cmd, res)
        elif "/" in cmd.argv[0] and _is_shell_script(resolve_path(cmd.argv[0], cmd.cwd), written):
            self.script_file(cmd.argv[0], cmd, depth, written, "./script")
        else:
            self.fault_tool(head, args, cmd, res)

    # -- shells, scripts, interpreters

    def shell_program(self, cmd: Command, res: Resolved, depth: int, written: set[Path]) -> None:
        args = res.argv[1:]
        i = 0
        while i < len(args):
            a = args[i]
            if a.startswith("-") and not a.startswith("--") and "c" in a[1:]:
                code = args[i + 1] if i + 1 < len(args) else ""
                if not is_known(code):
                    raise Refuse(
                        "`sh -c` with a command built at run time cannot be checked. Instead: run it directly."
                    )
                self.shell(code, cmd.cwd, depth + 1)
                return
            if a in ("-o", "-O", "+o", "+O", "--rcfile", "--init-file"):
                i += 2
                continue
            if a.startswith(("-", "+")) and a != "-":
                i += 1
                continue
            self.script_file(a, cmd, depth, written, res.argv[0])
            return
        # no script and no -c: the commands come from stdin
        if cmd.stdin is not None:
            self.shell(cmd.stdin, cmd.cwd, depth + 1)
        elif cmd.piped or any(op.startswith("<") for op, _ in cmd.redirects):
            raise Refuse(
                "text piped into a shell cannot be checked before it runs. "
                "Instead: run the commands directly (one Bash call per command)."
            )

    def script_file(self, word: str, cmd: Command, depth: int, written: set[Path], how: str) -> None:
        path = resolve_path(word, cmd.cwd)
        if path is None:
            raise Refuse(
                f"`{how}` of a script chosen at run time cannot be checked. Instead: name the script."
            )
        if path in written:
            raise Refuse(_WRITE_THEN_RUN)
        try:
            if path.stat().st_size > _MAX_SCRIPT_BYTES:
                raise Refuse(f"{path} is too large to check ({_MAX_SCRIPT_BYTES} bytes at most)")
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return  # no such script: the shell fails before anything runs
        self.shell(text, cmd.cwd, depth + 1)

    def interpreter(self, cmd: Command, res: Resolved, depth: int, written: set[Path]) -> None:
        head = res.argv[0]
        code: str | None = None
        script: str | None = None
        if PYTHON.fullmatch(head):
            module, margs, code, script = python_module(res.argv)
            if module is not None:
                if not is_known(module):
                    raise Refuse("`python -m` of a module chosen at run time cannot be checked")
                if module.split(".")[0] == "faultplane":
                    self.faultplane(margs, cmd, res)
                return
        else:
            for i, a in enumerate(res.argv[1:], 1):
                if a in ("-e", "-E", "--eval", "-c", "-r", "-x") or (
                    a.startswith("-") and a.endswith("e") and head == "perl"
                ):
                    code = res.argv[i + 1] if i + 1 < len(res.argv) else ""
                    break
                if not a.startswith("-"):
                    script = a
                    break
        if script == "-":
            script = None  # `python -`: the program is stdin
        if code is None and script is None and cmd.stdin is not None:
            code = cmd.stdin
        if code is not None:
            if not is_known(code):
                raise Refuse(
                    f"{head} code built at run time cannot be checked. Instead: write it to a file a person can read."
                )
            named = protect.mentions(code)
            if named:
                raise Refuse(f"{head} code names {named}; only a person changes guardrail files")
            if re.search(r"\bfaultplane\b", code):
                raise Refuse(
                    f"{head} code that uses faultplane is not checked by the hook. "
                    "Instead: run the CLI, e.g. `faultplane run EXPERIMENT.yaml` (or `faultplane validate`)."
                )
            self.fault_words_in_code(code, head)
            if head == "perl" and any(a.startswith("-") and "i" in a.lstrip("-") for a in res.argv[1:]):
                for a in res.argv[1:]:
                    self.check_write(a, cmd.cwd, "perl -i")
            return
        if script is not None:
            path = resolve_path(script, cmd.cwd)
            if path is None:
                raise Refuse(
                    f"a {head} script chosen at run time cannot be checked. Instead: name the script."
                )
            if path in written:
                raise Refuse(_WRITE_THEN_RUN)
        elif cmd.piped:
            raise Refuse(
                f"text piped into {head} cannot be checked. Instead: run a script file a person can read."
            )

    def fault_words_in_code(self, code: str, head: str) -> None:
        """Interpreter code that shells out to a fault tool is as opaque as a script: refuse if it could."""
        if re.search(
            r"\b(subprocess|os\.system|popen|exec[lv]p?e?|execSync|execFile|child_process|spawn|system|`)",
            code,
            re.I,
        ) and re.search(
            r"\b(faultplane|chaos\s+run|kubectl|helm|tc\s|iptables|nft\s|stress-ng|toxiproxy|pumba|pkill|killall)\b",
            code,
        ):
            raise Refuse(
                f"{head} code that starts a chaos tool cannot be checked. Instead: run the tool's command directly."
            )

    def remote(self, res: Resolved, cmd: Command, depth: int) -> None:
        host = res.via[-1].split(" ", 1)[1]
        text = res.remote or ""
        if not is_known(text):
            if _CHAOS_WORD.search(text):
                raise Refuse(
                    "a remote command built at run time cannot be checked. Instead: write it literally."
                )
            return
        script = parse(text, None)
        if script.errors and _CHAOS_WORD.search(text):
            raise Refuse("cannot parse the remote command to check it. Instead: write it out plainly.")
        for inner in script.commands:
            if not inner.argv:
                continue
            r = resolve(inner.argv, inner.env)
            if r.argv and self.is_chaos(r.argv[0], r.argv[1:]):
                # the host the fault lands on is a target like any argument
                self.scan_values({"host": host, "arguments": [*r.argv]}, f"`{r.argv[0]}` over ssh to {host}")
        self.shell(text, None, depth + 1)

    # -- writes to guardrail files

    def writes(self, cmd: Command, res: Resolved, written: set[Path]) -> None:
        for op, target in cmd.redirects:
            if op in (">", ">>", "&>", "&>>", ">|", "<>", ">&") and not (op == ">&" and target.isdigit()):
                path = self.check_write(target, cmd.cwd, f"redirect {op}")
                if path is not None:
                    written.add(path)
        if not res.argv or not is_known(res.argv[0]):
            return
        head, args = res.argv[0], res.argv[1:]
        positional = [a for a in args if not a.startswith("-") or a == "-"]
        targets: list[str] = []
        if head in _WRITE_ALL or head == "tee":
            targets = positional
        elif head in ("cp", "install", "rsync", "scp", "curl", "wget"):
            dest = _option_value(args, ("-t", "--target-directory"))
            if head in ("curl", "wget"):
                dest = _option_value(args, ("-o", "--output", "-O", "--output-document"))
                targets = [dest] if dest else []
            else:
                targets = [dest] if dest else positional[-1:]
                if head == "rsync" and "--remove-source-files" in args:
                    targets = positional
        elif head == "dd":
            targets = [a[3:] for a in args if a.startswith("of=")]
        elif head == "sed" and any(
            a.startswith("-i") or a.startswith("--in-place") or re.fullmatch(r"-[a-zA-Z]*i.*", a)
            for a in args
        ):
            targets = positional
        elif (
            head == "git"
            and positional[:1]
            and positional[0] in ("checkout", "restore", "rm", "mv", "apply", "am")
        ):
            targets = positional[1:]
        elif head in ("patch", "ed", "ex", "vi", "vim", "nvim", "nano", "emacs"):
            targets = positional
        for t in targets:
            path = self.check_write(
                t, cmd.cwd, head, recursive=head in ("rm", "mv", "chmod", "chown", "rsync")
            )
            if path is not None:
                written.add(path)
        if head in ("chmod",) and any(a in ("+x", "u+x", "a+x", "755", "700") for a in args):
            pass  # marking a just-written file executable matters when it runs: caught at that point

    def check_write(self, word: str, cwd: Path | None, how: str, *, recursive: bool = False) -> Path | None:
        if not is_known(word):
            if protect.could_name_guardrail(word.replace(UNKNOWN, "*")):
                raise Refuse(
                    f"`{how}` writes to a path only known at run time, which could be a guardrail file. "
                    "Instead: write the path out literally."
                )
            return None
        path = resolve_path(word, cwd)
        if path is None:
            if protect.POLICY_NAME.search(word) or ".faultplane" in word:
                raise Refuse(f"`{how}` would change {word}, a guardrail file; only a person edits it")
            return None
        for candidate in [path, *protect.matches(word, cwd)]:
            why = protect.covers(candidate) if recursive else protect.protected(candidate)
            if why:
                raise Refuse(
                    f"`{how}` would change a guardrail file: {why}. Instead: ask the person to make this change."
                )
        return path

    def secrets(self, cmd: Command) -> None:
        for word in cmd.argv[1:]:
            if not is_known(word):
                continue
            for piece in [word, *re.findall(r"(?:^|=)([~/.][^\s=]*)", word)]:
                path = resolve_path(piece, cmd.cwd)
                why = protect.secret(path) if path is not None else None
                if why is None and protect.names_key(piece):
                    why = f"{piece[:80]!r} names the approval key"
                if why:
                    raise Refuse(f"the command touches Faultplane's approval secrets ({why}); agents may not")

    # -- chaos tools

    def faultplane(self, args: list[str], cmd: Command, res: Resolved) -> None:
        """`args` are the arguments after `faultplane`."""
        positional: list[str] = []
        options: dict[str, list[str]] = {}
        j = 0
        while j < len(args):
            a = args[j]
            if a.startswith("--") and "=" in a:
                k, _, v = a.partition("=")
                options.setdefault(k, []).append(v)
            elif a.startswith("-") and a != "-":
                if a in _TAKES_VALUE and j + 1 < len(args):
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
        if not is_known(sub):
            raise Refuse(_BUILT_AT_RUN_TIME.format(what="faultplane"))
        if sub == "approve" or (sub, *positional[1:2]) in {
            ("guard", "approve"),
            ("approvals", "keygen"),
            ("approvals", "sign"),
        }:
            raise Refuse("approvals are given by a person with `faultplane approve`, not by an agent")
        if "--policy" in options:
            raise Refuse("`--policy` switches the guardrail policy; only a person chooses the policy")
        if sub in _READ_ONLY or sub == "guard":
            return
        words = [*args, *([UNKNOWN] if res.extra_unknown else [])]
        if not all(is_known(w) for w in words):
            raise Refuse(_BUILT_AT_RUN_TIME.format(what="faultplane"))
        cwd = self.need_cwd(cmd, positional[1:] + options.get("--var-file", []))
        variables: dict[str, Any] = {}
        try:
            from faultplane.core.config import load_var_file, parse_var

            for vf in options.get("--var-file", []):
                variables.update(load_var_file(vf if Path(vf).is_absolute() else cwd / vf))
            for item in options.get("--var", []):
                k, v = parse_var(item)
                variables[k] = v
        except Exception as exc:
            raise Refuse(f"cannot read the command's variables to check them: {exc}") from None
        if variables:
            self.scan_values({"variables": variables}, "the command's --var values")
        approval = _last(options, "--approval") or os.environ.get("FAULTPLANE_APPROVAL")
        store_path = _last(options, "--store")
        if sub in ("run", "gameday", "search"):
            targets = positional[1:] if sub == "run" else [p for p in positional[1:] if Path(p).suffix]
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

    def chaostoolkit(self, args: list[str], cmd: Command, res: Resolved) -> None:
        """Chaos Toolkit: `chaos [global options] run [options] EXPERIMENT` runs the experiment's actions."""
        i = 0
        global_value = {"--log-file", "--settings", "--log-format", "--log-file-level"}
        while i < len(args) and args[i].startswith("-"):
            i += 2 if args[i] in global_value and "=" not in args[i] else 1
        if i >= len(args):
            return
        sub = args[i]
        if not is_known(sub):
            raise Refuse(_BUILT_AT_RUN_TIME.format(what="chaos"))
        if sub != "run":
            return  # discover, init, info, validate only read or write files of their own
        rest = [*args[i + 1 :], *([UNKNOWN] if res.extra_unknown else [])]
        if not all(is_known(w) for w in rest):
            raise Refuse(_BUILT_AT_RUN_TIME.format(what="chaos"))
        value_opts = {
            "--journal-path",
            "--dry",
            "--rollback-strategy",
            "--var",
            "--var-file",
            "--hypothesis-strategy",
            "--hypothesis-frequency",
            "--fail-fast",
            "--control-file",
        }
        positional: list[str] = []
        variables: dict[str, Any] = {}
        var_files: list[str] = []
        j = 0
        while j < len(rest):
            a = rest[j]
            opt, eq, inline = a.partition("=")
            if a.startswith("-") and opt in value_opts:
                value = inline if eq else (rest[j + 1] if j + 1 < len(rest) else "")
                j += 1 if eq else 2
                if opt == "--var":
                    k, _, v = value.partition("=")
                    variables[k.split(":", 1)[0]] = v
                elif opt == "--var-file":
                    var_files.append(value)
                continue
            if not a.startswith("-"):
                positional.append(a)
            j += 1
        cwd = self.need_cwd(cmd, positional + var_files)
        if var_files:
            try:
                from faultplane.core.config import load_var_file

                for vf in var_files:
                    variables.update(load_var_file(vf if Path(vf).is_absolute() else cwd / vf))
            except Exception as exc:
                raise Refuse(f"cannot read the command's variables to check them: {exc}") from None
        if variables:
            self.scan_values({"variables": variables}, "the `chaos run` --var values")
        for p in positional[:1]:
            if re.match(r"https?://", p):
                raise Refuse(
                    "`chaos run` of an experiment fetched at run time cannot be checked. "
                    "Instead: download it, read it, and run the local file."
                )
            path = Path(os.path.expanduser(p))
            self.experiment(path if path.is_absolute() else cwd / path, repr(p), variables=variables)

    def is_chaos(self, head: str, args: list[str]) -> bool:
        if head in _FAULT_TOOLS or head in ("faultplane", "chaos"):
            return True
        if head in _VERB_TOOLS and not all(is_known(a) for a in args[:3]):
            return True  # `kubectl "$@"`: the verb itself is decided at run time
        if head in ("kubectl", "oc", "kubecolor"):
            verb = _kube_verb(args)
            return (
                verb is None
                or verb in _KUBE_MUTATING
                or (verb == "config" and any(a in ("use-context", "set-context", "use") for a in args))
            )
        if head == "helm":
            verb = next((a for a in args if not a.startswith("-")), None)
            return verb is None or verb in _HELM_MUTATING
        if head in ("docker", "podman", "nerdctl", "crictl"):
            verb = next((a for a in args if not a.startswith("-")), None)
            return verb is None or verb in _CONTAINER_MUTATING
        if head in ("aws", "gcloud", "az", "doctl"):
            return any(is_known(a) and _CLOUD_MUTATING.search(a) for a in args)
        if head in ("systemctl", "service"):
            return any(a in ("stop", "restart", "kill", "disable", "mask", "isolate") for a in args)
        return False

    def fault_tool(self, head: str, args: list[str], cmd: Command, res: Resolved) -> None:
        if not self.is_chaos(head, args):
            return
        if not all(is_known(a) for a in args) or res.extra_unknown:
            # a fault whose target arrives at run time cannot be checked against production names
            raise Refuse(_BUILT_AT_RUN_TIME.format(what=head))
        if cmd.piped and "-" in args:
            raise Refuse(
                f"`{head}` reads what it acts on piped into it, which cannot be checked. "
                f"Instead: write it to a file and pass the file (`{head} ... -f FILE`)."
            )
        expanded = _expand_flags(args)
        values: dict[str, Any] = {"arguments": [head, *expanded]}
        if cmd.stdin is not None:
            values["stdin"] = cmd.stdin  # `kubectl apply -f - <<EOF`: the manifest is in the here-document
        globbed = _expand_globs(args, cmd.cwd)
        if globbed:
            values["globbed"] = globbed  # bash hands the tool what `pr*.yaml` matches, not the pattern
        values.update(_flag_labels(expanded))
        if head in ("kubectl", "oc", "kubecolor", "helm") and "context" not in values:
            current = _current_kube_context(cmd.env)
            if current:
                values["context"] = current  # no --context: the fault lands on the current context
        if head in ("kubectl", "oc", "kubecolor", "helm"):
            self.kube_namespace(head, expanded, values)
        self.scan_values(values, f"`{head}` (a fault tool)")

    def kube_namespace(self, head: str, args: list[str], values: dict[str, Any]) -> None:
        """With declared namespaces, a mutating kube command must name a declared one: without `-n` it acts
        on whatever namespace the kubeconfig's context sets (which the agent can change), with `-A` on all."""
        inventory = self.policy().inventory
        if inventory is None or inventory.kube_namespaces is None:
            return
        if any(a in ("-A", "--all-namespaces") for a in args):
            raise Refuse(
                f"Faultplane policy refuses `{head}` across all namespaces (-A): the policy's target inventory "
                f"declares only {', '.join(inventory.kube_namespaces)}. Instead: name one with -n."
            )
        words = _kube_words(args)
        verb = words[0] if words else None
        kind = words[1] if len(words) > 1 else ""
        if head != "helm" and kind in ("namespace", "namespaces", "ns"):
            values["namespaces_named"] = [f"-n {w}" for w in words[2:]]  # `delete ns X`: X is the target
            return
        node_scoped = (
            verb in ("cordon", "uncordon", "drain", "taint", "config")
            or kind in ("node", "nodes", "no")
            or any(w.startswith(("node/", "nodes/")) for w in words)
        )
        if "namespace" not in values and not node_scoped:
            raise Refuse(
                f"Faultplane policy refuses `{head} {verb or ''}` without a namespace: the policy's target "
                "inventory declares the lab's namespaces, and without -n the command acts on the namespace "
                f"the kubeconfig sets. Instead: add `-n NAMESPACE` with one of {', '.join(inventory.kube_namespaces)}."
            )

    def need_cwd(self, cmd: Command, paths: Iterable[str]) -> Path:
        if cmd.cwd is None and any(not Path(os.path.expanduser(p)).is_absolute() for p in paths):
            raise Refuse(
                "the command changes to a folder only known at run time, so its relative paths cannot be "
                "checked. Instead: use an absolute path or `cd` to a literal folder."
            )
        return cmd.cwd or self.cwd


_WRITE_THEN_RUN = (
    "the command writes a script and runs it, so what runs cannot be checked. Instead: write the script in "
    "one step, let it be read, then run it (or run its commands directly)."
)
_BUILT_AT_RUN_TIME = (
    "the `{what}` command builds words at run time ($(...), `...`, $VAR, xargs, find -exec, a loop), so it "
    "cannot be checked before it runs. Instead: write the {what} command out literally."
)


def _is_shell_script(path: Path | None, written: set[Path]) -> bool:
    """A program run by path that the hook reads like `bash FILE`: one written in this command (refused), or a
    shell script on disk (judged line by line). Compiled programs and other interpreters stay opaque."""
    if path is None or path in written:
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(128)
    except OSError:
        return False
    if head.startswith(b"#!"):
        first = head.split(b"\n", 1)[0]
        return any(sh.encode() in first.split(b"/")[-1] for sh in ("sh", "bash", "zsh", "dash", "ksh"))
    return path.suffix == ".sh"


def _expand_globs(args: list[str], cwd: Path | None) -> list[str]:
    import glob

    out: list[str] = []
    for a in args:
        if cwd is None or not re.search(r"[*?\[]", a):
            continue
        pattern = a if os.path.isabs(a) else str(cwd / a)
        try:
            out += [os.path.relpath(m, cwd) if not os.path.isabs(a) else m for m in glob.glob(pattern)[:200]]
        except (OSError, ValueError):
            continue
    return out


def _last(options: Mapping[str, list[str]], name: str) -> str | None:
    values = options.get(name) or []
    return values[-1] if values else None


def _option_value(args: list[str], names: tuple[str, ...]) -> str | None:
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                return args[i + 1]
            if n.startswith("--") and a.startswith(n + "="):
                return a.split("=", 1)[1]
            if not n.startswith("--") and a.startswith(n) and len(a) > len(n):
                return a[len(n) :]
    return None


def _kube_words(args: list[str]) -> list[str]:
    """The positional words of a kube command (verb, kind, names), skipping global flags and their values."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            i += 2 if a in _KUBE_GLOBAL_VALUE else 1
            continue
        out.append(a)
        i += 1
    return out


def _kube_verb(args: list[str]) -> str | None:
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            i += 2 if a in _KUBE_GLOBAL_VALUE else 1
            continue
        return a
    return None


def _expand_flags(args: list[str]) -> list[str]:
    """`-nprod` -> `-n prod`, `--namespace=prod` -> `--namespace prod`: the forms kubectl and helm accept."""
    out: list[str] = []
    for a in args:
        if a.startswith("--") and "=" in a:
            k, _, v = a.partition("=")
            out += [k, v]
        elif len(a) > 2 and a[0] == "-" and a[1] in _SHORT_FLAG_NAMES and a[2] != "-":
            out += [_SHORT_FLAG_NAMES[a[1]], a[2:].removeprefix("=")]
        else:
            out.append(a)
    return out


def _flag_labels(args: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for i, a in enumerate(args[:-1]):
        name = _KUBE_CONFIG_FLAGS.get(a) or ("namespace" if a == "-n" else None)
        if name:
            labels[name] = args[i + 1]
    return labels


def _current_kube_context(env: Mapping[str, str]) -> str | None:
    raw = env.get("KUBECONFIG") or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    for part in raw.split(os.pathsep)[:4]:
        try:
            with open(os.path.expanduser(part), encoding="utf-8", errors="replace") as fh:
                text = fh.read(1_000_000)
        except OSError:
            continue
        m = re.search(r"^current-context:\s*[\"']?([^\s\"']+)", text, re.M)
        if m:
            return m[1]
    return None
