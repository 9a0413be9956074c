"""Stopping the server never leaves an experiment half-done: runs in flight are aborted and roll back first.

Both transports route SIGTERM and SIGINT here. Aborting cancels each run's scope; the engine then runs its
rollbacks (shielded) and finishes the journal, and only then does the server exit.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import anyio

from faultplane.mcp_server.stdio import serve_stdio

__all__ = ["ROLLBACK_GRACE_S", "abort_in_process_runs", "serve_stdio_until_signalled", "wait_for_runs"]

# How long a stopping server waits for aborted runs to finish their rollbacks.
ROLLBACK_GRACE_S = 30.0


def abort_in_process_runs(reason: str) -> list[str]:
    """Abort every run this process is executing; returns their ids. Call from the event loop's thread."""
    from faultplane.engine.lifecycle import abort_run, active_runs

    return [rid for rid in active_runs() if abort_run(rid, reason)]


async def wait_for_runs(timeout: float = ROLLBACK_GRACE_S) -> None:
    from faultplane.engine.lifecycle import active_runs

    with anyio.move_on_after(timeout):
        while active_runs():
            await anyio.sleep(0.05)


async def serve_stdio_until_signalled(server: Any, limits: Any = None) -> None:
    """Serve over stdio; on SIGTERM/SIGINT abort runs in flight, let them roll back, then stop."""
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    abort_in_process_runs(f"MCP server stopped by {signal.Signals(signum).name}")
                    await wait_for_runs()
                    await anyio.sleep(0.2)  # let the answers to the aborted runs reach the client
                    # The stdio reader is a thread blocked on the client's pipe, which no cancel scope can
                    # interrupt, so end the way the signal would have: default action, re-raised.
                    signal.signal(signum, signal.SIG_DFL)
                    os.kill(os.getpid(), signum)
                    return

        tg.start_soon(watch)
        await serve_stdio(server, limits)
        tg.cancel_scope.cancel()
