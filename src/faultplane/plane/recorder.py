"""Where the plane writes what it did: sessions, injected fault events and per-call records, in the store.

The proxies sit on the hot path of every tool call, and a store write opens a DuckDB file, so records are
buffered in memory and flushed in batches from a worker thread (periodically, and once at the end).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from faultplane.plane.faults import FaultEvent
from faultplane.plane.metrics import CallRecord

if TYPE_CHECKING:
    from faultplane.core.store import Store
    from faultplane.plane.plan import FaultPlan

__all__ = ["PLANE_MIGRATIONS", "Recorder", "load_session", "new_session_id", "plane_store"]

log = logging.getLogger("faultplane.plane")

PLANE_MIGRATIONS: list[tuple[str, list[str]]] = [
    (
        "plane-001",
        [
            """CREATE TABLE IF NOT EXISTS plane_sessions (
                session_id VARCHAR PRIMARY KEY,
                driver VARCHAR,
                target VARCHAR,
                seed BIGINT,
                plan_digest VARCHAR,
                plan VARCHAR,
                strict BOOLEAN,
                started_at TIMESTAMPTZ,
                ended_at TIMESTAMPTZ
            )""",
            """CREATE TABLE IF NOT EXISTS plane_fault_events (
                session_id VARCHAR,
                ts TIMESTAMPTZ,
                fault_type VARCHAR,
                fault_name VARCHAR,
                method VARCHAR,
                tool VARCHAR,
                request_id VARCHAR,
                seed BIGINT,
                detail VARCHAR
            )""",
            """CREATE TABLE IF NOT EXISTS plane_calls (
                session_id VARCHAR,
                ts TIMESTAMPTZ,
                method VARCHAR,
                tool VARCHAR,
                request_id VARCHAR,
                task_id VARCHAR,
                outcome VARCHAR,
                latency_ms DOUBLE,
                faults VARCHAR,
                corrupted BOOLEAN,
                available BOOLEAN,
                correct BOOLEAN
            )""",
        ],
    ),
    (
        "plane-002",
        [
            # what a client reported noticing by itself (notifications/faultplane/detected): a wrong answer it
            # caught is a safe failure, which the wire alone cannot tell from a silent one
            """CREATE TABLE IF NOT EXISTS plane_detections (
                session_id VARCHAR,
                ts TIMESTAMPTZ,
                request_id VARCHAR,
                reason VARCHAR
            )""",
        ],
    ),
]


def new_session_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]


def plane_store(path: str | os.PathLike[str] | None = None) -> Store:
    from faultplane.core.store import open_store

    store = open_store(path)
    store.ensure_schema("plane", PLANE_MIGRATIONS)
    return store


def _ts(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


class Recorder:
    """Buffers fault events and call records for one proxy session; thread-safe appends."""

    max_buffered = 100_000  # per kind; a store that stays unavailable must not grow the proxy without bound

    def __init__(
        self,
        *,
        session_id: str | None = None,
        driver: str,
        target: str,
        plan: FaultPlan,
        strict: bool = False,
        store_path: str | os.PathLike[str] | None = None,
        enabled: bool = True,
    ) -> None:
        self.session_id = session_id or new_session_id()
        self.driver = driver
        self.target = target
        self.plan = plan
        self.strict = strict
        # a str keeps a store URL whole (Path would fold clickhouse:// into clickhouse:/)
        self.store_path = str(store_path) if store_path else None
        self.enabled = enabled
        self._events: list[FaultEvent] = []
        self._calls: list[CallRecord] = []
        self._detections: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._started = time.time()
        self._session_written = False
        self.fault_count = 0
        self.call_count = 0
        self.dropped = 0  # records given up on because the store stayed unavailable and the buffer filled

    def faults(self, events: list[FaultEvent]) -> None:
        with self._lock:
            self._events.extend(events)
            self.fault_count += len(events)

    def call(self, record: CallRecord) -> None:
        with self._lock:
            self._calls.append(record)
            self.call_count += 1

    def detected(self, request_id: str, reason: str) -> None:
        """The client reported noticing something wrong with the answer to `request_id`."""
        with self._lock:
            if len(self._detections) < self.max_buffered:
                row = {"session_id": self.session_id, "ts": _ts(time.time()), "request_id": request_id}
                self._detections.append({**row, "reason": reason[:500]})

    def flush(self, *, final: bool = False) -> None:
        """Write what is buffered, from a worker thread. Never raises: a lost record beats a dead proxy.

        When the store stays busy past its retry deadline (another process holds the file), the unwritten
        part of the batch goes back to the front of the buffer and is tried again at the next flush, so a
        busy store delays records instead of losing them; only past `max_buffered` are the oldest dropped.
        """
        if not self.enabled:
            return
        with self._flush_lock:
            with self._lock:
                events, self._events = self._events, []
                calls, self._calls = self._calls, []
                detections, self._detections = self._detections, []
            if not (events or calls or detections or final or not self._session_written):
                return
            try:
                store = plane_store(self.store_path)
                with store.batch():  # one open of the file for the whole flush, not one per table
                    self._write(store, events, calls, detections, final)
            except Exception as exc:
                with self._lock:
                    self._detections[:0] = detections
                self._keep(events, calls, exc, final)

    def _write(
        self,
        store: Store,
        events: list[FaultEvent],
        calls: list[CallRecord],
        detections: list[dict[str, Any]],
        final: bool,
    ) -> None:
        """Write the batch; each list is emptied once written, so a failure further down keeps only the rest."""
        if not self._session_written:
            # A session id given again (a restarted proxy) appends to the same session.
            store.execute(
                "INSERT INTO plane_sessions (session_id, driver, target, seed, plan_digest, plan, strict, "
                "started_at, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL) ON CONFLICT DO NOTHING",
                [
                    self.session_id,
                    self.driver,
                    self.target,
                    self.plan.seed,
                    self.plan.digest(),
                    self.plan.model_dump_json(),
                    self.strict,
                    _ts(self._started),
                ],
            )
            self._session_written = True
        store.insert("plane_fault_events", [self._event_row(e) for e in events])
        events.clear()
        store.insert("plane_calls", [self._call_row(c) for c in calls])
        calls.clear()
        store.insert("plane_detections", detections)
        detections.clear()
        if final:
            store.execute(
                "UPDATE plane_sessions SET ended_at = ? WHERE session_id = ?",
                [_ts(time.time()), self.session_id],
            )

    def _keep(self, events: list[FaultEvent], calls: list[CallRecord], exc: Exception, final: bool) -> None:
        with self._lock:
            self._events[:0] = events
            self._calls[:0] = calls
            over_e = max(0, len(self._events) - self.max_buffered)
            over_c = max(0, len(self._calls) - self.max_buffered)
            del self._events[:over_e]
            del self._calls[:over_c]
            self.dropped += over_e + over_c
            pending = len(self._events) + len(self._calls)
        if final:
            log.error(
                "plane recorder: store unavailable at shutdown (%s); %d records not written", exc, pending
            )
        else:
            log.warning(
                "plane recorder: store unavailable (%s); %d records kept for the next flush", exc, pending
            )
        if over_e or over_c:
            log.error("plane recorder: buffer full, dropped the %d oldest records", over_e + over_c)

    def _event_row(self, e: FaultEvent) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "ts": _ts(e.ts),
            "fault_type": e.fault_type,
            "fault_name": e.fault_name,
            "method": e.method,
            "tool": e.tool,
            "request_id": e.request_id,
            "seed": e.seed,
            "detail": e.detail,
        }

    def _call_row(self, c: CallRecord) -> dict[str, Any]:
        row = c.as_row()
        row["ts"] = _ts(c.ts)
        row["session_id"] = self.session_id
        return row


def load_session(
    store: Store, session_id: str | None = None
) -> tuple[dict[str, Any], list[CallRecord], int] | None:
    """The session row (latest when no id), its call records and its fault-event count."""
    if session_id:
        rows = store.query("SELECT * FROM plane_sessions WHERE session_id = ?", [session_id])
    else:
        rows = store.query("SELECT * FROM plane_sessions ORDER BY started_at DESC LIMIT 1")
    if not rows:
        return None
    session = rows[0]
    sid = session["session_id"]
    calls = [
        CallRecord(
            ts=r["ts"].timestamp(),
            method=r["method"],
            tool=r["tool"],
            request_id=r["request_id"],
            outcome=r["outcome"],
            latency_ms=r["latency_ms"],
            faults=[f for f in (r["faults"] or "").split(",") if f],
            corrupted=bool(r["corrupted"]),
            task_id=r["task_id"],
        )
        for r in store.query("SELECT * FROM plane_calls WHERE session_id = ? ORDER BY ts", [sid])
    ]
    # a detection marks the newest call with its request id made before it (ids repeat across MCP sessions)
    for d in store.query(
        "SELECT ts, request_id FROM plane_detections WHERE session_id = ? ORDER BY ts", [sid]
    ):
        when = d["ts"].timestamp()
        match = [c for c in calls if c.request_id == d["request_id"] and c.ts <= when + 1.0]
        if match:
            match[-1].detected = True
    n_events = store.query("SELECT count(*) AS n FROM plane_fault_events WHERE session_id = ?", [sid])[0]["n"]
    session["plan"] = json.loads(session["plan"]) if session.get("plan") else None
    return session, calls, int(n_events)
