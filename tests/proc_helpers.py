"""Processes that tests act on and watch: `sleepers` whose command line carries a marker (for faults that select
processes by pattern), and `eventually`, which polls for a state a fault or its revert reaches asynchronously."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def eventually(pred: Callable[[], object], timeout: float = 5.0, step: float = 0.02) -> bool:
    """Whether `pred()` holds within `timeout` seconds, asked every `step`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return False


@contextmanager
def sleepers(marker: str, count: int, seconds: int = 60) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`count` Python processes sleeping `seconds`, `marker` last on their command line; killed on exit."""
    procs = [
        subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})", marker])
        for _ in range(count)
    ]
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(5)
