"""Fixtures for the guardrail tests (helpers live in guard_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from guard_helpers import Approver, DegradableService, base_experiment


@pytest.fixture
def experiment() -> dict[str, Any]:
    return base_experiment()


@pytest.fixture
def approver(tmp_path: Path) -> Approver:
    """alice's approver key, outside every test project (tmp_path/keys, no .git above it)."""
    return Approver(tmp_path / "keys")


@pytest.fixture
def service() -> Iterator[DegradableService]:
    svc = DegradableService()
    svc.thread.start()
    yield svc
    svc.server.shutdown()
    svc.server.server_close()
