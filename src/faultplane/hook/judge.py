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

This module follows shells, scripts, interpreters and remote commands down to the simple commands they start;
what is chaos is `chaos_tools.py`'s, what guards the guardrail files `guarded_files.py`'s, and asking the
policy and the engine `asking.py`'s.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from faultplane.hook import protect
from faultplane.hook.argv import INTERPRETERS, PYTHON, SHELLS, Resolved, python_module, resolve
from faultplane.hook.asking import Refuse
from faultplane.hook.chaos_tools import ChaosTools
from faultplane.hook.guarded_files import GuardedFiles
from faultplane.hook.parse import Command, is_known, parse, resolve_path

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
            for target in [*_paths(tool_input), *_patched(tool_input)]:
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
        if isinstance(value, str):
            if value:
                out.append(value)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            out += [v for v in value if v]
        elif value is not None:  # a nested list or an object: what the tool makes of it cannot be known here
            raise Refuse(f"`{key}` is neither a path nor a list of paths; blocking to be safe")
    return out


def _patched(tool_input: Mapping[str, Any]) -> list[str]:
    """The files a patch-applying tool changes (`apply_patch`'s `input`, a `patch` or `diff` argument)."""
    return [
        target
        for key in ("input", "patch", "diff")
        if isinstance(text := tool_input.get(key), str)
        for target in protect.patch_targets(text)
    ]


def _abs(target: str, cwd: Path) -> Path:
    path = Path(os.path.expanduser(target))
    return path if path.is_absolute() else cwd / path


class Judge(ChaosTools, GuardedFiles):
    """One judgement: follows a command through shells and scripts to each simple command and judges it."""

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
        path = _named_script(word, cmd.cwd, written, f"`{how}` of a script")
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
            _named_script(script, cmd.cwd, written, f"a {head} script")
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


_WRITE_THEN_RUN = (
    "the command writes a script and runs it, so what runs cannot be checked. Instead: write the script in "
    "one step, let it be read, then run it (or run its commands directly)."
)


def _named_script(word: str, cwd: Path | None, written: set[Path], what: str) -> Path:
    """The script file `word` names; refused when it is chosen at run time or written by this same command."""
    path = resolve_path(word, cwd)
    if path is None:
        raise Refuse(f"{what} chosen at run time cannot be checked. Instead: name the script.")
    if path in written:
        raise Refuse(_WRITE_THEN_RUN)
    return path


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
