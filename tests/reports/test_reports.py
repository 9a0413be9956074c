"""Reports from real runs: the post-mortem paragraph, the HTML timeline, `faultplane report`, and the report as
headless Chromium renders it."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultplane.core.store import Store
from faultplane.examples.demo import EXPERIMENT, demo_service
from faultplane.reports.evidence import evidence
from faultplane.reports.html import render_html, write_report
from faultplane.reports.postmortem import postmortem
from faultplane.services.experiments import run_experiment
from faultplane.services.runs import load_journal

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


def _experiment(latency_s: float) -> dict[str, Any]:
    doc = yaml.safe_load(EXPERIMENT.read_text())
    doc["title"] = f"orders <under> load, db +{latency_s}s"
    doc["load"] = {"url": "${service_url}/orders", "rate": 40, "timeout_s": 2}
    doc["slo_gates"] = [
        {
            "name": "orders-p99",
            "sli": "latency_p99",
            "rollback_on": "latency_p99 > 250 for 1s",
            "interval_s": 0.25,
        },
        {
            "name": "orders-errors",
            "sli": "error_rate",
            "rollback_on": "error_rate > 0.05 for 1s",
            "interval_s": 0.25,
        },
    ]
    doc["method"][0]["provider"]["arguments"]["duration_seconds"] = latency_s
    doc["method"][0]["pauses"] = {"after": 3}
    return doc


@pytest.fixture(scope="module")
def journals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A green run and a gate-aborted run of the demo service under load, and the store holding them."""
    import anyio

    store = Store(tmp_path_factory.mktemp("store") / "store.duckdb")

    async def go(url: str) -> tuple[str, str]:
        green = await run_experiment(_experiment(0.005), variables={"service_url": url}, store=store)
        red = await run_experiment(_experiment(0.4), variables={"service_url": url}, store=store)
        return green.run_id, red.run_id

    with demo_service() as url:
        green_id, red_id = anyio.run(go, url)
    return {
        "store": store,
        "green": load_journal(green_id, store),
        "red": load_journal(red_id, store),
    }


def test_postmortem_of_a_gate_abort_names_the_slo_and_the_measurements(journals: dict[str, Any]) -> None:
    red = journals["red"]
    assert red["status"] == "aborted"
    text = postmortem(red)
    assert "aborted by an SLO gate" in text
    gate = red["gates"]["breach"]["gate"]
    assert f"'{gate}'" in text
    assert "latency_p99 > 250 for 1s" in text or "error_rate > 0.05 for 1s" in text
    assert "During the fault window the load saw" in text
    assert "rolled back" in text


def test_postmortem_of_a_green_run(journals: dict[str, Any]) -> None:
    green = journals["green"]
    assert green["status"] == "completed"
    text = postmortem(green)
    assert "the steady state held and no SLO gate breached" in text
    assert "0 errors" in text


def test_caller_counters_come_from_the_reading_covering_the_fault_window() -> None:
    """The method's policy reply holds the previous period's counters (another run's storm, more requests); the
    rollback's reply covers this run's fault window. The report must use the latter."""
    previous = {"requests": 5000, "attempts": 5100, "retry_amplification": 1.02, "limiter_rejections": 0}
    this_run = {"requests": 300, "attempts": 27960, "retry_amplification": 93.2, "limiter_rejections": 14321}

    def act(name: str, stats: dict[str, Any]) -> dict[str, Any]:
        return {
            "activity": {"type": "action", "name": name},
            "status": "succeeded",
            "output": {"status": 200, "body": {"previous": {}, "policy": {}, "stats": stats}},
        }

    journal = {
        "experiment": {"title": "t"},
        "status": "completed",
        "run": [act("set-caller-policy", previous)],
        "rollbacks": [act("restore-caller-policy", this_run)],
    }
    ev = evidence(journal)
    assert ev.caller is not None and ev.caller["retry_amplification"] == 93.2
    assert "93.20x" in postmortem(journal)
    # without a rollback reading, the method's last reading (a probe under the fault) is used
    journal["rollbacks"] = []
    journal["run"].append(act("caller-stats-under-fault", {**this_run, "requests": 200}))
    assert evidence(journal).caller["requests"] == 200


def test_html_timeline_has_the_plot_elements(journals: dict[str, Any]) -> None:
    html = render_html(journals["red"])
    assert html.startswith("<!DOCTYPE html>")
    assert "orders &lt;under&gt; load" in html and "<under>" not in html  # escaped
    for element in (
        'id="timeline"',
        'class="fault-window"',
        'class="gate-threshold"',
        'class="series-p50"',
        'class="series-p99"',
        'class="series-error-rate"',
        'class="gate-breach"',
        'id="postmortem"',
    ):
        assert element in html, element
    assert "http://" not in html.split("<svg", 1)[0].split("<style>", 1)[1]  # nothing fetched from anywhere
    green = render_html(journals["green"])
    assert 'class="gate-breach"' not in green and 'class="fault-window"' in green


