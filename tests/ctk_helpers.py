"""Functions that test experiments call through the python provider (tests/ is on sys.path)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from faultplane.drivers.base import ActivityContext, action


def record(path: str, line: str) -> str:
    """Append a line to a file: lets tests see that an activity really ran."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
    return line


def lines(path: str) -> list[str]:
    p = Path(path)
    return p.read_text(encoding="utf-8").splitlines() if p.exists() else []


def value(v: Any) -> Any:
    return v


def fail(message: str = "boom") -> None:
    raise RuntimeError(message)


def slow(seconds: float, marker: str | None = None) -> float:
    if marker:
        record(marker, "started")
    time.sleep(seconds)
    return seconds


def thread_name() -> str:
    """Which thread ran the probe: the engine runs blocking probes inline or in a worker thread."""
    import threading

    return threading.current_thread().name


def nested_loops() -> str:
    """A blocking probe that runs its own event loops, as Chaos Toolkit extensions wrapping async clients do."""
    import asyncio

    import anyio

    async def answer() -> str:
        await asyncio.sleep(0)
        return "ok"

    return asyncio.run(answer()) + "+" + anyio.run(answer)


def stubborn_sleep(seconds: float, marker: str | None = None) -> float:
    """A probe that swallows every Exception while it blocks, as careless probes do; the marker says which
    thread ran it."""
    import threading

    if marker:
        record(marker, "started")
        record(marker, threading.current_thread().name)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            time.sleep(deadline - time.monotonic())
        except Exception:
            continue
    return seconds


def unserialisable() -> Any:
    class Thing:
        def __repr__(self) -> str:
            return "<Thing 42>"

    return {"thing": Thing(), "items": {1, 2}, "raw": b"bytes"}


def config_echo(key: str, configuration: dict[str, Any] | None = None) -> Any:
    return (configuration or {}).get(key)


def secret_echo(key: str, secrets: dict[str, Any] | None = None) -> Any:
    return (secrets or {}).get(key)


def is_even(value: Any) -> bool:
    return isinstance(value, int) and value % 2 == 0


def env(name: str) -> str | None:
    return os.environ.get(name)


class _MarkerParams(BaseModel):
    path: str
    label: str = "fault"


@action("testdriver", "mark", _MarkerParams, fault_type="error")
def mark(ctx: ActivityContext, params: _MarkerParams) -> str:
    """A fault that creates a marker file; its revert removes it."""
    target = Path(params.path)
    ctx.on_revert(lambda: target.unlink(missing_ok=True), label=f"remove {target.name}")
    target.write_text(params.label, encoding="utf-8")
    return str(target)


def mark_action(path: Path) -> dict[str, Any]:
    """The experiment activity that applies the `mark` fault on `path` (its revert removes the file)."""
    provider = {"type": "driver", "driver": "testdriver", "name": "mark", "arguments": {"path": str(path)}}
    return {"type": "action", "name": "apply", "provider": provider}


def slow_action(marker: Path, seconds: float = 30) -> dict[str, Any]:
    """The experiment activity that writes "started" to `marker` and then blocks: a run to interrupt."""
    arguments = {"seconds": seconds, "marker": str(marker)}
    provider = {"type": "python", "module": "ctk_helpers", "func": "slow", "arguments": arguments}
    return {"type": "action", "name": "wait", "provider": provider}


def cpu_count_probe(holds: bool = True) -> dict[str, Any]:
    """A steady-state probe on os.cpu_count() that holds on any machine, or (holds=False) on none."""
    provider = {"type": "python", "module": "os", "func": "cpu_count"}
    tolerance = {"type": "range", "range": [1, 4096] if holds else [0, 0]}
    return {"type": "probe", "name": "cpus", "provider": provider, "tolerance": tolerance}
