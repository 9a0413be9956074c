"""What both proxies do with each frame, independent of the transport that carried it.

A proxy hands every client→server frame to `on_client_frame` and every server→client frame to
`on_server_frame`, and gets back what to do: forward (maybe after a delay), answer it ourselves, swallow it,
replace it, send it twice, hold it. The interceptor pairs requests with responses, asks the fault engine,
records faults and calls, and owns the fail-safe rule: if our own logic raises, the original frame passes
unchanged and the error is logged; in strict mode the exchange fails closed with a JSON-RPC error instead.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from faultplane.core.jsonrpc_guard import loads_bounded
from faultplane.plane.faults import (
    Decision,
    FaultEngine,
    FaultEvent,
    error_reply,
    request_id_key,
    task_of,
    tool_of,
)
from faultplane.plane.metrics import CallRecord, outcome_of
from faultplane.plane.plan import FaultPlan
from faultplane.plane.recorder import Recorder

__all__ = ["DETECTED_METHOD", "PASS", "ClientAction", "Interceptor", "ServerAction"]

log = logging.getLogger("faultplane.plane")

STRICT_ERROR_CODE = -32603
# Requests whose answer a timeout fault must swallow although nobody waits for it any more (the client gave
# up). Bounded: a server that never answers them must not grow the proxy's memory.
_MAX_SWALLOW = 4096


@dataclass(slots=True)
class ClientAction:
    forward: bool = True
    delay_s: float = 0.0
    reply: bytes | None = None  # an answer to send back to the client instead of forwarding


@dataclass(slots=True)
class ServerAction:
    # Frames to deliver, in order; None stands for the original frame's bytes, untouched.
    frames: list[bytes | None] = field(default_factory=lambda: [None])
    hold_s: float | None = None


PASS = ClientAction()
_CONSUMED = ClientAction(forward=False)  # the plane's own notification: nothing to forward, nothing to answer
# A client reports that it noticed a wrong answer by itself: {"requestId": <id of the call>, "reason": "..."}
DETECTED_METHOD = "notifications/faultplane/detected"
_PASS_SERVER = ServerAction()
_SWALLOW = ServerAction(frames=[])


@dataclass(slots=True)
class _Pending:
    rid: str
    t0: float
    method: str
    tool: str | None
    task: str | None
    decision: Decision | None
    faults: list[FaultEvent] = field(default_factory=list)  # those that took effect so far


def _strict_message(exc: Exception) -> str:
    return f"faultplane proxy internal error (strict mode): {exc}"


def encode(msg: dict[str, Any]) -> bytes:
    """Compact JSON, the way MCP SDKs frame messages."""
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode()


class Interceptor:
    def __init__(self, plan: FaultPlan, *, strict: bool = False, recorder: Recorder | None = None) -> None:
        self.engine = FaultEngine(plan)
        self.strict = strict
        self.recorder = recorder
        self._pending: dict[str, _Pending] = {}
        self._swallow: OrderedDict[str, None] = OrderedDict()
        # head-of-line blocking: until when each session's connection is held by a stalled call
        self._blocked_until: dict[str, float] = {}
        self.internal_errors = 0
        self.detections = 0

    # --- client -> server ---------------------------------------------------------------------------------

    def on_client_frame(self, raw: bytes | str, scope: str = "", session: str | None = None) -> ClientAction:
        """`scope` keeps apart equal JSON-RPC ids from different exchanges (HTTP sessions reuse ids);
        `session` names the connection calls queue on (head-of-line blocking), by default `scope`."""
        try:
            msg = loads_bounded(raw)
        except ValueError:
            return PASS  # not ours to judge; the server decides what to do with garbage
        return self.on_client_message(msg, scope, session)

    def on_client_message(self, msg: Any, scope: str = "", session: str | None = None) -> ClientAction:
        """`on_client_frame` for a frame the caller has parsed already (the HTTP proxy needs its id too)."""
        if not isinstance(msg, dict):
            return PASS
        method = msg.get("method")
        if not isinstance(method, str):
            return PASS
        if "id" not in msg:
            if method == "notifications/cancelled":
                self._client_gave_up(msg, scope)
            elif method == DETECTED_METHOD:
                return self._client_noticed(msg)
            return PASS
        if not isinstance(msg["id"], str | int) or isinstance(msg["id"], bool):
            return (
                PASS  # not a request (its answer, an error, carries id null): nothing to pair or to wait for
            )
        rid = request_id_key(msg["id"])
        key = scope + rid
        try:
            decision = self.engine.on_request(msg)
        except Exception as exc:
            return self._client_side_failure(msg, key, rid, exc)
        now = time.perf_counter()
        queued = self._queued_behind(scope if session is None else session, now, decision)
        if decision is None:
            self._pending[key] = _Pending(rid, now, method, tool_of(msg), task_of(msg), None)
            return PASS if not queued else ClientAction(delay_s=queued)
        pending = _Pending(rid, now, method, decision.tool, task_of(msg), decision)
        self._inject(pending, decision.immediate_events)
        delay_s = queued + decision.delay_s
        if decision.reply is not None:
            self._record(pending, outcome_of(decision.reply), delay_s * 1000.0)
            return ClientAction(forward=False, delay_s=delay_s, reply=encode(decision.reply))
        self._pending[key] = pending
        return ClientAction(delay_s=delay_s)

    def _queued_behind(self, scope: str, now: float, decision: Decision | None) -> float:
        """How long a request waits behind a stalled call on its session (head-of-line blocking); a call
        that stalls holds the session from now until its own stall ends."""
        if not self._blocked_until and (decision is None or not decision.block_s):
            return 0.0
        wait = max(0.0, self._blocked_until.get(scope, 0.0) - now)
        if decision is not None and decision.block_s:
            self._blocked_until[scope] = now + wait + decision.delay_s
            if len(self._blocked_until) > 1000:  # sessions come and go; forget the ones no longer held
                for s in [s for s, t in self._blocked_until.items() if t <= now]:
                    del self._blocked_until[s]
        return wait

    def _inject(self, pending: _Pending, events: list[FaultEvent]) -> None:
        """Faults that changed what the client sees: only these are recorded as injected."""
        if events:
            pending.faults.extend(events)
            if self.recorder:
                self.recorder.faults(events)

    def _client_side_failure(self, msg: dict[str, Any], key: str, rid: str, exc: Exception) -> ClientAction:
        self.internal_errors += 1
        log.error("plane proxy: fault logic failed on request %s: %s", key, exc, exc_info=True)
        if self.strict:
            reply = error_reply(msg["id"], STRICT_ERROR_CODE, _strict_message(exc))
            return ClientAction(forward=False, reply=encode(reply))
        self._pending[key] = _Pending(
            rid, time.perf_counter(), msg["method"], tool_of(msg), task_of(msg), None
        )
        return PASS

    def _client_noticed(self, msg: dict[str, Any]) -> ClientAction:
        """The client says an answer was wrong and it noticed: recorded, never forwarded (the server would
        not know the method)."""
        params = msg.get("params")
        if isinstance(params, dict) and "requestId" in params and self.recorder is not None:
            reason = params.get("reason")
            self.recorder.detected(
                request_id_key(params["requestId"]), reason if isinstance(reason, str) else ""
            )
        self.detections += 1
        return _CONSUMED

    def _client_gave_up(self, msg: dict[str, Any], scope: str) -> None:
        params = msg.get("params")
        if isinstance(params, dict) and "requestId" in params:
            self.abandon(scope + request_id_key(params["requestId"]))

    def abandon(self, key: str, outcome: Any = "timeout") -> None:
        """No answer will be paired with this request: the client gave up (timeout), or the transport
        answered with something that is not a JSON-RPC response (an HTTP error: rpc_error)."""
        pending = self._pending.pop(key, None)
        if pending is None:
            return
        d = pending.decision
        if d is not None and d.drop_response:
            # The server may still answer (servers need not honour cancellation); that answer must be
            # swallowed as the fault promised, not slip through now that nobody pairs it.
            self._swallow[key] = None
            while len(self._swallow) > _MAX_SWALLOW:
                self._swallow.popitem(last=False)
            if d.timeout_event is not None and outcome == "timeout":
                self._inject(pending, [d.timeout_event])
        self._record(pending, outcome, (time.perf_counter() - pending.t0) * 1000.0)

    # --- server -> client ---------------------------------------------------------------------------------

    def on_server_frame(
        self, raw: bytes | str, scope: str = "", *, can_duplicate: bool = True
    ) -> ServerAction:
        """`can_duplicate=False` where the transport cannot deliver an answer twice (a JSON HTTP body)."""
        if not self._pending and not self._swallow:
            return _PASS_SERVER
        try:
            msg = loads_bounded(raw)
        except ValueError:
            return _PASS_SERVER
        if not isinstance(msg, dict) or "method" in msg or "id" not in msg:
            return _PASS_SERVER  # notifications and server->client requests are not faulted
        key = scope + request_id_key(msg["id"])
        pending = self._pending.pop(key, None)
        if pending is None:
            if self._swallow and key in self._swallow:
                del self._swallow[key]
                return _SWALLOW  # the late answer to a timed-out request the client gave up on
            return _PASS_SERVER
        elapsed_ms = (time.perf_counter() - pending.t0) * 1000.0
        d = pending.decision
        if d is None:
            self._record(pending, outcome_of(msg), elapsed_ms)
            return _PASS_SERVER
        try:
            if d.drop_response:
                if d.timeout_event is not None:
                    self._inject(pending, [d.timeout_event])
                self._record(pending, "timeout", elapsed_ms)
                return _SWALLOW
            mutated, effective = self.engine.respond(msg, d, can_duplicate=can_duplicate)
            frame = encode(mutated) if mutated is not None else None
            self._inject(pending, effective)
            self._record(pending, outcome_of(mutated or msg), elapsed_ms, corrupted=mutated is not None)
            twice = d.duplicate and can_duplicate
            return ServerAction(frames=[frame, frame] if twice else [frame], hold_s=d.hold_s)
        except Exception as exc:
            self.internal_errors += 1
            log.error("plane proxy: fault logic failed on response %s: %s", msg.get("id"), exc, exc_info=True)
            if self.strict:
                reply = error_reply(msg["id"], STRICT_ERROR_CODE, _strict_message(exc))
                self._record(pending, "rpc_error", elapsed_ms)
                return ServerAction(frames=[encode(reply)])
            self._record(pending, outcome_of(msg), elapsed_ms)
            return _PASS_SERVER

    def has_pending(self, key: str | None = None) -> bool:
        return bool(self._pending) if key is None else key in self._pending

    def close(self) -> None:
        """Requests never answered by the time the session ends."""
        for pending in self._pending.values():
            self._record(pending, "unanswered", (time.perf_counter() - pending.t0) * 1000.0)
        self._pending.clear()

    def _record(self, p: _Pending, outcome: Any, latency_ms: float, *, corrupted: bool = False) -> None:
        if self.recorder is None:
            return
        faults = [e.fault_name for e in p.faults]
        self.recorder.call(
            CallRecord(
                ts=time.time(),
                method=p.method,
                tool=p.tool,
                request_id=p.rid,
                outcome=outcome,
                latency_ms=latency_ms,
                faults=faults,
                corrupted=corrupted,
                task_id=p.task,
            )
        )
