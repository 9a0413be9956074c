"""Fixtures shared by the whole suite. Area-specific fixtures live in each tests/<area>/conftest.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultplane.core.store import Store
from proc_helpers import free_port

# Files `make test` runs alone after the parallel part (marker `serial`), and why: their assertions read real
# time under the load they create themselves, or they look at every process on the machine.
SERIAL_FILES = {
    "examples/test_payment_scenario.py": "the retry storm's outcome depends on the pause and load timing",
    "campaigns/test_search_payment.py": "the searched boundary is a latency and error-rate boundary",
    "campaigns/test_gameday_templates.py": "the templates' lanes run the payment system's timed scenario",
    "plane/test_conformance.py": "the conformance suite's scenarios have timeouts of their own",
    "mcp/test_mcp_conformance.py": "the conformance suite's scenarios have timeouts of their own",
    "guardrails/test_gate_monitor.py": "a gate must abort within one sampling interval",
    "plane/test_proxy_stdio.py": "shutdown deadlines",
    "plane/test_proxy_http.py": "shutdown deadlines",
    "drivers/test_new_faults_sigkill.py": "counts the machine's stress processes",
    "drivers/test_lease_hygiene.py": "counts the machine's fault holder processes",
    "drivers/test_redis.py": "counts the machine's fault holder processes",
    "drivers/test_ssh_hosts.py": "counts the machine's stress processes and their memory",
    "drivers/test_redis_sentinel.py": "Sentinel's failover timing",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests_dir = Path(__file__).resolve().parent
    for item in items:
        try:
            rel = item.path.resolve().relative_to(tests_dir).as_posix()
        except ValueError:
            continue
        if rel in SERIAL_FILES:
            item.add_marker(pytest.mark.serial)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own store, fault registry and data dirs, never the user's."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("FAULTPLANE_STORE", str(tmp_path / "store.duckdb"))
    # lease watchdogs outlive a test by up to 10 s; the tests that are about them switch them back on
    monkeypatch.setenv("FAULTPLANE_NO_WATCHDOG", "1")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store.duckdb")


@pytest.fixture
def port() -> int:
    return free_port()
