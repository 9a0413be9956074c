"""Read a shell command the way bash will run it: which programs start, with which words, in which folder.

tree-sitter-bash gives the syntax tree (bashlex was measured too: ~120 ms to import, against ~20 ms here, and
the hook's budget is 50 ms). On top of it this module does what bash does before `exec`: it joins quoted and
concatenated pieces into words, substitutes variables assigned earlier in the same command line, tracks `cd`
and `pushd`, keeps environment prefixes with the command they prefix, and walks into subshells, `$(...)`,
backticks, pipelines, lists, loops, functions and here-documents. Whatever is only known at run time (an
unset variable, the output of `$(...)`, a loop variable) becomes UNKNOWN inside the word, so the judge can
refuse what it cannot resolve instead of guessing.
"""

from __future__ import annotations

import codecs
import os
import re
import sys
from importlib import machinery
from pathlib import Path

TYPE_CHECKING = False  # typing itself costs the hook ~5 ms; annotations are strings here anyway
if TYPE_CHECKING:
    from typing import Any

    import tree_sitter

UNKNOWN = "\x00"  # stands for a piece of a word that only exists at run time
_MAX_DEPTH = 40  # syntax nesting; deeper input is refused rather than walked

_PARSER: tree_sitter.Parser | None = None


def _parser() -> tree_sitter.Parser:
    global _PARSER
    if _PARSER is None:
        try:
            ts, bash = _binding("tree_sitter"), _binding("tree_sitter_bash")
        except (ImportError, OSError):
            import tree_sitter as ts
            import tree_sitter_bash as bash
        _PARSER = ts.Parser(ts.Language(bash.language()))
    return _PARSER


def _binding(package: str) -> Any:
    """The package's compiled `_binding` module, loaded without running the package's `__init__`: those import
    typing and importlib.resources (for syntax-highlighting queries the hook never reads), ~10 ms together."""
    name = f"{package}._binding"
    if name in sys.modules:
        return sys.modules[name]
    for entry in sys.path:
        folder = os.path.join(entry or ".", package)
        for suffix in machinery.EXTENSION_SUFFIXES:
            so = os.path.join(folder, "_binding" + suffix)
            if os.path.isfile(so):
                loader = machinery.ExtensionFileLoader(name, so)
                spec = machinery.ModuleSpec(name, loader, origin=so)
                module = loader.create_module(spec)
                loader.exec_module(module)
                return module
    raise ImportError(f"no compiled {name} on sys.path")


# plain classes, not dataclasses: `dataclasses` pulls in `inspect`, a few ms the hook cannot spare
class Command:
    """One simple command as bash will start it."""

    __slots__ = ("argv", "cwd", "env", "piped", "redirects", "stdin", "text")

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path | None,
        redirects: list[tuple[str, str]] | None = None,
        stdin: str | None = None,
        piped: bool = False,
        text: str = "",
    ) -> None:
        self.argv = argv  # words after expansion; a word holding UNKNOWN is (partly) decided at run time
        self.env = env  # `NAME=value` prefixes
        self.cwd = cwd  # None: a `cd` to somewhere only known at run time came first
        self.redirects = redirects if redirects is not None else []  # (operator, target word)
        self.stdin = stdin  # a here-document or here-string body
        self.piped = piped  # reads the output of a previous command in a pipeline
        self.text = text

    def __repr__(self) -> str:
        return f"Command({self.argv!r}, cwd={self.cwd}, redirects={self.redirects!r}, piped={self.piped})"


class Script:
    __slots__ = ("assignments", "commands", "errors")

    def __init__(
        self, commands: list[Command], errors: list[str], assignments: list[tuple[str, str]]
    ) -> None:
        self.commands = commands
        self.errors = errors  # pieces of the input the parser could not read
        self.assignments = assignments  # every NAME=value seen, prefixes and `export` included


def is_known(word: str) -> bool:
    return UNKNOWN not in word


