"""Fixtures for the driver tests: the real servers of tests/servers.py, plus small loopback TCP servers."""

from __future__ import annotations

import os

import pytest

from servers import postgres_server, redis_server, sshd_server  # noqa: F401  (fixtures)


@pytest.fixture(autouse=True)
def _fast_leases(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each test has its own lease dir (XDG_STATE_HOME is per test); a watchdog per test would outlive it.
    # Tests that exercise the watchdog unset this.
    monkeypatch.setenv("FAULTPLANE_NO_WATCHDOG", "1")


@pytest.fixture
def lease_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("FAULTPLANE_NO_WATCHDOG", None)
    return env
