"""What program a command line really starts once its wrappers are peeled off.

`sudo -E env X=1 nice -n5 timeout -s KILL 60 uv run --with y faultplane run exp.yaml` starts `faultplane`
with `run exp.yaml`; `find . -exec kubectl delete pod {} ;` starts `kubectl delete pod <a found name>`. The
wrappers' own options are skipped by their real syntax (which options take a value), so an option value is
never mistaken for the program.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from faultplane.hook.parse import UNKNOWN

# wrapper -> options that take a separate value (everything else starting with `-` is a lone flag)
_WRAPPERS: dict[str, set[str]] = {
    "sudo": {
        "-u",
        "-g",
        "-C",
        "-D",
        "-h",
        "-p",
        "-r",
        "-t",
        "-U",
        "-T",
        "--user",
        "--group",
        "--host",
        "--prompt",
        "--role",
        "--type",
        "--other-user",
        "--chdir",
        "--close-from",
        "--command-timeout",
    },
    "doas": {"-u", "-C"},
    "env": {"-u", "--unset", "-C", "--chdir", "-S", "--split-string"},
    "nice": {"-n", "--adjustment"},
    "nohup": set(),
    "exec": {"-a"},
    "command": set(),
    "builtin": set(),
    "time": {"-f", "--format", "-o", "--output"},
    "stdbuf": {"-i", "-o", "-e", "--input", "--output", "--error"},
    "ionice": {"-c", "-n", "-p", "-P", "-u", "--class", "--classdata"},
    "chrt": set(),
    "taskset": set(),
    "setsid": set(),
    "unbuffer": set(),
    "caffeinate": set(),
    "flock": {"-w", "-E", "--timeout", "--conflict-exit-code"},
    "xargs": {
        "-a",
        "-d",
        "-E",
        "-I",
        "-L",
        "-n",
        "-P",
        "-s",
        "--arg-file",
        "--delimiter",
        "--eof",
        "--max-lines",
        "--max-args",
        "--max-procs",
        "--max-chars",
        "--process-slot-var",
    },
    "watch": {"-n", "--interval", "-d"},
    "strace": {"-e", "-o", "-p", "-s", "-u"},
    "ltrace": {"-e", "-o", "-p", "-s", "-u"},
}
# `runner sub` pairs that run the next word as a program (with their own value-taking options)
_RUNNERS: dict[tuple[str, str], set[str]] = {
    ("uv", "run"): {
        "--with",
        "--with-editable",
        "--with-requirements",
        "--python",
        "-p",
        "--project",
        "--directory",
        "--package",
        "--extra",
        "--group",
        "--env-file",
        "--index",
        "--index-url",
        "--from",
        "-w",
        "--only-group",
        "--no-group",
        "--config-file",
        "--cache-dir",
    },
    ("uv", "tool"): set(),  # `uv tool run`: handled below
    ("poetry", "run"): {"-C", "--directory", "-P", "--project"},
    ("pipx", "run"): {"--spec", "--python", "--index-url", "--pip-args"},
    ("pdm", "run"): {"-p", "--project"},
    ("hatch", "run"): set(),
    ("rye", "run"): set(),
    ("pixi", "run"): {"-e", "--environment", "--manifest-path"},
    ("conda", "run"): {"-n", "--name", "-p", "--prefix"},
    ("mamba", "run"): {"-n", "--name", "-p", "--prefix"},
    ("micromamba", "run"): {"-n", "--name", "-p", "--prefix"},
    ("npx", ""): {"-p", "--package"},
    ("nix", "run"): set(),
}
_UVX_VALUE = {
    "--from",
    "--with",
    "--with-editable",
    "--with-requirements",
    "--python",
    "-p",
    "--index",
    "--index-url",
    "--env-file",
    "-w",
}

SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "mksh", "fish", "ash", "busybox", "tcsh", "csh"}
PYTHON = re.compile(r"(?:python|pypy)[0-9.]*(?:-dbg)?|py")
INTERPRETERS = {
    "perl",
    "ruby",
    "node",
    "nodejs",
    "deno",
    "bun",
    "php",
    "lua",
    "Rscript",
    "tclsh",
    "awk",
    "gawk",
    "osascript",
}


class Resolved:
    __slots__ = ("argv", "env", "extra_unknown", "remote", "shell_string", "via")

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.argv = argv  # argv[0] is the program's basename
        self.env = env if env is not None else {}
        self.via: list[str] = []  # the wrappers peeled off, outermost first
        self.extra_unknown = False  # xargs / find -exec: more arguments arrive at run time
        self.shell_string: str | None = None  # `env -S '...'`, `watch`: a command line of its own
        self.remote: str | None = None  # ssh HOST: the remote command line (its host in `via`)


def base(word: str) -> str:
    return PurePath(word).name or word  # `.` (source) has no name of its own


def _skip_options(words: list[str], i: int, takes_value: set[str]) -> int:
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        if words[i] == "--":
            return i + 1
        opt = words[i].split("=", 1)[0]
        i += 2 if (opt in takes_value and "=" not in words[i]) else 1
    return i


def _runner_spec(words: list[str], i: int, spec_option: str, takes_value: set[str]) -> tuple[int, str | None]:
    """Past a package runner's own options from `i` (`uvx --from P`, `pipx run --spec P`): the index of the
    first word after them, and the package `spec_option` names, if it is given."""
    spec = None
    while i < len(words) and words[i].startswith("-"):
        opt = words[i].split("=", 1)[0]
        if opt == spec_option:
            spec = (
                words[i].split("=", 1)[1] if "=" in words[i] else (words[i + 1] if i + 1 < len(words) else "")
            )
        i += 2 if (opt in takes_value and "=" not in words[i]) else 1
    return i, spec


def resolve(argv: list[str], env: dict[str, str] | None = None, depth: int = 0) -> Resolved:
    """Peel wrappers until the program that really runs is at argv[0]."""
    out = Resolved(list(argv), dict(env or {}))
    words = list(argv)
    for _ in range(32):  # wrappers of wrappers; bounded because the input is hostile
        if not words:
            break
        name = base(words[0])
        if "=" in words[0] and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0], re.S):
            k, _, v = words[0].partition("=")  # assignments after `env`/`sudo`
            out.env[k] = v
            words = words[1:]
            continue
        if name in _WRAPPERS:
            out.via.append(name)
            i = 1
            if name == "env":
                while i < len(words) and words[i].startswith("-") and words[i] != "-":
                    opt = words[i].split("=", 1)[0]
                    if opt in ("-S", "--split-string") or (opt.startswith("-S") and len(opt) > 2):
                        rest = (
                            words[i + 1 :] if opt in ("-S", "--split-string") and "=" not in words[i] else []
                        )
                        text = (
                            words[i][2:]
                            if opt.startswith("-S") and len(opt) > 2
                            else (words[i].split("=", 1)[1] if "=" in words[i] else (rest[0] if rest else ""))
                        )
                        out.shell_string = " ".join([text, *rest[1:]])
                        out.argv = []
                        return out
                    i += 2 if (opt in _WRAPPERS["env"] and "=" not in words[i]) else 1
            elif name == "timeout":
                pass
            elif name in ("chrt", "taskset"):
                i = _skip_options(words, 1, set())
                i += 1  # the priority or the CPU mask
                words = words[i:]
                continue
            elif name == "watch":
                i = _skip_options(words, 1, _WRAPPERS["watch"])
                out.shell_string = " ".join(words[i:])  # watch runs its arguments through `sh -c`
                out.argv = []
                return out
            else:
                i = _skip_options(words, 1, _WRAPPERS[name])
            if name == "xargs":
                out.extra_unknown = True
                if i >= len(words):
                    words = ["echo"]
                    break
            words = words[i:]
            continue
        if name == "busybox" and len(words) > 1:  # `busybox sh -c ...`: the applet is the program
            out.via.append(name)
            words = words[1:]
            continue
        if name == "timeout":
            out.via.append(name)
            i = _skip_options(words, 1, {"-s", "-k", "--signal", "--kill-after"})
            words = words[i + 1 :]  # the duration
            continue
        if name == "find":
            for j, w in enumerate(words):
                if w in ("-exec", "-execdir", "-ok", "-okdir"):
                    end = next(
                        (k for k in range(j + 1, len(words)) if words[k] in (";", "+", "\\;")), len(words)
                    )
                    inner = [UNKNOWN if "{}" in w2 else w2 for w2 in words[j + 1 : end]]
                    out.via.append("find")  # each `{}` is a found name: UNKNOWN already
                    words = inner
                    break
            else:
                break
            continue
        if name == "uvx" or (name == "uv" and words[1:3] == ["tool", "run"]):
            out.via.append("uvx")
            i, spec = _runner_spec(words, 1 if name == "uvx" else 3, "--from", _UVX_VALUE)
            if spec and i < len(words) and _package_name(spec) in ("faultplane", "chaostoolkit"):
                words = ["faultplane" if _package_name(spec) == "faultplane" else "chaos", *words[i + 1 :]]
                break
            words = words[i:]
            if words:
                words = [_package_name(words[0]), *words[1:]]
            continue
        if name == "pipx" and len(words) > 1 and words[1] == "run":
            out.via.append("pipx run")
            i, spec = _runner_spec(words, 2, "--spec", _RUNNERS[("pipx", "run")])
            if spec and i < len(words) and _package_name(spec) == "faultplane":
                words = ["faultplane", *words[i + 1 :]]
                break
            words = words[i:]
            if words:
                words = [_package_name(words[0]), *words[1:]]
            continue
        runner = (name, words[1] if len(words) > 1 else "")
        if name == "npx":
            runner = ("npx", "")
        if runner in _RUNNERS and runner != ("uv", "tool"):
            out.via.append(" ".join(x for x in runner if x))
            start = 1 if name == "npx" else 2
            i = _skip_options(words, start, _RUNNERS[runner])
            words = words[i:]
            continue
        if name in ("ssh", "mosh"):
            i = _skip_options(
                words,
                1,
                {
                    "-b",
                    "-c",
                    "-D",
                    "-E",
                    "-e",
                    "-F",
                    "-I",
                    "-i",
                    "-J",
                    "-L",
                    "-l",
                    "-m",
                    "-O",
                    "-o",
                    "-p",
                    "-Q",
                    "-R",
                    "-S",
                    "-W",
                    "-w",
                    "-B",
                    "-P",
                },
            )
            if i + 1 < len(words):
                out.via.append(f"ssh {words[i]}")
                out.remote = " ".join(words[i + 1 :])
                out.argv = []
                return out
            break
        break
    out.argv = words
    if words:
        out.argv = [base(words[0]), *words[1:]]
    return out


def _package_name(spec: str) -> str:
    """`faultplane==0.1`, `faultplane[drivers]@latest`, `git+https://…/faultplane` -> the distribution."""
    spec = spec.rstrip("/")
    if "://" in spec or spec.startswith("git+"):
        spec = spec.rsplit("/", 1)[-1].removesuffix(".git")
    return re.split(r"[\[=<>!~@ ;]", spec, maxsplit=1)[0].strip().casefold().replace("_", "-")


def python_module(argv: list[str]) -> tuple[str | None, list[str], str | None, str | None]:
    """For a python command line: (module of `-m`, its arguments, code of `-c`, script path)."""
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "-m" or (a.startswith("-m") and len(a) > 2 and not a.startswith("--")):
            if a == "-m":
                return (argv[i + 1] if i + 1 < len(argv) else None), argv[i + 2 :], None, None
            return a[2:], argv[i + 1 :], None, None
        if a == "-c" or (
            a.startswith("-")
            and not a.startswith("--")
            and a.endswith("c")
            and set(a[1:]) <= set("BdEiIOqsSuvxc")
        ):
            return None, [], (argv[i + 1] if i + 1 < len(argv) else ""), None
        if a in ("-W", "-X", "--check-hash-based-pycs"):
            i += 2
            continue
        if a == "-" or not a.startswith("-"):
            return None, argv[i + 1 :], None, a
        i += 1
    return None, [], None, None
