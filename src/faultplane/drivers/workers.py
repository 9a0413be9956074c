"""Waiting on the worker processes a stress fault starts (CPU, memory, disk IO). They stop themselves after
the fault's duration; a fault that waits for them watches until they have (bounded: a hung worker does not
hold the run) and reports the first one that failed."""

from __future__ import annotations

import time
from collections.abc import Callable

import psutil

__all__ = ["wait_workers"]


async def wait_workers(
    procs: list[psutil.Popen], timeout_s: float, poll_s: float, sample: Callable[[], None] | None = None
) -> tuple[int, str] | None:
    """Wait until every worker has exited or `timeout_s` has passed, calling `sample()` at each poll; the exit
    code and the stderr of the first worker that failed, or None."""
    import anyio

    deadline = time.monotonic() + timeout_s
    while any(x.poll() is None for x in procs) and time.monotonic() < deadline:
        if sample is not None:
            sample()
        await anyio.sleep(poll_s)
    failed = [x for x in procs if x.returncode not in (0, None)]
    if not failed:
        return None
    return failed[0].returncode, failed[0].stderr.read().decode(errors="replace") if failed[0].stderr else ""
