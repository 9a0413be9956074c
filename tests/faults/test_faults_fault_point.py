"""In-process fault points: decorator (sync, async), context manager (sync, async), each fault type, inject."""

from __future__ import annotations

import errno
import random
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

import faultplane.faultpoint as fp
from faultplane.core.faults import FaultRegistry, FaultSpec
from faultplane.faultpoint import (
    FaultInjected,
    FaultPartition,
    FaultResourceExhausted,
    FaultTimeout,
    fault_point,
)


@pytest.fixture
def reg(tmp_path: Path) -> FaultRegistry:
    return FaultRegistry(tmp_path / "faults.json")


def fresh(reg: FaultRegistry, name: str) -> fp.FaultPoint:
    """A point that reloads the registry now (tests change it faster than the 0.25 s poll)."""
    point = fault_point(name, registry=reg)
    point._watcher.refresh(force=True)
    return point


def test_no_fault_means_no_effect(reg: FaultRegistry) -> None:
    calls = []

    @fault_point("quiet", registry=reg)
    def f(x: int) -> int:
        calls.append(x)
        return x * 2

    assert [f(i) for i in range(100)] == [i * 2 for i in range(100)]
    assert f.__name__ == "f" and len(calls) == 100
    with fault_point("quiet", registry=reg):
        pass


@pytest.mark.parametrize(
    ("fault_type", "exc_type"),
    [
        ("error", FaultInjected),
        ("timeout", FaultTimeout),
        ("resource_exhaustion", FaultResourceExhausted),
        ("network_partition", FaultPartition),
    ],
)
def test_raising_fault_types(reg: FaultRegistry, fault_type: str, exc_type: type[Exception]) -> None:
    reg.register(FaultSpec("p", fault_type, probability=1.0, duration_seconds=0.0, error_message="msg"))
    point = fresh(reg, "p")
    ran = []

    @fault_point("p", registry=reg)
    def body() -> None:
        ran.append(1)

    with pytest.raises(exc_type, match="msg") as info:
        body()
    assert ran == []  # the body never runs
    exc = info.value
    assert isinstance(exc, FaultInjected) and exc.fault_name == "p"
    with pytest.raises(exc_type), point:
        ran.append(2)
    assert ran == []


def test_exceptions_are_the_builtin_kinds() -> None:
    assert issubclass(FaultTimeout, TimeoutError)
    assert issubclass(FaultPartition, ConnectionError)
    assert issubclass(FaultResourceExhausted, OSError)
    assert FaultResourceExhausted(errno.ENOMEM, "x").errno == errno.ENOMEM


def test_latency_sleeps_then_runs_the_body(reg: FaultRegistry) -> None:
    reg.register(FaultSpec("slow", "latency", probability=1.0, duration_seconds=0.05))

    @fault_point("slow", registry=reg)
    def f() -> str:
        return "done"

    fresh(reg, "slow")
    start = time.perf_counter()
    assert f() == "done"
    assert time.perf_counter() - start >= 0.05


def test_default_message_names_the_fault(reg: FaultRegistry) -> None:
    reg.register(FaultSpec("db", "error", probability=1.0))
    with pytest.raises(FaultInjected, match="fault 'db' \\(error\\) injected at fault point 'db'"):
        fresh(reg, "db").check()


@pytest.mark.anyio
async def test_async_decorator_and_context_manager(reg: FaultRegistry) -> None:
    @fault_point("a", registry=reg)
    async def handler(x: int) -> int:
        await anyio.sleep(0)
        return x + 1

    assert await handler(1) == 2
    reg.register(FaultSpec("a", "error", probability=1.0, error_message="async boom"))
    fresh(reg, "a")
    with pytest.raises(FaultInjected, match="async boom"):
        await handler(1)
    with pytest.raises(FaultInjected):
        async with fault_point("a", registry=reg):
            pass
    reg.register(FaultSpec("a", "latency", probability=1.0, duration_seconds=0.05))
    fresh(reg, "a")
    start = time.perf_counter()
    with anyio.fail_after(5):
        assert await handler(2) == 3
    assert time.perf_counter() - start >= 0.05
    reg.register(FaultSpec("a", "timeout", probability=1.0, duration_seconds=0.01))
    fresh(reg, "a")
    with pytest.raises(TimeoutError):
        async with fault_point("a", registry=reg):
            pass


