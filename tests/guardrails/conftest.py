"""Fixtures for the guardrail tests (helpers live in guard_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from guard_helpers import DegradableService, base_experiment


@pytest.fixture
def experiment() -> dict[str, Any]:
    return base_experiment()


@pytest.fixture
def service() -> Iterator[DegradableService]:
    svc = DegradableService()
    svc.thread.start()
    yield svc
    svc.server.shutdown()
    svc.server.server_close()
