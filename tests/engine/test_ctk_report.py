"""Faultplane journals exported in Chaos Toolkit's format, read by Chaos Toolkit's own `chaos report`.

The report is chaostoolkit-reporting's: it loads each journal, walks its experiment, steady states, run and
rollbacks with its templates and converts the result with pandoc. A field it needs that the export lacks
(or has with the wrong type) fails the command; a value it shows wrongly shows in the text."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clihelp import run_cli
from faultplane.core.store import Store
from faultplane.services.ctk import write_ctk_journal
from faultplane.services.experiments import run_experiment
from faultplane.services.runs import load_journal

COMPAT = Path(__file__).parent / "ctk" / "compat"
CHAOS = shutil.which("chaos", path=str(Path(sys.executable).parent)) or shutil.which("chaos")


def _has_reporting() -> bool:
    try:
        import chaosreport  # noqa: F401
    except ImportError:
        return False
    return True


pytestmark = [
    pytest.mark.anyio,
    pytest.mark.usefixtures("lab_policy"),
    pytest.mark.skipif(
        CHAOS is None or not _has_reporting(),
        reason="chaostoolkit-reporting is not installed (the `test` extra installs it)",
    ),
]
if str(COMPAT) not in sys.path:
    sys.path.insert(0, str(COMPAT))


def _report(journals: list[Path], out: Path, fmt: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(CHAOS), "--no-version-check", "--no-log-file", "report", "--export-format", fmt]
    return subprocess.run(
        [*cmd, *map(str, journals), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(COMPAT), os.environ.get("PYTHONPATH", "")])},
    )


async def test_chaos_report_reads_exported_journals(tmp_path: Path, store: Store) -> None:
    # a run that held, one that deviated (steady state not verified after), one that failed on an exception
    runs = {
        "01-bool-true.json": ("completed", False),
        "65-deviated.yaml": ("completed", True),
        "37-python-action-raises.yaml": ("failed", False),
    }
    journals: list[Path] = []
    exported: dict[str, dict] = {}
    for name in runs:
        workdir = tmp_path / name
        workdir.mkdir()
        result = await run_experiment(COMPAT / name, variables={"workdir": str(workdir)}, store=store)
        path = tmp_path / f"{name}.journal.json"
        write_ctk_journal(load_journal(result.run_id, store), path)
        journals.append(path)
        exported[name] = json.loads(path.read_text())
        assert (exported[name]["status"], exported[name]["deviated"]) == runs[name]

    out = tmp_path / "report.md"
    done = _report(journals, out, "markdown")
    assert done.returncode == 0, done.stderr
    text = out.read_text(encoding="utf-8")
    assert "This report aggregates 3 experiments" in text
    statuses = re.findall(r"\*\*Status\*\*\s+(\w+)\n", text)
    # per experiment its status, then one line per activity of its run
    for journal in exported.values():
        title = journal["experiment"]["title"]
        assert f"## {title}" in text
        section = text.split(f"## {title}", 1)[1]
        assert re.search(rf"\*\*Status\*\*\s+{journal['status']}\n", section)
        for item in journal["run"]:
            kind = item["activity"]["type"].title()
            assert f"#### {kind} - {item['activity']['name']}" in section
    assert "completed" in statuses and "failed" in statuses
    # the deviated run: verified before, not after, as the export's steady states say
    deviated = text.split("## The steady state deviates after the method", 1)[1]
    before, after = deviated.split("##### After Run", 1)
    assert re.search(r"The steady state was\s+verified", before.split("##### Before Run", 1)[1])
    assert re.search(r"The steady state was\s+not verified", after.split("#### Method", 1)[0])
    # the failed run shows the exception Faultplane kept, as chaos report shows Chaos Toolkit's
    failed = text.split("## A python action that raises", 1)[1]
    assert "The *boom* action raised the following error" in failed
    assert "RuntimeError: kaput" in failed

    # html goes through the same templates and pandoc's standalone writer
    html = tmp_path / "report.html"
    done = _report(journals[:1], html, "html")
    assert done.returncode == 0, done.stderr
    assert "<html" in html.read_text(encoding="utf-8")


def test_cli_export_of_a_stored_run_is_read_by_chaos_report(tmp_path: Path) -> None:
    """`faultplane journal export RUN --format ctk` output, as written to a file by a user, reports."""
    exp = tmp_path / "e.yaml"
    exp.write_text(
        "title: exported from the store\ndescription: d\n"
        "method:\n  - {type: action, name: say-hi, provider: {type: process, path: sh, "
        "arguments: \"-c 'echo hi'\"}}\n",
        encoding="utf-8",
    )
    env = {**os.environ, "FAULTPLANE_STORE": str(tmp_path / "s.duckdb")}
    done = run_cli("run", str(exp), "--format", "json", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    exported = run_cli("journal", "export", run_id, "--format", "ctk", env=env, timeout=120)
    assert exported.returncode == 0, exported.stderr
    journal = tmp_path / "journal.json"
    journal.write_text(exported.stdout, encoding="utf-8")
    out = tmp_path / "report.md"
    done = _report([journal], out, "markdown")
    assert done.returncode == 0, done.stderr
    text = out.read_text(encoding="utf-8")
    assert "## exported from the store" in text
    assert "#### Action - say-hi" in text
    assert "'stdout': 'hi\\n'" in text  # the process output, in the report's appendix
