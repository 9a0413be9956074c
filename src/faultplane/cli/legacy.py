"""Old option spellings, still accepted: each is rewritten to today's spelling with a one-line notice on stderr.

Before the conventions of docs/cli.md, `-o/--output` meant a format in some commands (`run -o json`) and a
file in others, files were also `--out`, `--out-dir` and `--export`, and `-f` meant `--framework` in the
compliance commands. Scripts written then keep working: each command (faultplane.cli.options.Command) rewrites
its own arguments before parsing them, so it declares today's spelling only. Where an old spelling is today's spelling
of something else (`design -o`), its value decides: a format name is the old meaning, anything else the new.
No import beyond the standard library: this runs on every command line.
"""

from __future__ import annotations

from collections.abc import Callable

FORMAT_NAMES = frozenset({"text", "json", "toon", "yaml", "table", "html", "markdown"})

ALWAYS = "always"  # the old spelling has no other meaning today
IF_FORMAT = "if-format"  # today the spelling means something else: only a format name is the old meaning
IF_NOT_FORMAT = "if-not-format"  # today it is -f/--format: a value that is no format is the old meaning

# (old spellings, today's spelling, when). A rule whose today's spelling holds a space is a flag that became
# an option with a value (`--toon` -> `--format toon`).
Rule = tuple[tuple[str, ...], str, str]
_FORMAT_WAS_OUTPUT: list[Rule] = [(("-o", "--output"), "--format", ALWAYS)]
_FRAMEWORK_WAS_F: Rule = (("-f",), "--framework", IF_NOT_FORMAT)

# keyed by the command's function (module.name), so the rules hold however the command is mounted
RULES: dict[str, list[Rule]] = {
    "faultplane.cli.core.run": _FORMAT_WAS_OUTPUT,
    "faultplane.cli.core.validate": _FORMAT_WAS_OUTPUT,
    "faultplane.cli.search.search": _FORMAT_WAS_OUTPUT,
    "faultplane.cli.guard.approve": _FORMAT_WAS_OUTPUT,
    "faultplane.cli.guard.check": _FORMAT_WAS_OUTPUT,
    "faultplane.cli.guard.policy_show": _FORMAT_WAS_OUTPUT,
    "faultplane.cli.gameday.run": _FORMAT_WAS_OUTPUT,
    "faultplane.cli.gameday.analyze": _FORMAT_WAS_OUTPUT,
    "faultplane.cli.gameday.list_": _FORMAT_WAS_OUTPUT,
    "faultplane.cli.gameday.templates": _FORMAT_WAS_OUTPUT,
    "faultplane.cli.analyze.baseline_cmd": _FORMAT_WAS_OUTPUT,
    "faultplane.cli.analyze.analyze": [
        (("--export",), "--output", ALWAYS),
        (("-o", "--output"), "--format", IF_FORMAT),
    ],
    "faultplane.cli.design.design": [
        (("--out",), "--output", ALWAYS),
        (("-o", "--output"), "--format", IF_FORMAT),
    ],
    "faultplane.cli.compliance.requirements": [*_FORMAT_WAS_OUTPUT, _FRAMEWORK_WAS_F],
    "faultplane.cli.compliance.report": [(("--out",), "--output", ALWAYS), _FRAMEWORK_WAS_F],
    "faultplane.cli.compliance.periodic": [(("--out-dir",), "--output", ALWAYS), _FRAMEWORK_WAS_F],
    "faultplane.cli.plane.report": [(("--toon",), "--format toon", ALWAYS)],
}


def rewrite(command: str, args: list[str], warn: Callable[[str], None]) -> list[str]:
    """The arguments of `command` (module.function) in today's spellings; `warn` gets a line per old one."""
    rules = RULES.get(command)
    if not rules:
        return args
    out: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":  # everything after is an argument, never an option
            out += args[i:]
            break
        name, eq, inline = token.partition("=") if token.startswith("--") else (token, "", "")
        rule = next((r for r in rules if name in r[0]), None)
        if rule is None:
            out.append(token)
            i += 1
            continue
        new = rule[1]
        if " " in new:  # a flag that became an option with a value
            out += new.split(" ")
            warn(f"faultplane: {token!r} is deprecated: use {new!r}")
            i += 1
            continue
        has_value = bool(eq) or i + 1 < len(args)
        value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
        is_format = value.lower() in FORMAT_NAMES
        applies = has_value and (
            rule[2] == ALWAYS
            or (rule[2] == IF_FORMAT and is_format)
            or (rule[2] == IF_NOT_FORMAT and not is_format and not value.startswith("-"))
        )
        if not applies:
            out.append(token)
            i += 1
            continue
        out += [new, value]
        warn(f"faultplane: '{name} {value}' is deprecated: use '{new} {value}'")
        i += 1 if eq else 2
    return out
