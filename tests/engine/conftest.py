from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import ctk_helpers  # noqa: F401  (registers the test driver)
from policy_helpers import use_lab_policy
from servers import StatusPages, http_server

LAB_POLICY = """\
# A lab policy for engine tests: production is still forbidden, gates are not required.
gates: {required: false}
"""


@pytest.fixture
def lab_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return use_lab_policy(LAB_POLICY)


@pytest.fixture(scope="session")
def http_service() -> Iterator[str]:
    """A real HTTP server on a free loopback port."""
    with http_server(StatusPages) as url:
        yield url
