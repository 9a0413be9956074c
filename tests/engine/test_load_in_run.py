"""An experiment's `load:` runs in the background through baseline, inject and recovery; its figures feed the
gates and its summary lands in the journal."""

from __future__ import annotations

import pytest
import yaml

from faultplane.core.store import Store
from faultplane.examples.demo import EXPERIMENT, demo_service
from faultplane.services.experiments import run_experiment, validate_experiment
from faultplane.services.runs import load_journal

pytestmark = pytest.mark.anyio


def _experiment(latency_s: float) -> dict:
    doc = yaml.safe_load(EXPERIMENT.read_text())
    doc["title"] = f"orders under load, db +{latency_s}s"
    doc["load"] = {"url": "${service_url}/orders", "rate": 40, "timeout_s": 2}
    doc["slo_gates"] = [
        {"name": "p99", "sli": "latency_p99", "rollback_on": "latency_p99 > 250 for 1s", "interval_s": 0.25}
    ]
    doc["method"][0]["provider"]["arguments"]["duration_seconds"] = latency_s
    doc["method"][0]["pauses"] = {"after": 4}
    return doc


async def test_load_feeds_the_gate_and_the_journal(store: Store) -> None:
    with demo_service() as url:
        green = await run_experiment(_experiment(0.01), variables={"service_url": url}, store=store)
        assert green.status == "completed", green.error
        load = load_journal(green.run_id, store)["load"]
        assert load["sent"] >= 100 and load["errors"] == 0
        assert len(load["series"]) >= 4

        red = await run_experiment(_experiment(0.4), variables={"service_url": url}, store=store)
        assert red.status == "aborted" and red.exit_code == 3, red.error
        journal = load_journal(red.run_id, store)
        assert journal["gates"]["breach"] is not None
        breaching = [s for s in journal["gates"]["samples"] if s["breaching"]]
        assert breaching and all(s["value"] > 250 for s in breaching)
        assert journal["load"]["sent"] > 0
        # an aborted run mid-stall still accounts for every scheduled request, in the journal
        for load in (load_journal(green.run_id, store)["load"], journal["load"]):
            not_sent = load["not_sent"]["behind"] + load["not_sent"]["in_flight_limit"]
            assert load["scheduled"] == load["sent"] + not_sent
            assert load["in_flight"] == 0
            assert load["sent"] == load["ok"] + load["failed_status"] + load["failed_network"]
            assert sum(r["scheduled"] for r in load["series"]) == load["scheduled"]
            assert sum(r["ok"] for r in load["series"]) == load["ok"]
            # each journaled second holds the outcome of every request due in it, the stalled ones too
            for r in load["series"]:
                assert r["scheduled"] == r["sent"] + r["not_sent"], r
                assert r["sent"] == r["ok"] + r["failed_status"] + r["failed_network"], r


def test_bad_load_is_an_error_naming_the_field() -> None:
    doc = yaml.safe_load(EXPERIMENT.read_text())
    doc["load"] = {"url": "http://127.0.0.1:1/", "rate": -5}
    report = validate_experiment(doc, variables={"service_url": "http://127.0.0.1:1"}, with_policy=False)
    assert not report.valid and any(e.field.startswith("load.rate") for e in report.errors)
