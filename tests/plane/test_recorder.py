"""The recorder keeps what it could not write while the store is held by another process."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import faultplane.core.store as store_mod
from faultplane.plane.faults import FaultEvent
from faultplane.plane.metrics import CallRecord
from faultplane.plane.plan import parse_plan
from faultplane.plane.recorder import Recorder, load_session, plane_store

HOLD = "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('held', flush=True); sys.stdin.read()"


def event(i: int) -> FaultEvent:
    return FaultEvent(time.time(), "timeout", "timeout", "tools/call", "t", str(i), 1)


def record(i: int) -> CallRecord:
    return CallRecord(time.time(), "tools/call", "t", str(i), "timeout", 1.0, ["timeout"])


def counts(path: Path) -> tuple[int, int]:
    st = plane_store(path)
    e = st.query("SELECT count(*) AS n FROM plane_fault_events")[0]["n"]
    c = st.query("SELECT count(*) AS n FROM plane_calls")[0]["n"]
    return int(e), int(c)


def test_a_batch_survives_a_store_held_past_the_retry_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "busy.duckdb"
    plane_store(path)  # schema in place before another process takes the file
    monkeypatch.setattr(store_mod, "_LOCK_WAIT_S", 0.3)
    rec = Recorder(driver="test", target="t", plan=parse_plan({"seed": 1}), store_path=path)
    rec.flush()  # the session row
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        rec.faults([event(1), event(2)])
        rec.call(record(1))
        rec.flush()  # busy: nothing written, nothing lost
        rec.call(record(2))
        rec.flush()
        assert len(rec._events) == 2 and [c.request_id for c in rec._calls] == ["1", "2"]
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
    rec.flush(final=True)
    assert counts(path) == (2, 2)  # each record exactly once
    assert rec._events == [] and rec._calls == [] and rec.dropped == 0
    ended = plane_store(path).query("SELECT ended_at FROM plane_sessions")[0]["ended_at"]
    assert ended is not None


def test_the_buffer_is_bounded_while_the_store_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")  # a store path under a file can never open
    rec = Recorder(driver="test", target="t", plan=parse_plan({}), store_path=blocker / "s.duckdb")
    rec.max_buffered = 3
    for i in range(5):
        rec.call(record(i))
        rec.flush()
    assert [c.request_id for c in rec._calls] == ["2", "3", "4"] and rec.dropped == 2


def test_a_flush_writes_every_field_of_every_record_as_given(tmp_path: Path) -> None:
    """The rows go in as column lists (one statement per table): values, NULLs and types must come back as
    they went in, row by row, in a batch that mixes present and absent optional fields."""
    path = tmp_path / "rows.duckdb"
    rec = Recorder(driver="http", target="t", plan=parse_plan({"seed": 7}), store_path=path)
    calls = [
        CallRecord(1_700_000_000.25, "tools/call", "add", "1", "ok", 0.5, [], task_id="t1"),
        CallRecord(1_700_000_001.5, "tools/list", None, None, "rpc_error", 12.0, ["a", "b"], corrupted=True),
        CallRecord(1_700_000_002.0, "tools/call", "add", '"x"', "tool_error", 3.25, ["a"]),
    ]
    for c in calls:
        rec.call(c)
    rec.faults([FaultEvent(1_700_000_000.5, "error", "e1", "tools/call", None, "1", 7, "code -32000")])
    rec.detected("1", "wrong sum")
    rec.flush(final=True)
    loaded = load_session(plane_store(path), rec.session_id)
    assert loaded is not None
    session, back, n_events = loaded
    assert session["driver"] == "http" and session["seed"] == 7 and session["ended_at"] is not None
    assert n_events == 1
    got = [(c.ts, c.method, c.tool, c.request_id, c.outcome, c.latency_ms, c.faults, c.corrupted, c.task_id)
           for c in back]  # fmt: skip
    want = [(c.ts, c.method, c.tool, c.request_id, c.outcome, c.latency_ms, c.faults, c.corrupted, c.task_id)
            for c in calls]  # fmt: skip
    assert got == want
    assert [c.detected for c in back] == [True, False, False]
    row = plane_store(path).query("SELECT * FROM plane_fault_events")[0]
    assert (row["tool"], row["request_id"], row["seed"], row["detail"]) == (None, "1", 7, "code -32000")
    flags = plane_store(path).query("SELECT available, correct FROM plane_calls ORDER BY ts")
    assert [(r["available"], r["correct"]) for r in flags] == [(True, True), (False, False), (False, False)]
