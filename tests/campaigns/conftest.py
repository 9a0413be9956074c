"""Fixtures for GameDay, design, search and compliance tests: the bundled demo service on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from faultplane.examples.demo import demo_service

EXPERIMENTS = Path(__file__).parent / "experiments"


@pytest.fixture
def demo_url() -> Iterator[str]:
    """The demo orders service (a real HTTP server subprocess), started after the test's state dirs are set."""
    with demo_service() as url:
        yield url


@pytest.fixture
def experiments_dir() -> Path:
    return EXPERIMENTS