def test_per_call_probability_is_seeded(reg: FaultRegistry) -> None:
    reg.register(FaultSpec("coin", "error", probability=0.3))
    point = fresh(reg, "coin")

    def pattern() -> list[bool]:
        out = []
        for _ in range(200):
            try:
                point.check()
                out.append(False)
            except FaultInjected:
                out.append(True)
        return out

    fp.seed(42)
    first = pattern()
    fp.seed(42)
    assert pattern() == first
    assert 20 < sum(first) < 100  # 200 calls at p=0.3: about 60


def test_inject_fires_exactly_once_at_the_next_call(reg: FaultRegistry) -> None:
    reg.register(FaultSpec("once", "error", probability=0.0, error_message="armed"))
    point = fresh(reg, "once")
    for _ in range(10):
        point.check()
    reg.register(FaultSpec("once", "error", probability=1.0, error_message="armed"))
    assert reg.inject("once", random.Random(0)) is True
    reg.register(FaultSpec("once", "error", probability=0.0, error_message="armed"))  # keeps the arm
    point._watcher.refresh(force=True)
    with pytest.raises(FaultInjected, match="armed"):
        point.check()
    for _ in range(20):
        point.check()  # used up
    assert reg.armed("once") == 0


def test_targets_for_other_fault_points_are_ignored(reg: FaultRegistry) -> None:
    reg.register(FaultSpec("db", "error", probability=1.0, target="netproxy:db"))
    fresh(reg, "db").check()  # a proxy route's fault: not for this point
    reg.register(FaultSpec("db", "error", probability=1.0, target="faultpoint:db"))
    with pytest.raises(FaultInjected):
        fresh(reg, "db").check()


def test_names_are_validated() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        fault_point("")


PROPAGATION_BOUND_S = 1.0  # the issue: another process's fault point sees a registration within 1 s


def test_another_process_sees_a_registration_within_1s(reg: FaultRegistry) -> None:
    """A child process calls its fault point in a loop; each registration here must take effect there within
    1 s, measured from the moment `register` returned to the child's first call that raised (both read the
    system-wide CLOCK_MONOTONIC). Three registrations at different phases of the child's 0.25 s poll."""
    names = ["x0", "x1", "x2"]
    script = (
        "import sys, time; import faultplane.faultpoint as fp\n"
        "for name in sys.argv[2:]:\n"
        "    p = fp.fault_point(name, registry=sys.argv[1])\n"
        "    p.check()\n"
        "    print('ready', flush=True)\n"
        "    deadline = time.monotonic() + 5\n"
        "    while time.monotonic() < deadline:\n"
        "        try: p.check()\n"
        "        except fp.FaultInjected: print(time.monotonic(), flush=True); break\n"
        "        time.sleep(0.002)\n"
        "    else: print('never', flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(reg.path), *names], stdout=subprocess.PIPE, text=True
    )
    delays = []
    try:
        assert proc.stdout is not None
        for i, name in enumerate(names):
            assert proc.stdout.readline().strip() == "ready"
            time.sleep(0.05 + 0.09 * i)  # vary the phase against the child's poll
            before = time.monotonic()
            reg.register(FaultSpec(name, "error", probability=1.0))
            registered = time.monotonic()
            seen = proc.stdout.readline().strip()  # bounded: the child gives up after 5 s and says so
            assert seen != "never", f"{name}: the child never saw the registration"
            assert float(seen) >= before
            delays.append(float(seen) - registered)
    finally:
        proc.kill()
        proc.wait(10)
    assert max(delays) < PROPAGATION_BOUND_S, delays


def test_import_stays_light() -> None:
    code = (
        "import sys, faultplane.faultpoint, faultplane.core.faults\n"
        "heavy = [m for m in ('mcp', 'duckdb', 'pydantic', 'anyio', 'faultplane.engine') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "", out.stdout + out.stderr


def test_top_level_export() -> None:
    import faultplane

    if not hasattr(faultplane, "fault_point"):
        pytest.skip("faultplane/__init__.py does not re-export fault_point yet (the lead's file)")
    assert faultplane.fault_point is fault_point