def parse(command: str, cwd: Path | None, *, variables: dict[str, str] | None = None) -> Script:
    tree = _parser().parse(command.encode("utf-8", "surrogatepass"))
    walker = _Walker(cwd, dict(variables or {}))
    walker.statement(tree.root_node, 0)
    return Script(walker.commands, walker.errors, walker.assignments)


_ESCAPED = re.compile(r"\\(.)", re.S)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Walker:
    def __init__(self, cwd: Path | None, variables: dict[str, str]) -> None:
        self.cwd = cwd
        self.vars = variables
        self.commands: list[Command] = []
        self.errors: list[str] = []
        self.assignments: list[tuple[str, str]] = []
        self.dirs: list[Path | None] = []  # pushd stack

    # -- statements

    def statement(self, node: Any, depth: int, *, piped: bool = False) -> list[Command]:
        """Walk a statement; returns the simple commands it starts (for redirects that apply to all)."""
        if depth > _MAX_DEPTH:
            self.errors.append("the command nests too deeply to read")
            return []
        kind = node.type
        if node.is_missing or kind == "ERROR":
            self.errors.append(_text(node) or "(missing token)")
            return []
        if kind == "command":
            return self.simple(node, depth, piped=piped)
        if kind == "variable_assignment":
            name, value = self.assignment(node, depth)
            self.vars[name] = value
            return []
        if kind == "declaration_command":  # export/declare/local/readonly NAME=value
            for child in node.named_children:
                if child.type == "variable_assignment":
                    name, value = self.assignment(child, depth)
                    self.vars[name] = value
                elif child.type == "variable_name":
                    self.vars.setdefault(_text(child), UNKNOWN)
                else:
                    self.word(child, depth)
            return []
        if kind == "unset_command":
            for child in node.named_children:
                self.vars.pop(self.word(child, depth), None)
            return []
        if kind == "subshell":  # ( ... ): its cd and variables do not outlive it
            saved = (self.cwd, dict(self.vars), list(self.dirs))
            out = self.children(node, depth)
            self.cwd, self.vars, self.dirs = saved
            return out
        if kind == "pipeline":
            out = []
            first = True
            for child in node.named_children:
                out += self.statement(child, depth + 1, piped=piped or not first)
                first = False
            return out
        if kind == "redirected_statement":
            body = node.child_by_field_name("body")
            started = self.statement(body, depth + 1, piped=piped) if body is not None else []
            redirects, stdin = self.redirects(node, depth)
            for cmd in started or [self._placeholder(node)]:
                cmd.redirects += redirects
                if stdin is not None:
                    cmd.stdin = stdin
            return started
        if kind == "for_statement":  # the loop variable takes values we do not follow
            var = node.child_by_field_name("variable")
            for child in node.children_by_field_name("value"):
                self.word(child, depth)
            if var is not None:
                self.vars[_text(var)] = UNKNOWN
            out = []
            for child in node.named_children:
                if child.type in ("do_group", "compound_statement"):
                    out += self.statement(child, depth + 1)
            return out
        if kind in ("comment",):
            return []
        # program, list, compound statements, if/while/case/function bodies: every command inside may run
        return self.children(node, depth, piped=piped)

    def children(self, node: Any, depth: int, *, piped: bool = False) -> list[Command]:
        out: list[Command] = []
        for child in node.children:
            if child.is_missing or child.type == "ERROR":
                self.errors.append(_text(child) or "(missing token)")
            elif child.is_named:
                out += self.statement(child, depth + 1, piped=piped)
        return out

    def _placeholder(self, node: Any) -> Command:
        # `> file` alone (or after a construct with no simple command) still truncates the file
        cmd = Command([":"], {}, self.cwd, text=_text(node))
        self.commands.append(cmd)
        return cmd

    def assignment(self, node: Any, depth: int) -> tuple[str, str]:
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        name = _text(name_node) if name_node is not None else ""
        value = self.word(value_node, depth) if value_node is not None else ""
        if name_node is not None and name_node.type != "variable_name":
            name = UNKNOWN  # `a[i]=...`
        self.assignments.append((name, value))
        return name, value

    def redirects(self, node: Any, depth: int) -> tuple[list[tuple[str, str]], str | None]:
        out: list[tuple[str, str]] = []
        stdin: str | None = None
        for child in node.children:
            if child.type == "file_redirect":
                op = ""
                target = ""
                for part in child.children:
                    if not part.is_named:
                        op = _text(part)
                    elif part.type != "file_descriptor":
                        target = self.word(part, depth)
                out.append((op, target))
            elif child.type == "heredoc_redirect":
                body = ""
                for part in child.children:
                    if part.type == "heredoc_body":
                        body = self.heredoc(part, child, depth)
                    elif part.type == "file_redirect":
                        sub, _ = self.redirects(_Wrap([part]), depth)
                        out += sub
                    elif part.type == "pipeline" or part.type == "command" or part.type == "list":
                        self.statement(part, depth + 1)
                stdin = body
            elif child.type == "herestring_redirect":
                for part in child.named_children:
                    stdin = self.word(part, depth)
            elif child.type == "ERROR":
                self.errors.append(_text(child))
        return out, stdin

    def heredoc(self, body: Any, redirect: Any, depth: int) -> str:
        start = next((c for c in redirect.children if c.type == "heredoc_start"), None)
        quoted = start is not None and any(q in _text(start) for q in "'\"\\")
        if quoted:
            return _text(body)
        # an unquoted here-document expands $(...) and variables as it is read
        parts = []
        pos = body.start_byte
        raw = body.text or b""
        for child in body.named_children:
            parts.append(
                raw[pos - body.start_byte : child.start_byte - body.start_byte].decode("utf-8", "replace")
            )
            parts.append(self.word(child, depth))
            pos = child.end_byte
        parts.append(raw[pos - body.start_byte :].decode("utf-8", "replace"))
        return "".join(parts)

    # -- simple commands

    def simple(self, node: Any, depth: int, *, piped: bool) -> list[Command]:
        env: dict[str, str] = {}
        argv: list[str] = []
        redirects: list[tuple[str, str]] = []
        stdin: str | None = None
        for child in node.children:
            if not child.is_named:
                continue
            if child.type == "variable_assignment":
                name, value = self.assignment(child, depth)
                env[name] = value
            elif child.type == "command_name":
                for part in child.named_children:
                    argv += self.fields(part, depth)
            elif child.type in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                more, body = self.redirects(_Wrap([child]), depth)
                redirects += more
                stdin = body if body is not None else stdin
            elif child.type == "ERROR":
                self.errors.append(_text(child))
            else:
                argv += self.fields(child, depth)
        cmd = Command(argv, env, self.cwd, redirects, stdin, piped, _text(node))
        self.commands.append(cmd)
        self.after(cmd)
        return [cmd]

    def after(self, cmd: Command) -> None:
        """Builtins that change what later commands see: cd, pushd, popd, read."""
        if not cmd.argv:
            return
        head, args = cmd.argv[0], [a for a in cmd.argv[1:] if not (a.startswith("-") and len(a) > 1)]
        if head in ("cd", "pushd"):
            if head == "pushd":
                self.dirs.append(self.cwd)
            target = args[0] if args else "~"
            if not is_known(target) or target == "-":
                self.cwd = None
            else:
                new = Path(_expand_home(target))
                self.cwd = new if new.is_absolute() else (self.cwd / new if self.cwd is not None else None)
        elif head == "popd":
            self.cwd = self.dirs.pop() if self.dirs else None
        elif head in ("read", "mapfile", "readarray", "getopts"):
            for name in args:
                if _NAME.fullmatch(name):
                    self.vars[name] = UNKNOWN

    # -- words

    def fields(self, node: Any, depth: int) -> list[str]:
        """The words one argument becomes: an unquoted `$x` is split on whitespace (`c="faultplane run x";
        $c` runs faultplane), and with IFS changed the split is unknown."""
        value = self.word(node, depth)
        unquoted = node.type in ("simple_expansion", "expansion") or (
            node.type == "concatenation"
            and any(c.type in ("simple_expansion", "expansion") for c in node.children)
        )
        if not unquoted or not is_known(value):
            return [value]
        if "IFS" in self.vars or any(name == "IFS" for name, _ in self.assignments):
            return [value + UNKNOWN]
        return value.split()

    def word(self, node: Any, depth: int) -> str:
        if depth > _MAX_DEPTH:
            self.errors.append("the command nests too deeply to read")
            return UNKNOWN
        kind = node.type
        if kind == "word":
            text = _text(node)
            text = _ESCAPED.sub(lambda m: "" if m[1] == "\n" else m[1], text)
            return _expand_home(text)
        if kind == "number":
            return _text(node)
        if kind == "raw_string":
            return _text(node)[1:-1]
        if kind == "ansi_c_string":
            body = _text(node)[2:-1]
            try:
                return codecs.decode(body.encode("latin-1", "backslashreplace"), "unicode_escape")
            except (UnicodeDecodeError, ValueError):
                return UNKNOWN
        if kind == "translated_string":  # $"..."
            return "".join(self.word(c, depth + 1) for c in node.named_children)
        if kind in ("string", "concatenation"):
            return self.pieces(node, depth)
        if kind == "string_content":
            return _ESCAPED.sub(lambda m: m[1] if m[1] in '$`"\\' else m[0], _text(node))
        if kind == "simple_expansion":
            name = _text(node)[1:]
            return self.lookup(name)
        if kind == "expansion":
            names = [c for c in node.named_children if c.type == "variable_name"]
            if len(node.named_children) == 1 and names:  # ${name} with no operator
                return self.lookup(_text(names[0]))
            for child in node.named_children:  # ${a:-$(cmd)} still runs cmd
                if child.type != "variable_name":
                    self.word(child, depth + 1)
            return UNKNOWN
        if kind in ("command_substitution", "process_substitution"):
            saved = (self.cwd, dict(self.vars), list(self.dirs))
            self.children(node, depth + 1)
            self.cwd, self.vars, self.dirs = saved
            return UNKNOWN
        if kind == "arithmetic_expansion":
            return UNKNOWN
        if kind == "ERROR":
            self.errors.append(_text(node))
            return UNKNOWN
        # brace expressions, globs with extglob, anything new to the grammar: not resolved here
        for child in node.named_children:
            if child.type in ("command_substitution", "process_substitution"):
                self.word(child, depth + 1)
        return _text(node) if node.type == "brace_expression" else UNKNOWN

    def pieces(self, node: Any, depth: int) -> str:
        out = []
        raw, base, end = node.text or b"", node.start_byte, None
        for child in node.children:
            if end is not None and child.start_byte > end:
                # what the grammar leaves between a string's pieces (a newline) is part of the string: dropped,
                # `bash -c "echo hi<newline>faultplane run prod.yaml"` read as one command, `echo hifaultplane`
                out.append(raw[end - base : child.start_byte - base].decode("utf-8", "replace"))
            end = child.end_byte
            if child.type == '"':
                continue
            if not child.is_named:
                out.append(_text(child))  # a bare `$` at the end of a string stays literal
                continue
            out.append(self.word(child, depth + 1))
        return "".join(out)

    def lookup(self, name: str) -> str:
        if name in self.vars:
            return self.vars[name]
        if name == "HOME":
            return str(Path.home())
        if name == "PWD" and self.cwd is not None:
            return str(self.cwd)
        return UNKNOWN


class _Wrap:
    """A stand-in parent so `redirects()` can read a single redirect node."""

    def __init__(self, children: list[Any]) -> None:
        self.children = children


def _text(node: Any) -> str:
    raw = node.text if node is not None else b""
    return raw.decode("utf-8", "replace") if raw else ""


def _expand_home(word: str) -> str:
    if word == "~" or word.startswith("~/"):
        return str(Path.home()) + word[1:]
    return word


def resolve_path(word: str, cwd: Path | None) -> Path | None:
    """An argument as a path, or None when it is not known before the command runs."""
    if not is_known(word):
        return None
    path = Path(os.path.expanduser(word))
    if path.is_absolute():
        return path
    return cwd / path if cwd is not None else None
