"""A small real "service" for evidence tests: its state lives in a JSON file that the experiment's actions change.

`degrade` injects a fault (extra latency), `restore` removes it and restarts the service, which is then unavailable
for `restart_s` seconds; `latency_ms` is the steady-state probe (it fails while the service restarts). So every run
has a real, measured time to recover that the test controls.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

LAB_POLICY = "# evidence tests: a lab, gates not required\ngates: {required: false}\n"


def _load(path: str) -> dict[str, Any]:
    p = Path(path)
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else {"extra_ms": 0.0, "down_until": 0.0}


def _save(path: str, state: dict[str, Any]) -> None:
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(state), encoding="utf-8")
    tmp.replace(path)


def degrade(state: str, extra_ms: float = 50.0) -> dict[str, Any]:
    s = _load(state)
    s["extra_ms"] = extra_ms
    _save(state, s)
    return {"fault": "latency", "extra_ms": extra_ms}


def restore(state: str, restart_s: float = 0.0) -> dict[str, Any]:
    s = _load(state)
    s["extra_ms"] = 0.0
    s["down_until"] = time.time() + restart_s
    s["flapped"] = False
    _save(state, s)
    return {"restarted": True, "restart_s": restart_s}


def latency_ms(state: str, base_ms: float = 20.0) -> float:
    s = _load(state)
    if time.time() < s["down_until"]:
        raise ConnectionError("service restarting")
    return base_ms + float(s["extra_ms"])


def flapping_latency(state: str, base_ms: float = 20.0) -> float:
    """Succeeds once right after the restart begins, then fails until the restart ends: a single passing check is
    not a recovery."""
    s = _load(state)
    now = time.time()
    if now < s["down_until"] and not s.get("flapped"):
        s["flapped"] = True
        _save(state, s)
        return base_ms
    if now < s["down_until"]:
        raise ConnectionError("service restarting")
    return base_ms + float(s["extra_ms"])


# ---- experiments over this service ------------------------------------------------------------------------


def steady_probe(name: str = "p") -> dict[str, Any]:
    """A probe that reads 120 (a p99 in ms, from json.loads) and holds within [0, 200]: a steady state with
    no service behind it."""
    provider = {"type": "python", "module": "json", "func": "loads", "arguments": {"s": "120"}}
    return {
        "type": "probe",
        "name": name,
        "tolerance": {"type": "range", "range": [0, 200]},
        "provider": provider,
    }


def py(name: str, func: str, kind: str = "probe", **arguments: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "name": name,
        "provider": {"type": "python", "module": "evidence_helpers", "func": func, "arguments": arguments},
    }


def service_experiment(
    title: str,
    state: Path,
    *,
    extra_ms: float = 50.0,
    restart_s: float = 0.1,
    family: str | None = None,
    estimate: dict[str, Any] | None = None,
    probe_func: str = "latency_ms",
) -> dict[str, Any]:
    """Inject latency into the service, restart it on rollback; the steady state is latency under 100 ms."""
    probe = py("latency", probe_func, state=str(state))
    probe["tolerance"] = {"type": "range", "range": [0, 100]}
    exp: dict[str, Any] = {
        "title": title,
        "family": family,
        "tags": ["evidence-test"],
        "steady-state-hypothesis": {"title": "fast", "probes": [probe]},
        "method": [py("inject-latency", "degrade", "action", state=str(state), extra_ms=extra_ms)],
        "rollbacks": [py("restart", "restore", "action", state=str(state), restart_s=restart_s)],
        "runtime": {"hypothesis": {"frequency": 0.02}, "recovery_timeout": 5},
    }
    if estimate:
        exp["estimate"] = estimate
    if family is None:
        del exp["family"]
    return exp


# svc: ten healthy runs, then one that passes but recovers slowly (the anomaly).
# db: four deviated runs (latency over the bound), then four good ones (improving).
# cache: three good runs, then three deviated (degrading).
PLAN: list[tuple[str, str, float, float]] = (
    [("svc", "svc latency", 50.0, 0.1)] * 10
    + [("svc", "svc latency", 50.0, 0.7)]
    + [("db", "db latency", 150.0, 0.05)] * 4
    + [("db", "db latency", 30.0, 0.05)] * 4
    + [("cache", "cache latency", 30.0, 0.05)] * 3
    + [("cache", "cache latency", 150.0, 0.05)] * 3
)
ESTIMATE = {"impact": "p99 rises by the injected latency", "recovery_seconds": 0.3, "latency_p99_ms": 80}
