"""Long tools an agent can watch and stop: engine events as MCP progress, client cancellation as an abort.

When the request carries a progress token, every phase, activity start and gate sample of the run becomes a
`notifications/progress` whose message says what happens now ("phase inject", "activity start: kill-db",
"gate p99_latency 812.0 < 500.0 breaching"). The engine calls the listener synchronously from its own code,
so events are queued and sent by a task of the request; a slow client never slows the run.

Cancellation: the SDK cancels the request's task when the client sends `notifications/cancelled` (or
closes an HTTP stream). Letting that cancellation cut through the engine would stop it between steps, so
the run executes in a shielded task instead, and the cancellation is turned into `abort_run`: the run's
own scope is cancelled, every rollback runs, and its journal ends with status "interrupted" and the
reason "cancelled by the MCP client". Only then does the request finish cancelling.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

__all__ = ["WATCH_GRACE_S", "Listener", "describe", "watch", "watched"]

T = TypeVar("T")
WATCH_GRACE_S = 60.0  # how long a cancelled request waits for its run's rollbacks and journal
_LATE_RUNS_S = 3.0  # how long after a cancellation runs that start late are still aborted
_QUEUE = 256  # events beyond this, unsent yet, are dropped (progress is advisory)
CANCEL_REASON = "cancelled by the MCP client"


def describe(event: dict[str, Any]) -> str | None:
    """A one-line progress message for an engine event; None for events not worth a notification."""
    kind = event.get("event")
    if kind == "phase":
        return f"phase {event.get('phase')}"
    if kind == "activity_start":
        return f"{event.get('section')}: {event.get('type')} {event.get('name')}"
    if kind == "activity":
        run = event.get("run") or {}
        activity = run.get("activity") or {}
        return f"{event.get('section')}: {activity.get('name', '?')} {run.get('status')}"
    if kind == "gate_sample":
        s = event.get("sample") or {}
        state = "breaching" if s.get("breaching") else "ok"
        return f"gate {s.get('gate')}: {s.get('sli')} {s.get('value')} {s.get('op')} {s.get('threshold')} {state}"
    if kind == "gate_breach":
        return f"gate breach: {event.get('breach')}"
    if kind == "hypothesis":
        return f"steady state {event.get('when', '')}: {'met' if event.get('met') else 'not met'}".replace(
            "  ", " "
        )
    if kind == "revert":
        return "reverting faults"
    if kind == "gameday_run":
        return f"gameday lane {event.get('lane')}: experiment {event.get('experiment')} starts"
    if kind == "search_trial":
        return f"search trial {event.get('trial')}/{event.get('budget')}: {event.get('params')}"
    if kind == "search_trial_done":
        state = "breached" if event.get("breached") else "held"
        return f"search trial {event.get('trial')}: measured {event.get('measured')} {state}"
    return None


class Listener:
    """The `on_event` a watched tool hands its service: engine events in, progress out; `stop_reason`
    tells a GameDay or a search to start nothing more once the client has cancelled."""

    def __init__(self, send: Callable[[dict[str, Any]], None]) -> None:
        self._send = send
        self.stopped: str | None = None

    def __call__(self, event: dict[str, Any]) -> None:
        self._send(event)

    def stop_reason(self) -> str | None:
        return self.stopped


async def watched(
    ctx: Any,
    start: Callable[[Listener], Awaitable[T]],
    *,
    active_runs: Callable[[], list[str]],
    abort_run: Callable[[str, str], bool],
) -> T:
    """Run `start(on_event)` with progress sent to the client and client cancellation turned into aborts."""
    send, receive = anyio.create_memory_object_stream[str](_QUEUE)
    before = set(active_runs())
    mine: set[str] = set()
    count = 0

    def on_event(event: dict[str, Any]) -> None:
        if not mine:
            mine.update(set(active_runs()) - before)
        message = describe(event)
        if message is not None:
            with contextlib.suppress(anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                send.send_nowait(message)

    async def report() -> None:
        nonlocal count
        async with receive:
            async for message in receive:
                count += 1
                try:
                    await ctx.report_progress(count, None, message)
                except Exception:  # the client went away: progress is advisory
                    return

    listener = Listener(on_event)
    outcome: dict[str, Any] = {}
    done = anyio.Event()

    async def run() -> None:
        try:
            with anyio.CancelScope(shield=True):
                outcome["value"] = await start(listener)
        except BaseException as exc:
            outcome["error"] = exc
        finally:
            send.close()
            done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(report)
        tg.start_soon(run)
        try:
            await done.wait()
        except anyio.get_cancelled_exc_class():
            listener.stopped = CANCEL_REASON  # a GameDay or search starts no further run
            with anyio.CancelScope(shield=True), anyio.move_on_after(WATCH_GRACE_S):
                for rid in mine or (set(active_runs()) - before):
                    abort_run(rid, CANCEL_REASON)
                # A lane's run may have passed its stop check but not yet registered when the first
                # aborts went out: runs new since the request began are aborted again for a short while.
                aborted = set(mine)
                for _ in range(int(_LATE_RUNS_S / 0.1)):
                    for rid in set(active_runs()) - before - aborted:
                        abort_run(rid, CANCEL_REASON)
                        aborted.add(rid)
                    with anyio.move_on_after(0.1):
                        await done.wait()
                    if done.is_set():
                        break
                await done.wait()
            raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


async def watch(ctx: Any, start: Callable[[Listener], Awaitable[T]]) -> T:
    """`watched` with this process's engine registry of runs."""
    from faultplane.engine.lifecycle import abort_run, active_runs

    return await watched(ctx, start, active_runs=active_runs, abort_run=abort_run)
