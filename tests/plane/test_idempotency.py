"""Idempotent tool contracts: through the stdio proxy, a call whose answer was lost (a timeout fault: the
server acted, the client never heard) is retried with the same key and acts once; a duplicated answer is
the same answer; the decorator's own edge cases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from planehelp import PY, stdio_proxy_params, write_plan

from faultplane.plane.idempotency import IdempotencyConflict, idempotent
from faultplane.plane.plan import parse_plan
from faultplane.plane.simulator import Patterns, Workload, simulate
from mcp import Client

HERE = Path(__file__).parent


async def _retry_until_answered(c: Client, tool: str, args: dict[str, Any], attempts: int = 8) -> Any:
    for _ in range(attempts):
        try:
            with anyio.fail_after(1.5):
                return await c.call_tool(tool, args)
        except TimeoutError:
            continue  # the answer was lost: retry the same action, same key
    raise AssertionError("no answer after retries")


@pytest.mark.anyio
@pytest.mark.parametrize(("tool", "actions"), [("transfer", 1), ("transfer_unsafe", 2)])
async def test_a_retry_after_a_lost_answer_acts_once_only_under_the_contract(
    tmp_path: Path, tool: str, actions: int
) -> None:
    ledger = tmp_path / "ledger.txt"
    # half the calls lose their answer (the server did the work, the client never heard); seeded, so the
    # same calls lose it in every run
    plan = write_plan(
        tmp_path, {"seed": 7, "faults": [{"type": "timeout", "tools": [tool], "probability": 0.5}]}
    )
    server = [PY, str(HERE / "idempotent_server.py"), str(ledger)]
    with anyio.fail_after(120):
        async with Client(stdio_proxy_params(plan, server=server)) as c:
            for n in range(4):  # four distinct actions, each retried with its key until its answer arrives
                result = await _retry_until_answered(c, tool, {"amount": n, "idempotency_key": f"pay-{n}"})
                assert not result.is_error
    lines = ledger.read_text().splitlines()
    per_key = {k: sum(1 for ln in lines if ln.split()[0] == k) for k in {ln.split()[0] for ln in lines}}
    assert len(per_key) == 4
    if actions == 1:
        assert all(n == 1 for n in per_key.values())  # lost answers were retried; no action ran twice
    else:
        assert any(n > 1 for n in per_key.values())  # without the contract, a retry acts again


@pytest.mark.anyio
async def test_a_duplicated_answer_is_the_same_answer(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    plan = write_plan(tmp_path, {"faults": [{"type": "duplicate_response", "tools": ["transfer"]}]})
    server = [PY, str(HERE / "idempotent_server.py"), str(ledger)]
    with anyio.fail_after(60):
        async with Client(stdio_proxy_params(plan, server=server)) as c:
            a = await c.call_tool("transfer", {"amount": 7, "idempotency_key": "k"})
            b = await c.call_tool("transfer", {"amount": 7, "idempotency_key": "k"})  # a client's replay
            conflict = await c.call_tool("transfer", {"amount": 8, "idempotency_key": "k"})
    assert a.structured_content == b.structured_content
    assert conflict.is_error and "other arguments" in conflict.content[0].text  # type: ignore[union-attr]
    assert ledger.read_text().splitlines() == ["k 7"]


def test_the_decorator_keeps_one_result_per_key_and_refuses_misuse() -> None:
    calls: list[int] = []

    @idempotent(ttl_s=60, max_keys=2)
    def act(n: int, idempotency_key: str, note: str = "") -> int:
        calls.append(n)
        return n * 10

    assert act(1, idempotency_key="a") == act(1, "a") == act(n=1, idempotency_key="a", note="") == 10
    assert calls == [1]
    with pytest.raises(IdempotencyConflict, match="other arguments"):
        act(2, idempotency_key="a")
    with pytest.raises(IdempotencyConflict, match="required"):
        act(3, idempotency_key="")
    act(4, idempotency_key="b")
    act(5, idempotency_key="c")  # max_keys=2: "a" is forgotten
    act(1, idempotency_key="a")
    assert calls == [1, 4, 5, 1]
    with pytest.raises(TypeError, match="no 'idempotency_key' argument"):

        @idempotent()
        def no_key(n: int) -> int:
            return n


def test_a_failed_action_can_be_retried() -> None:
    attempts: list[int] = []

    @idempotent()
    def flaky(idempotency_key: str) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("database hiccup")
        return "ok"

    with pytest.raises(RuntimeError):
        flaky(idempotency_key="x")
    assert flaky(idempotency_key="x") == "ok" and flaky(idempotency_key="x") == "ok"
    assert len(attempts) == 2


@pytest.mark.anyio
async def test_concurrent_async_retries_wait_for_the_first() -> None:
    runs: list[int] = []

    @idempotent()
    async def slow(idempotency_key: str) -> int:
        runs.append(1)
        await anyio.sleep(0.05)
        return len(runs)

    results: list[int] = []

    async def one() -> None:
        results.append(await slow(idempotency_key="same"))

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(one)
    assert runs == [1] and results == [1] * 5


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), p=st.floats(0.1, 0.6))
def test_in_the_simulator_retries_of_lost_answers_act_twice_unless_idempotent(seed: int, p: float) -> None:
    plan = parse_plan({"seed": seed, "faults": [{"type": "timeout", "tools": ["fetch"], "probability": p}]})
    w = Workload(tasks=80, fanout=4, mutating=("fetch",), call_timeout_ms=500)
    plain = simulate(plan, w, Patterns(retry=True))
    keyed = simulate(plan, w, Patterns(retry=True, idempotency=True))
    lost = sum(1 for c in plain.calls if c.tool == "fetch" and c.outcome == "timeout")
    retried_after_loss = plain.duplicate_actions
    assert keyed.duplicate_actions == 0
    assert retried_after_loss <= lost  # each extra action follows a lost answer
    if lost:
        assert retried_after_loss > 0  # and the retry budget retried at least one of them
    assert keyed.fingerprint() == plain.fingerprint()  # the key changes what the server does, not the wire
