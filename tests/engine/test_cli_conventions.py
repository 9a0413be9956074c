"""One spelling per concept (docs/cli.md): -o/--output files, -f/--format formats, --json for programs; the old
spellings still work with one notice on stderr; store and policy mistakes are one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
from typer.testing import CliRunner

from clihelp import small_experiment
from faultplane.cli.legacy import rewrite
from faultplane.cli.main import app
from faultplane.core.store import Store
from policy_helpers import use_lab_policy

# commands whose --format is not what they print: the journal's own format (always JSON) and an input file's
NOT_PRINTED_FORMATS = {"journal export", "dora import"}


def _commands() -> list[tuple[str, Any, Any]]:
    root = typer.main.get_command(app)
    ctx = typer._click.Context(root)
    found: list[tuple[str, Any, Any]] = []

    def walk(group: Any, path: list[str]) -> None:
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            found.append((" ".join([*path, name]), cmd, ctx))
            if hasattr(cmd, "list_commands"):
                walk(cmd, [*path, name])

    walk(root, [])
    return found


def test_every_command_spells_files_formats_and_json_alike() -> None:
    wrong: list[str] = []
    for path, cmd, ctx in _commands():
        options = [p for p in cmd.params if p.param_type_name == "option"]
        names = {o for p in options for o in p.opts}
        for p in options:
            if "-o" in p.opts and ("--output" not in p.opts or "<path>" not in p.get_help_record(ctx)[0]):
                wrong.append(f"{path}: -o is not --output <path>: {p.opts}")
            if "-f" in p.opts and "--format" not in p.opts:
                wrong.append(f"{path}: -f is not --format: {p.opts}")
            if "--output" in p.opts and "-o" not in p.opts:
                wrong.append(f"{path}: --output without -o")
        for old in ("--out", "--out-dir", "--export", "--toon"):
            if old in names:
                wrong.append(f"{path}: {old} is an old spelling")
        fmt = next((p for p in options if "--format" in p.opts), None)
        if fmt is not None and path not in NOT_PRINTED_FORMATS:
            if "-f" not in fmt.opts:
                wrong.append(f"{path}: --format without -f")
            if "--json" not in names:
                wrong.append(f"{path}: has --format but no --json")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("command", "args", "expected", "notices"),
    [
        ("faultplane.cli.core.run", ["x.yaml", "-o", "json", "-q"], ["x.yaml", "--format", "json", "-q"], 1),
        ("faultplane.cli.core.run", ["x.yaml", "--output=toon"], ["x.yaml", "--format", "toon"], 1),
        ("faultplane.cli.core.run", ["x.yaml", "--json"], ["x.yaml", "--json"], 0),
        ("faultplane.cli.core.run", ["x.yaml", "--", "-o", "json"], ["x.yaml", "--", "-o", "json"], 0),
        # today -o is design's folder: only a format name is the old meaning
        (
            "faultplane.cli.design.design",
            ["--out", "d", "-o", "json"],
            ["--output", "d", "--format", "json"],
            2,
        ),
        ("faultplane.cli.design.design", ["-o", "designs"], ["-o", "designs"], 0),
        ("faultplane.cli.analyze.analyze", ["--export", "r.csv"], ["--output", "r.csv"], 1),
        # -f was compliance's --framework: a framework name is the old meaning, a format name today's
        ("faultplane.cli.compliance.report", ["-f", "DORA"], ["--framework", "DORA"], 1),
        ("faultplane.cli.compliance.report", ["-f", "json"], ["-f", "json"], 0),
        ("faultplane.cli.compliance.periodic", ["--out-dir", "r"], ["--output", "r"], 1),
        ("faultplane.cli.plane.report", ["--toon"], ["--format", "toon"], 1),
        ("faultplane.cli.core.journal_show", ["abc", "-o", "json"], ["abc", "-o", "json"], 0),  # no rule
    ],
)
def test_old_spellings_are_rewritten_with_a_notice_each(
    command: str, args: list[str], expected: list[str], notices: int
) -> None:
    lines: list[str] = []
    assert rewrite(command, args, lines.append) == expected
    assert len(lines) == notices and all("deprecated" in line and "\n" not in line for line in lines)


def _experiment(tmp_path: Path) -> Path:
    path = tmp_path / "exp.json"
    path.write_text(json.dumps(small_experiment("conventions")))
    (tmp_path / "policy.yaml").write_text("gates: {required: false}\n")
    return path


def _fp(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if (tmp_path / "policy.yaml").exists():
        use_lab_policy((tmp_path / "policy.yaml").read_text())
    env = dict(os.environ)
    return subprocess.run(
        [sys.executable, "-m", "faultplane", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_run_prints_the_same_json_under_every_spelling_and_notes_the_old_one(tmp_path: Path) -> None:
    exp = str(_experiment(tmp_path))
    results = {}
    for spelling in (["-o", "json"], ["--format", "json"], ["-f", "json"], ["--json"]):
        out = _fp(tmp_path, "run", exp, "-q", *spelling)
        assert out.returncode == 0, out.stderr
        results[" ".join(spelling)] = json.loads(out.stdout)  # stdout holds the JSON and nothing else
        notices = [line for line in out.stderr.splitlines() if "deprecated" in line]
        assert notices == (
            ["faultplane: '-o json' is deprecated: use '--format json'"] if "-o" in spelling else []
        )
    assert {r["status"] for r in results.values()} == {"completed"}
    assert len({r["run_id"] for r in results.values()}) == 4  # four runs, each answered in JSON


def test_listing_commands_answer_json(tmp_path: Path) -> None:
    exp = str(_experiment(tmp_path))
    run_id = json.loads(_fp(tmp_path, "run", exp, "-q", "--json").stdout)["run_id"]
    listed = _fp(tmp_path, "runs", "list", "--json")
    assert [r["run_id"] for r in json.loads(listed.stdout)] == [run_id]
    shown = json.loads(_fp(tmp_path, "journal", "show", run_id[:8], "--json").stdout)
    assert shown["run_id"] == run_id
    names = [e["name"] for e in json.loads(_fp(tmp_path, "experiments", "list", "--json").stdout)]
    assert "demo-latency" in names  # the bundled experiments


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "list"],
        ["journal", "show", "abc"],
        ["journal", "export", "abc"],
        ["analyze"],
        ["analyze", "baseline", "--probe", "p"],
        ["report", "abc"],
        ["gameday", "list"],
        ["compliance", "report"],
        ["dora", "report"],
    ],
    ids=" ".join,
)
def test_a_read_command_refuses_a_store_that_does_not_exist(tmp_path: Path, argv: list[str]) -> None:
    missing = tmp_path / "typo.duckdb"
    out = _fp(tmp_path, *argv, "--store", str(missing))
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.count("\n") == 1 and str(missing) in out.stderr and "fix:" in out.stderr
    assert not missing.exists() and not list(tmp_path.glob("typo*"))  # nothing created


# numbers out of range reached DuckDB ("LIMIT/OFFSET cannot be negative"), a socket ("port must be 0-65535", with
# the demo service's traceback) or a loop that never ended (an idle time of NaN)
@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["runs", "list", "-n", "-1"], "--limit"),
        (["runs", "list", "--limit", "0"], "--limit"),
        (["analyze", "baseline", "--probe", "p", "--limit", "-1"], "--limit"),
        (["demo", "--port", "70000"], "--port"),
        (["demo", "--port", "-5"], "--port"),
        (["drivers", "leases", "watch", "--idle-exit", "nan"], "--idle-exit"),
        (["drivers", "leases", "watch", "--idle-exit", "-1"], "--idle-exit"),
        (["compliance", "report", "--rto", "nan"], "rto"),
        (["compliance", "report", "--rto", "-1"], "rto"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_a_number_out_of_range_is_exit_2_naming_the_option(
    tmp_path: Path, store: Store, argv: list[str], named: str
) -> None:
    with store.connect():  # a store that exists: the number is what is refused, not the store
        pass
    with_store = ["--store", str(store.path)] if argv[0] in ("runs", "analyze", "compliance") else []
    out = _fp(tmp_path, *argv, *with_store)
    assert out.returncode == 2, out.stdout + out.stderr
    assert named in out.stderr and "Traceback" not in out.stderr and "Error:" not in out.stdout, out.stderr


def test_an_output_path_that_cannot_be_written_is_one_line_naming_it(tmp_path: Path) -> None:
    """-o to a folder, into a missing folder or under a file: exit 2 naming the path and the fix."""
    store = tmp_path / "s.duckdb"
    journal = tmp_path / "j.json"
    journal.write_text('{"run_id": "r1", "status": "completed", "experiment": {"title": "x"}}')
    assert _fp(tmp_path, "journal", "import", str(journal), "--store", str(store)).returncode == 0
    (tmp_path / "a-file").write_text("x")
    for command, target, fix in [
        (["journal", "export", "r1"], tmp_path, "not a folder"),
        (["journal", "export", "r1"], tmp_path / "missing" / "out", "folder must exist"),
        (["journal", "export", "r1"], tmp_path / "a-file" / "out", "is a file"),
        (["report", "r1"], tmp_path, "not a folder"),  # report makes missing folders itself
        (["report", "r1"], tmp_path / "a-file" / "out.html", "is a file"),
    ]:
        out = _fp(tmp_path, *command, "--store", str(store), "-o", str(target))
        err = out.stderr
        assert out.returncode == 2, (command, target, err)
        assert err.startswith("error: ") and err.count("\n") == 1 and fix in err, (command, err)
        assert "Traceback" not in err and "--debug" not in err


@pytest.mark.parametrize("kind", ["not-a-database", "a-folder", "unwritable-parent"])
def test_a_store_that_cannot_be_used_is_one_line_and_exit_2(tmp_path: Path, kind: str) -> None:
    store = {
        "not-a-database": tmp_path / "junk.duckdb",
        "a-folder": tmp_path,
        "unwritable-parent": Path("/proc/no-such-dir/store.duckdb"),
    }[kind]
    if kind == "not-a-database":
        store.write_text("not a database\n")
    exp = str(_experiment(tmp_path))
    for argv in (["runs", "list"], ["run", exp, "-q"]):
        out = _fp(tmp_path, *argv, "--store", str(store))
        assert out.returncode == 2, out.stdout + out.stderr
        assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1, out.stderr
        assert "Traceback" not in out.stderr and "store" in out.stderr


def test_a_broken_policy_file_is_exit_2_naming_it(tmp_path: Path) -> None:
    exp = str(_experiment(tmp_path))
    (tmp_path / "policy.yaml").write_text("gates: [\n")
    for argv in (["validate", exp], ["run", exp, "-q"], ["guard", "check", exp]):
        out = _fp(tmp_path, *argv)
        assert out.returncode == 2, (argv, out.stderr)
        assert "policy.yaml" in out.stderr and "Traceback" not in out.stderr


def test_report_verify_answers_json(tmp_path: Path) -> None:
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "manifest.json").write_text("{}")
    runner = CliRunner()
    for spelling in (["--json"], ["-f", "json"]):
        out = runner.invoke(app, ["report", "verify", str(folder), *spelling])
        assert out.exit_code == 1
        got = json.loads(out.stdout)
        assert got["ok"] is False and got["problems"] == [
            "manifest.json: not a faultplane-exercise-report/1 manifest"
        ]
    text = runner.invoke(app, ["report", "verify", str(folder)])
    assert text.exit_code == 1 and "✗ manifest.json" in text.stdout
    missing = runner.invoke(app, ["report", "verify", str(tmp_path / "none"), "--json"])
    assert missing.exit_code == 2 and "no manifest.json" in missing.output


def test_abort_stops_only_the_one_running_experiment_a_prefix_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from faultplane.cli.core import running_match

    running = {"3a10c2d4e5f60718", "3b20c2d4e5f60718", "4c30c2d4e5f60718"}
    assert running_match("3a", running) == "3a10c2d4e5f60718"
    with pytest.raises(typer.Exit) as several:
        running_match("3", running)
    assert several.value.exit_code == 2
    err = capsys.readouterr().err
    assert "ambiguous" in err and "3a10c2d4e5f60718" in err and "3b20c2d4e5f60718" in err
    with pytest.raises(typer.Exit) as none:
        running_match("9", running)
    assert none.value.exit_code == 1


def test_abort_of_a_run_that_is_not_running_is_exit_1(tmp_path: Path) -> None:
    out = _fp(tmp_path, "abort", "0123abcd")
    assert out.returncode == 1 and "no running experiment" in out.stderr and "Traceback" not in out.stderr


def test_every_command_that_shows_progress_takes_quiet() -> None:
    by_path = {path: cmd for path, cmd, _ in _commands()}
    for path in ("run", "gameday run", "search"):
        opts = {o for p in by_path[path].params for o in p.opts}
        assert {"-q", "--quiet"} <= opts, path


def test_gameday_run_quiet_prints_the_result_without_progress(tmp_path: Path) -> None:
    exp = _experiment(tmp_path)
    gameday = tmp_path / "gd.yaml"
    gameday.write_text(
        f"name: tiny\ndescription: d\nlanes:\n  - name: only\n    mode: ordered\n"
        f"    experiments:\n      - {{experiment: {exp}}}\n"
    )
    loud = _fp(tmp_path, "gameday", "run", str(gameday))
    quiet = _fp(tmp_path, "gameday", "run", str(gameday), "-q")
    assert loud.returncode == quiet.returncode == 0, loud.stderr + quiet.stderr
    progress = "only[0] exp.json: completed"
    assert progress in loud.stdout.splitlines()[0]
    assert progress not in quiet.stdout and "passed 1/1" in quiet.stdout
