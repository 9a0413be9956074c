"""Start-up of the CLI: `--help` and `--version` load no command module, each command loads only its own,
and every command's help fits an 80-column terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from faultplane.cli.main import COMMANDS, app, load_module_commands
from policy_helpers import use_lab_policy

# what a command must not pay for unless it uses it
HEAVY = (
    "duckdb",
    "pydantic",
    "anyio",
    "httpx",
    "pyarrow",
    "rich",
    "mcp",
    "faultplane.engine",
    "faultplane.core.model",
)

_PROBE = """
import sys
sys.argv = ["faultplane", *sys.argv[1:]]
from faultplane.cli.entry import main
try:
    main()
except SystemExit:
    pass
heavy = {heavy!r}
loaded = sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy))
sys.stderr.write("LOADED " + " ".join(sorted({{m.split(".")[0] if not m.startswith("faultplane") else m for m in loaded}})) + "\\n")
"""


def _loaded(*argv: str) -> tuple[str, set[str]]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=HEAVY), *argv], capture_output=True, text=True, timeout=60
    )
    line = next(ln for ln in out.stderr.splitlines() if ln.startswith("LOADED"))
    return out.stdout + out.stderr, set(line.split()[1:])


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["-V"], []])
def test_help_and_version_import_nothing_heavy(argv: list[str]) -> None:
    stdout, loaded = _loaded(*argv)
    assert loaded == set(), f"`faultplane {' '.join(argv)}` imported {sorted(loaded)}"
    if argv and argv[0] != "--help":
        assert stdout.startswith("faultplane ") and stdout.split()[1][0].isdigit()
    else:
        assert all(name in stdout for name in COMMANDS)


def test_root_help_and_version_load_no_framework() -> None:
    """Answered before typer (~60 ms of imports) loads: the help text comes from faultplane.cli.commands."""
    for argv in (["--help"], ["--version"]):
        probe = _PROBE.format(heavy=("typer", "click")).replace(
            "from faultplane.cli.entry", "import os\nos.environ['COLUMNS'] = '100'\nfrom faultplane.cli.entry"
        )
        out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=60)
        loaded = next(ln for ln in out.stderr.splitlines() if ln.startswith("LOADED")).split()[1:]
        assert loaded == [], f"`faultplane {argv[0]}` imported {loaded}"


@pytest.mark.parametrize("columns", ["80", "200"])
def test_the_fast_root_help_is_what_click_renders(columns: str) -> None:
    from faultplane.cli.commands import root_help

    env = {**os.environ, "COLUMNS": columns}
    clicks = subprocess.run(  # faultplane.cli.main: the typer app itself, no fast path
        [sys.executable, "-m", "faultplane.cli.main", "--help"], capture_output=True, text=True, env=env
    )
    fast = subprocess.run(
        [sys.executable, "-m", "faultplane", "--help"], capture_output=True, text=True, env=env
    )
    assert clicks.returncode == fast.returncode == 0
    assert root_help() == fast.stdout == clicks.stdout


def test_a_narrow_terminal_gets_clicks_own_wrapping() -> None:
    env = {**os.environ, "COLUMNS": "60"}
    out = subprocess.run(
        [sys.executable, "-m", "faultplane", "--help"], capture_output=True, text=True, timeout=60, env=env
    )
    assert out.returncode == 0 and max(map(len, out.stdout.splitlines())) <= 60
    assert all(name in out.stdout for name in COMMANDS)


def test_a_command_loads_only_its_own_module() -> None:
    _, loaded = _loaded("guard", "--help")
    assert not {"duckdb", "faultplane.engine.lifecycle", "mcp", "pyarrow"} & loaded
    _, loaded = _loaded("run", "--help")
    assert "duckdb" not in loaded and "mcp" not in loaded


def test_version_through_the_app_and_the_console_script_agree() -> None:
    from faultplane import __version__

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"faultplane {__version__}"
    script = subprocess.run([sys.executable, "-m", "faultplane", "--version"], capture_output=True, text=True)
    assert script.returncode == 0 and script.stdout.strip() == f"faultplane {__version__}"


def test_the_command_table_is_what_the_modules_register() -> None:
    registered: dict[str, Any] = {}
    for module in sorted({m for m, _ in COMMANDS.values()}):
        for name, cmd in load_module_commands(module).items():
            assert name not in registered, f"{name} registered twice"
            registered[name] = (module, cmd)
    assert set(registered) == set(COMMANDS), "add new commands to faultplane.cli.main.COMMANDS"
    for name, (module, cmd) in registered.items():
        assert COMMANDS[name][0] == module
        assert COMMANDS[name][1] == cmd.get_short_help_str(limit=10_000), f"help of `{name}` changed"


def test_a_misspelt_command_gets_a_suggestion() -> None:
    result = CliRunner().invoke(app, ["rnu"])
    assert result.exit_code == 2 and "Did you mean 'run'?" in result.output
    result = CliRunner().invoke(app, ["guard", "chek"])
    assert result.exit_code == 2 and "Did you mean 'check'?" in result.output


def _every_command() -> list[list[str]]:
    root = typer.main.get_command(app)
    paths: list[list[str]] = [[]]
    ctx = typer._click.Context(root)

    def walk(group: Any, path: list[str]) -> None:
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            paths.append([*path, name])
            if hasattr(cmd, "list_commands"):
                walk(cmd, [*path, name])

    walk(root, [])
    return paths


@pytest.mark.parametrize("path", _every_command(), ids=lambda p: " ".join(p) or "faultplane")
def test_every_help_fits_80_columns(path: list[str]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    wide = [line for line in result.output.splitlines() if len(line) > 80]
    assert not wide, f"`faultplane {' '.join(path)} --help` has lines past 80 columns: {wide}"
    assert "Usage:" in result.output


def test_an_ambiguous_run_id_prefix_lists_the_matches(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    use_lab_policy("gates: {required: false}\n")
    exp = tmp_path / "exp.json"
    probe = {"type": "python", "module": "json", "func": "dumps", "arguments": {"obj": 1}}
    exp.write_text(
        json.dumps(
            {
                "title": "t",
                "description": "d",
                "steady-state-hypothesis": {
                    "title": "h",
                    "probes": [{"type": "probe", "name": "p", "tolerance": "1", "provider": probe}],
                },
                "method": [{"type": "probe", "name": "m", "provider": probe}],
            }
        )
    )
    runner = CliRunner()
    ids = []
    for _ in range(17):  # 17 ids of hex digits: two of them share a first character
        result = runner.invoke(app, ["run", str(exp), "-q", "--format", "json"])
        assert result.exit_code == 0, result.output
        ids.append(json.loads(result.stdout)["run_id"])
    first = next(c for c in "0123456789abcdef" if sum(i.startswith(c) for i in ids) >= 2)
    sharing = sorted(i for i in ids if i.startswith(first))
    shown = runner.invoke(app, ["journal", "show", first])
    assert shown.exit_code == 2
    assert "ambiguous" in shown.output and all(i in shown.output for i in sharing[:10])
    assert "more characters" in shown.output
    unique = runner.invoke(app, ["journal", "show", ids[0][:12], "-f", "json"])
    assert unique.exit_code == 0 and ids[0] in unique.stdout
    for wildcard in ("_", "%", ids[0][:3] + "%"):  # SQL LIKE wildcards are characters here, not patterns
        miss = runner.invoke(app, ["journal", "show", wildcard])
        assert miss.exit_code == 2 and "no journal" in miss.output


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "list", "--store", "/proc/no-such-dir/store.duckdb"],  # a store that cannot be opened
        ["journal", "show", "abc", "--store", "/dev/null"],  # not a database at all
    ],
)
def test_an_unanticipated_error_is_one_line_and_debug_shows_the_traceback(argv: list[str]) -> None:
    plain = subprocess.run(
        [sys.executable, "-m", "faultplane", *argv], capture_output=True, text=True, timeout=60
    )
    assert plain.returncode in (2, 4), plain.stderr
    assert "Traceback" not in plain.stderr and plain.stderr.strip(), plain.stderr
    if plain.returncode == 4:
        assert plain.stderr.startswith("faultplane: ") and "--debug" in plain.stderr
        debug = subprocess.run(
            [sys.executable, "-m", "faultplane", *argv, "--debug"], capture_output=True, text=True, timeout=60
        )
        assert debug.returncode == 1 and "Traceback" in debug.stderr
        env = {**os.environ, "FAULTPLANE_DEBUG": "1"}
        by_env = subprocess.run(
            [sys.executable, "-m", "faultplane", *argv], capture_output=True, text=True, timeout=60, env=env
        )
        assert "Traceback" in by_env.stderr


def test_a_huge_or_empty_run_id_is_a_short_error(store: Any) -> None:
    from faultplane.services.runs import load_journal

    with store.connect():
        pass
    for run_id in ("a" * 100_000, "", "%", "_" * 5_000):
        with pytest.raises(LookupError) as info:
            load_journal(run_id, store)
        assert len(str(info.value)) < 200 and "no journal" in str(info.value), str(info.value)[:300]
