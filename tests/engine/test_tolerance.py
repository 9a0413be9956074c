"""Each tolerance kind, met and not met; and runs that deviate on a regex and on a jsonpath tolerance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from faultplane.core.store import Store
from faultplane.engine.tolerance import within_tolerance
from faultplane.services.experiments import run_experiment
from faultplane.services.runs import load_journal

pytestmark = pytest.mark.anyio

HTTP_OK = {"status": 200, "headers": {}, "body": {"status": "ok", "services": [{"name": "db", "up": True}]}}
PROCESS = {"status": 0, "stdout": "ready: 3 workers\n", "stderr": ""}


async def _is_even(spec: dict[str, Any], value: Any) -> Any:
    return isinstance(value, int) and value % 2 == 0


CASES: list[tuple[str, Any, Any, Any]] = [
    # kind, tolerance, a value that meets it, a value that does not
    ("exact int", 1, 1, 2),
    ("exact bool", True, True, False),
    ("exact status code", 200, HTTP_OK, {**HTTP_OK, "status": 503}),
    ("exact stdout", "ready: 3 workers", PROCESS, {**PROCESS, "stdout": "starting"}),
    ("status list", [200, 204], HTTP_OK, {**HTTP_OK, "status": 500}),
    ("range", {"type": "range", "range": [0, 10]}, 10, 10.5),
    ("range list", [1, 5], 3, 6),
    ("range target", {"type": "range", "range": [0, 1], "target": "status"}, {"status": 0}, {"status": 2}),
    ("range non-number", {"type": "range", "range": [0, 1]}, 0.5, "n/a"),
    ("regex", {"type": "regex", "pattern": "^ready: [0-9]+"}, "ready: 3", "not ready"),
    (
        "regex target",
        {"type": "regex", "pattern": "[0-9]+ workers", "target": "stdout"},
        PROCESS,
        PROCESS | {"stdout": "x"},
    ),
    (
        "jsonpath exists",
        {"type": "jsonpath", "path": "$.services[*].name"},
        {"services": [{"name": "db"}]},
        {"services": []},
    ),
    (
        "jsonpath expect",
        {"type": "jsonpath", "path": "$.status", "expect": "ok", "target": "body"},
        HTTP_OK,
        {**HTTP_OK, "body": {"status": "down"}},
    ),
    (
        "jsonpath count",
        {"type": "jsonpath", "path": "$.items[*]", "count": 2},
        {"items": [1, 2]},
        {"items": [1, 2, 3]},
    ),
    (
        "jsonpath text body",
        {"type": "jsonpath", "path": "$.up", "expect": True},
        '{"up": true}',
        '{"up": false}',
    ),
    (
        "probe",
        {"type": "probe", "name": "even", "provider": {"type": "python", "module": "m", "func": "f"}},
        4,
        3,
    ),
]


@pytest.mark.parametrize(("kind", "tolerance", "good", "bad"), CASES, ids=[c[0] for c in CASES])
async def test_tolerance_met_and_not_met(kind: str, tolerance: Any, good: Any, bad: Any) -> None:
    assert await within_tolerance(tolerance, good, _is_even) is True
    assert await within_tolerance(tolerance, bad, _is_even) is False


async def test_a_probe_tolerance_that_raises_is_not_met() -> None:
    async def broken(spec: dict[str, Any], value: Any) -> Any:
        raise RuntimeError("probe down")

    tol = {"type": "probe", "name": "x", "provider": {"type": "python", "module": "m", "func": "f"}}
    assert await within_tolerance(tol, 1, broken) is False
    assert await within_tolerance(tol, 1, None) is False
    assert await within_tolerance({"type": "unknown"}, 1) is False


def _deviating_experiment(flag: Path, tolerance: dict[str, Any]) -> dict[str, Any]:
    """The probe reads a file the method rewrites: the steady state holds before and not after."""
    flag.write_text('{"status": "ok"}', encoding="utf-8")
    return {
        "title": "deviates on a tolerance",
        "steady-state-hypothesis": {
            "title": "the service says ok",
            "probes": [
                {
                    "type": "probe",
                    "name": "read-status",
                    "provider": {"type": "process", "path": "cat", "arguments": [str(flag)]},
                    "tolerance": tolerance,
                }
            ],
        },
        "method": [
            {
                "type": "action",
                "name": "break-it",
                "provider": {
                    "type": "process",
                    "path": "sh",
                    "arguments": ["-c", f'echo \'{{"status": "down"}}\' > {flag}'],
                },
            }
        ],
        "runtime": {"recovery_timeout": 0.2},
    }


@pytest.mark.parametrize(
    "tolerance",
    [
        {"type": "regex", "pattern": '"status": "ok"', "target": "stdout"},
        {"type": "jsonpath", "path": "$.status", "expect": "ok", "target": "stdout"},
    ],
    ids=["regex", "jsonpath"],
)
@pytest.mark.usefixtures("lab_policy")
async def test_a_run_deviates_on_the_tolerance(
    tmp_path: Path, store: Store, tolerance: dict[str, Any]
) -> None:
    result = await run_experiment(_deviating_experiment(tmp_path / "status.json", tolerance), store=store)
    assert (result.status, result.steady_state_before, result.steady_state_after) == ("deviated", True, False)
    assert result.exit_code == 1
    after = load_journal(result.run_id, store)["steady_states"]["after"]
    assert after["probes"][0]["tolerance_met"] is False
    assert "down" in after["probes"][0]["output"]["stdout"]