def test_a_run_without_load_plots_its_gate_samples(journals: dict[str, Any]) -> None:
    """The demo experiment as bundled: no `load:`, one probe-sourced gate sampled through the run."""
    import anyio

    store = journals["store"]

    async def go(url: str) -> str:
        result = await run_experiment(EXPERIMENT, variables={"service_url": url}, store=store)
        return result.run_id

    with demo_service() as url:
        journal = load_journal(anyio.run(go, url), store)
    samples = [s for s in journal["gates"]["samples"] if isinstance(s.get("value"), int | float)]
    assert len(samples) >= 3 and not journal.get("load")
    svg = render_html(journal).split("<svg", 1)[1].split("</svg>", 1)[0]
    assert 'class="gate-samples" data-gate="orders-latency"' in svg
    assert svg.count("<circle ") == len(samples)  # a dot per sample
    assert 'class="gate-threshold"' in svg and "gate orders-latency: probe &gt; 1500" in svg
    assert "gate value (probe)" in svg and "seconds since the run started" in svg
    assert "no load figures" not in svg
    # a run under load keeps its per-second figures as the plot, not the gate samples
    assert 'class="gate-samples"' not in render_html(journals["red"])


def test_faultplane_report_writes_the_file(journals: dict[str, Any], tmp_path: Path) -> None:
    store: Store = journals["store"]
    run_id = journals["red"]["run_id"]
    out = tmp_path / "r.html"
    env = {**os.environ, "FAULTPLANE_STORE": str(store.path)}
    cli = [sys.executable, "-m", "faultplane.cli.main", "report"]
    done = subprocess.run(
        [*cli, run_id[:10], "-o", str(out)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text().count('id="timeline"') == 1
    done = subprocess.run([*cli, run_id, "--postmortem"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "aborted by an SLO gate" in done.stdout
    done = subprocess.run([*cli, "nosuchrun"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no journal for run 'nosuchrun'" in done.stderr
    assert "Traceback" not in done.stderr
    done = subprocess.run(
        [*cli, run_id, "--store", str(tmp_path / "missing.duckdb")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2 and "--store" in done.stderr


def test_an_imported_run_id_cannot_choose_where_its_report_is_written(
    journals: dict[str, Any], tmp_path: Path
) -> None:
    """A journal imported from elsewhere names its own run_id: `../../x` or `a/b` must not become the path."""
    import json

    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    store = tmp_path / "imported.duckdb"
    env = {**os.environ, "FAULTPLANE_STORE": str(store)}
    cli = [sys.executable, "-m", "faultplane.cli.main"]
    for hostile in ("../../escape", "sub/dir", ".hidden"):
        journal = {**journals["green"], "run_id": hostile}
        source = tmp_path / "in.json"
        source.write_text(json.dumps(journal))
        done = subprocess.run(
            [*cli, "journal", "import", str(source)], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        done = subprocess.run(
            [*cli, "report", hostile], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.html"))
    assert written == ["a/b/report-_.._escape.html", "a/b/report-hidden.html", "a/b/report-sub_dir.html"]


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the unfiltered rows of an 8-bit RGB/RGBA PNG (enough for Chromium's screenshots)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = color = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, [bytes(r[i : i + 3]) for r in rows for i in range(0, len(r), bpp)]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make test installs it)")
def test_the_report_renders_in_headless_chromium(journals: dict[str, Any], tmp_path: Path) -> None:
    report = write_report(journals["red"], tmp_path / "report.html")
    common = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    png = tmp_path / "shot.png"
    subprocess.run(
        [*common, f"--screenshot={png}", "--window-size=1200,900", report.as_uri()],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert png.is_file() and png.stat().st_size > 1000
    width, height, pixels = _png_pixels(png.read_bytes())
    assert (width, height) == (1200, 900)
    distinct = set(pixels)
    assert len(distinct) > 50, "the screenshot is blank"
    non_white = sum(1 for p in pixels if p != b"\xff\xff\xff")
    assert non_white > 0.02 * len(pixels)

    dom = subprocess.run(
        [*common, "--dump-dom", report.as_uri()], capture_output=True, text=True, timeout=120, check=False
    ).stdout
    for element in ('id="timeline"', 'class="fault-window"', 'class="gate-threshold"', 'class="series-p99"'):
        assert element in dom, element


def test_the_report_accounts_for_every_scheduled_request(journals: dict[str, Any]) -> None:
    load = journals["green"]["load"]
    html = render_html(journals["green"])
    not_sent = load["not_sent"]["behind"] + load["not_sent"]["in_flight_limit"]
    assert load["scheduled"] == load["sent"] + not_sent
    assert "<td>scheduled</td>" in html and f"<td>{load['scheduled']}</td>" in html
    assert "failed by status / by network" in html and "not sent: generator behind / in-flight bound" in html
