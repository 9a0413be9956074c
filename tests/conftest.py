"""Fixtures shared by the whole suite. Area-specific fixtures live in each tests/<area>/conftest.py."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from faultplane.core.store import Store


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


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on loopback right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@pytest.fixture
def port() -> int:
    return free_port()
