"""Processes that tests act on and watch: `sleepers` whose command line carries a marker (for faults that select
processes by pattern), and `eventually`, which polls for a state a fault or its revert reaches asynchronously."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
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
def sleepers(
    prefix: str, count: int, seconds: int = 60
) -> Iterator[tuple[str, list[subprocess.Popen[bytes]]]]:
    """`count` Python processes sleeping `seconds`, a marker unique to them (`prefix` and random hex) last on
    their command line; the marker and the processes, killed on exit."""
    marker = f"{prefix}{uuid.uuid4().hex[:10]}"
    procs = [
        subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})", marker])
        for _ in range(count)
    ]
    try:
        yield marker, procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(5)
