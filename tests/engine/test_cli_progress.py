"""What `faultplane run` shows while it runs: progress for a person, JSON lines for a tool."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml


def _experiment(tolerance_upper: int = 4096, pause_after: float = 0.6) -> dict[str, Any]:
    cpus = {"type": "python", "module": "os", "func": "cpu_count"}
    return {
        "title": "progress",
        "description": "d",
        "slo_gates": [
            {
                "name": "cpus",
                "sli": "probe",
                "rollback_on": "probe > 100000 for 1s",
                "interval_s": 0.1,
                "probe": {"type": "probe", "name": "cpus-gate", "provider": cpus},
            }
        ],
        "steady-state-hypothesis": {
            "title": "h",
            "probes": [
                {
                    "type": "probe",
                    "name": "cpu-count",
                    "provider": cpus,
                    "tolerance": {"type": "range", "range": [1, tolerance_upper]},
                }
            ],
        },
        "method": [
            {
                "type": "action",
                "name": "wait-a-little",
                "provider": {"type": "python", "module": "os", "func": "getcwd"},
                "pauses": {"after": pause_after},
            }
        ],
    }


def _run(tmp_path: Path, doc: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump(doc))
    policy = tmp_path / "policy.yaml"
    policy.write_text("gates: {required: true, min_gates: 1, require_window: true}\n")
    env = {**os.environ, "FAULTPLANE_POLICY": str(policy), "COLUMNS": "100"}
    return subprocess.run(
        [sys.executable, "-m", "faultplane", "run", str(exp), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_events_jsonl_streams_every_event_and_ends_with_the_result(tmp_path: Path) -> None:
    out = _run(tmp_path, _experiment(), "--events", "jsonl")
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]  # every line is one JSON object
    kinds = [e["event"] for e in events]
    assert kinds[-1] == "result" and events[-1]["result"]["status"] == "completed"
    assert [e["phase"] for e in events if e["event"] == "phase"] == [
        "baseline",
        "inject",
        "recover",
        "analyse",
    ]
    starts = [e for e in events if e["event"] == "activity_start" and e["section"] == "method"]
    assert starts and starts[0]["pauses"] == {"after": 0.6}
    samples = [e["sample"] for e in events if e["event"] == "gate_sample"]
    assert samples and all(s["threshold"] == 100000 and s["op"] == ">" for s in samples)
    assert all(isinstance(s["value"], int | float) for s in samples)
    assert kinds.index("activity_start") < kinds.index("activity") < kinds.index("end")


def _held_fault(pid: int) -> dict[str, Any]:
    """A real fault with a duration: SIGSTOP a process of the test's, resumed by the driver after 0.5 s."""
    args = {"pid": pid, "duration_seconds": 0.5}
    return {
        "type": "action",
        "name": "freeze",
        "provider": {"type": "driver", "driver": "process", "name": "suspend", "arguments": args},
    }


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_held_fault_is_announced_with_its_duration_and_undone_when_it_ends(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "120"])
    try:
        doc = _experiment(pause_after=0)
        doc["method"].append(_held_fault(sleeper.pid))
        out = _run(tmp_path, doc, "--events", "jsonl")
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr
        events = [json.loads(line) for line in out.stdout.splitlines()]
        held = [e for e in events if e["event"] == "fault_held"]
        assert len(held) == 1 and held[0]["seconds"] == 0.5 and str(sleeper.pid) in held[0]["label"]
        assert held[0]["until"].endswith("+00:00")
        kinds = [
            (e["event"], e.get("name") or (e.get("run") or {}).get("activity", {}).get("name"))
            for e in events
        ]
        start, done = kinds.index(("activity_start", "freeze")), kinds.index(("activity", "freeze"))
        assert start < events.index(held[0]) < done  # announced while the fault is held
        assert _state(sleeper.pid) != "T"  # resumed when its time ran out

        text = _run(tmp_path, doc)
        assert text.returncode == 0, text.stderr
        assert any(
            "holding" in ln and str(sleeper.pid) in ln and "for 0.5s" in ln for ln in text.stdout.splitlines()
        )
        assert _state(sleeper.pid) != "T"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_failed_tolerance_names_the_probe_its_value_and_why(tmp_path: Path) -> None:
    doc = _experiment()
    doc["steady-state-hypothesis"]["probes"][0]["tolerance"] = {"type": "range", "range": [100000, 200000]}
    out = _run(tmp_path, doc)
    assert out.returncode == 1
    cpus = str(os.cpu_count())
    line = next(ln for ln in out.stdout.splitlines() if "✗ cpu-count" in ln)
    assert f"value {cpus} is outside tolerance" in line and "100000" in line


def test_quiet_prints_the_result_only(tmp_path: Path) -> None:
    out = _run(tmp_path, _experiment(), "-q")
    assert out.returncode == 0, out.stderr
    assert "▶" not in out.stdout and "completed" in out.stdout


@pytest.mark.parametrize("bad", ["json", "JSONL", ""])
def test_an_unknown_events_format_is_refused_with_the_choices(tmp_path: Path, bad: str) -> None:
    out = _run(tmp_path, _experiment(), "--events", bad)
    assert out.returncode == 2 and "jsonl" in out.stderr


def test_the_live_line_counts_down_a_pause_and_shows_gates_against_thresholds() -> None:
    from rich.console import Console

    from faultplane.cli.progress import RunProgress

    progress = RunProgress(quiet=False)
    progress(
        {
            "event": "activity_start",
            "section": "method",
            "name": "a",
            "type": "action",
            "pauses": {"before": 5},
        }
    )
    progress(
        {
            "event": "gate_sample",
            "sample": {
                "gate": "p99",
                "sli": "latency_p99",
                "value": 412.5,
                "breaching": False,
                "threshold": 800.0,
                "op": ">",
                "window_s": 10.0,
                "held_s": 0.0,
            },
        }
    )
    text = Console(width=200, record=True)
    text.print(progress.line)
    shown = text.export_text()
    assert "pause before a:" in shown and "s left" in shown
    assert "latency_p99=412.5" in shown and "> 800" in shown and "for 10s" in shown
