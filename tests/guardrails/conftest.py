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


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git project (tmp_path/p) as the working directory, with no $FAULTPLANE_POLICY from outside: the policy
    in force is what the test writes. Test files that need more extend it by asking for `project`."""
    root = tmp_path / "p"
    (root / ".git").mkdir(parents=True)
    monkeypatch.chdir(root)
    monkeypatch.delenv("FAULTPLANE_POLICY", raising=False)
    return root
