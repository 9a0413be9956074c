"""The one fault engine of the plane: decide which faults hit a JSON-RPC exchange, and apply them.

The engine knows nothing about transports. A driver (simulator, stdio proxy, HTTP proxy) hands it each
request as a decoded dict and gets a `Decision` back (delay it, answer it ourselves, swallow the answer,
corrupt the answer, duplicate or hold it); later it hands over the matching response and gets the mutated
message, or None when the bytes can go through untouched.

Every random draw is a hash of (plan seed, fault index, tool or method, the call's ordinal for that tool),
not a draw from a shared stream. So the nth call to a tool meets the same faults in every run with the same
seed, even when other tools' calls interleave differently under concurrency.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from faultplane.core.jsonrpc_guard import loads_bounded
from faultplane.plane.plan import (
    ColdToolFault,
    DuplicateResponseFault,
    ErrorInjectionFault,
    FaultPlan,
    HeadOfLineFault,
    LatencyFault,
    PartialResultFault,
    RegistryInconsistencyFault,
    ReorderFault,
    SchemaDriftFault,
    TimeoutFault,
)

__all__ = [
    "SELFTEST_ENV",
    "SELFTEST_RESPONSE_ENV",
    "Decision",
    "FaultEngine",
    "FaultEvent",
    "request_id_key",
    "task_of",
    "tool_of",
    "uniform",
]

# Testing hook for the fail-safe/strict paths: a tool-name glob whose requests make the engine raise.
SELFTEST_ENV = "FAULTPLANE_PLANE_SELFTEST_RAISE"
# The same for the response side: answers to requests for matching tools make the engine raise.
SELFTEST_RESPONSE_ENV = "FAULTPLANE_PLANE_SELFTEST_RAISE_RESPONSE"
TASK_META_KEY = "faultplane/task"
MODERN_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"

_U64 = float(2**64)


def uniform(seed: int, index: int, key: str, ordinal: int, salt: str = "") -> float:
    digest = hashlib.blake2b(f"{seed}|{index}|{key}|{ordinal}|{salt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _U64


def request_id_key(rid: Any) -> str:
    """JSON-RPC ids may be numbers or strings; 1 and "1" are different ids."""
    if type(rid) is int:
        return str(rid)  # what json.dumps gives, without its cost on the hot path
    return json.dumps(rid)


def tool_of(msg: dict[str, Any]) -> str | None:
    params = msg.get("params")
    if msg.get("method") == "tools/call" and isinstance(params, dict):
        name = params.get("name")
        return name if isinstance(name, str) else None
    return None


def task_of(msg: dict[str, Any]) -> str | None:
    params = msg.get("params")
    if isinstance(params, dict):
        meta = params.get("_meta")
        if isinstance(meta, dict):
            task = meta.get(TASK_META_KEY)
            if task is not None:
                return str(task)
    return None


@dataclass(slots=True)
class FaultEvent:
    ts: float
    fault_type: str
    fault_name: str
    method: str
    tool: str | None
    request_id: str | None
    seed: int
    detail: str = ""


@dataclass(slots=True)
class Decision:
    request_id: str | None
    method: str
    tool: str | None
    delay_s: float = 0.0
    reply: dict[str, Any] | None = None
    drop_response: bool = False
    mutators: list[Any] = field(default_factory=list)
    duplicate: bool = False
    hold_s: float | None = None
    # head-of-line blocking: the calls queued behind this one on its session wait this long too
    block_s: float = 0.0
    # a stale-route fault covers this tool: its real answers are kept, for a later stale answer
    watch_answers: bool = False
    events: list[FaultEvent] = field(default_factory=list)
    # Events of faults that act on the answer. Whether they change anything is known only when the answer
    # arrives (a drift of a field the result lacks changes nothing), so they are not injected yet.
    deferred: dict[int, FaultEvent] = field(default_factory=dict)  # id(fault or marker) -> event
    timeout_event: FaultEvent | None = None

    @property
    def immediate_events(self) -> list[FaultEvent]:
        """Faults that changed the exchange already on the way in (delays, answers made up by the plane)."""
        later = {id(e) for e in self.deferred.values()}
        if self.timeout_event is not None:
            later.add(id(self.timeout_event))
        return [e for e in self.events if id(e) not in later]

    @property
    def corrupts(self) -> bool:
        """The answer will look fine to the client but is wrong (truncated, drifted or incomplete)."""
        return bool(self.mutators) and self.reply is None and not self.drop_response

    @property
    def touches_response(self) -> bool:
        return bool(self.mutators) or self.duplicate or self.hold_s is not None


def error_reply(rid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def is_modern(msg: dict[str, Any]) -> bool:
    """A 2026-07-28 era request: it carries the protocol version in `params._meta`."""
    params = msg.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and MODERN_VERSION_KEY in meta


def tool_error_reply(rid: Any, message: str, *, modern: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": message}], "isError": True}
    if modern:
        result["resultType"] = "complete"  # required on every 2026-07-28 result
    return {"jsonrpc": "2.0", "id": rid, "result": result}


class FaultEngine:
    """Stateful only where the fault model needs it (call ordinals, cold-tool idle clocks)."""

    def __init__(self, plan: FaultPlan, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.plan = plan
        self.seed = plan.seed
        self.clock = clock
        self._faults = list(enumerate(plan.faults))
        self._ordinals: dict[str, int] = {}
        self._last_call: dict[str, float] = {}
        self._scope_cache: dict[tuple[str, str | None], list[tuple[int, Any]]] = {}
        # the last answer the server gave each tool: what a stale route answers with instead
        self._earlier: dict[str, dict[str, Any]] = {}
        self._selftest = os.environ.get(SELFTEST_ENV) or None
        self._selftest_response = os.environ.get(SELFTEST_RESPONSE_ENV) or None

    @property
    def empty(self) -> bool:
        return not self._faults

    def _event(self, fault: Any, d: Decision, detail: str = "") -> FaultEvent:
        return FaultEvent(
            ts=time.time(),
            fault_type=fault.type,
            fault_name=fault.label,
            method=d.method,
            tool=d.tool,
            request_id=d.request_id,
            seed=self.seed,
            detail=detail,
        )

    def on_request(self, msg: dict[str, Any]) -> Decision | None:
        """The faults for one client request; None when the plan leaves it alone."""
        method = msg.get("method")
        if not isinstance(method, str) or "id" not in msg:
            return None  # notifications and responses are never faulted on the way in
        tool = tool_of(msg)
        if self._selftest and tool is not None and fnmatchcase(tool, self._selftest):
            raise RuntimeError(f"self-test failure requested by ${SELFTEST_ENV} for tool {tool!r}")
        if not self._faults:
            return None
        key = tool if tool is not None else method
        ordinal = self._ordinals.get(key, 0)
        self._ordinals[key] = ordinal + 1
        now = self.clock()
        rid = msg.get("id")
        d = Decision(request_id=request_id_key(rid), method=method, tool=tool)
        if tool is not None:
            last = self._last_call.get(tool)
            self._last_call[tool] = now
        else:
            last = None

        for index, fault in self._scoped(method, tool):
            if isinstance(fault, RegistryInconsistencyFault) and fault.mode == "stale_route":
                d.watch_answers = True
            if isinstance(fault, ColdToolFault):
                if tool is None:
                    continue
                if last is not None and (now - last) * 1000.0 < fault.idle_ms:
                    continue  # warm
            if fault.probability < 1.0 and uniform(self.seed, index, key, ordinal) >= fault.probability:
                continue
            self._apply(index, fault, d, key, ordinal, msg)

        if d.reply is not None or d.drop_response:
            # An answer we make up ourselves never reaches the server, and a swallowed answer never reaches
            # the client, so nothing that acts on the answer can apply.
            d.mutators.clear()
            d.duplicate = False
            d.hold_s = None
            dropped = {id(e) for e in d.deferred.values()}
            d.deferred.clear()
            if d.reply is not None:
                d.drop_response = False
                if d.timeout_event is not None:
                    dropped.add(id(d.timeout_event))
                    d.timeout_event = None
            d.events = [e for e in d.events if id(e) not in dropped]
        if not d.events and not d.watch_answers:
            return None
        return d

    def _scoped(self, method: str, tool: str | None) -> list[tuple[int, Any]]:
        """The faults whose scope covers (method, tool), memoised: glob matching is the hot part."""
        hit = self._scope_cache.get((method, tool))
        if hit is None:
            hit = [
                (index, fault)
                for index, fault in self._faults
                if (
                    self._registry_applies(fault, method, tool)
                    if isinstance(fault, RegistryInconsistencyFault)
                    else fault.matches(method, tool)
                )
            ]
            if len(self._scope_cache) < 10_000:  # tool names come from clients; keep the memo bounded
                self._scope_cache[(method, tool)] = hit
        return hit

    @staticmethod
    def _registry_applies(fault: RegistryInconsistencyFault, method: str, tool: str | None) -> bool:
        if fault.mode == "missing_from_list":
            return method == "tools/list" and "tools/list" in fault.methods
        return method == "tools/call" and tool is not None and any(fnmatchcase(tool, t) for t in fault.tools)

    def _apply(
        self, index: int, fault: Any, d: Decision, key: str, ordinal: int, msg: dict[str, Any]
    ) -> None:
        rid = msg.get("id")
        if isinstance(fault, LatencyFault):
            extra = fault.added_ms
            if fault.jitter_ms:
                extra += fault.jitter_ms * uniform(self.seed, index, key, ordinal, "jitter")
            d.delay_s += extra / 1000.0
            d.events.append(self._event(fault, d, f"delay_ms={extra:.3f}"))
        elif isinstance(fault, ColdToolFault):
            d.delay_s += fault.added_ms / 1000.0
            d.events.append(self._event(fault, d, f"cold_start_ms={fault.added_ms:g}"))
        elif isinstance(fault, ErrorInjectionFault):
            if d.reply is None:
                if fault.as_tool_error:
                    d.reply = tool_error_reply(rid, fault.message, modern=is_modern(msg))
                else:
                    d.reply = error_reply(rid, fault.code, fault.message)
                d.events.append(self._event(fault, d, f"code={fault.code}"))
        elif isinstance(fault, HeadOfLineFault):
            d.delay_s += fault.added_ms / 1000.0
            d.block_s = max(d.block_s, fault.added_ms / 1000.0)
            d.events.append(self._event(fault, d, f"blocks_ms={fault.added_ms:g}"))
        elif isinstance(fault, RegistryInconsistencyFault):
            if fault.mode == "stale_route":
                d.mutators.append(fault)
                self._defer(d, fault, self._event(fault, d, "stale_route"))
            elif fault.mode == "listed_but_broken":
                if d.reply is None:
                    d.reply = error_reply(rid, -32602, f"Unknown tool: {d.tool}")
                    d.events.append(self._event(fault, d, "listed_but_broken"))
            else:
                d.mutators.append(fault)
                self._defer(d, fault, self._event(fault, d, "missing_from_list"))
        elif isinstance(fault, TimeoutFault):
            d.drop_response = True
            if d.timeout_event is None:
                d.timeout_event = self._event(fault, d)
                d.events.append(d.timeout_event)
        elif isinstance(fault, SchemaDriftFault | PartialResultFault):
            d.mutators.append(fault)
            self._defer(d, fault, self._event(fault, d))
        # A second duplicate or reorder fault on the same call adds nothing: the first one counts.
        elif isinstance(fault, DuplicateResponseFault) and not d.duplicate:
            d.duplicate = True
            self._defer(d, _DUPLICATE, self._event(fault, d))
        elif isinstance(fault, ReorderFault) and d.hold_s is None:
            d.hold_s = fault.max_hold_ms / 1000.0
            self._defer(d, _HOLD, self._event(fault, d, f"max_hold_ms={fault.max_hold_ms:g}"))

    @staticmethod
    def _defer(d: Decision, what: Any, event: FaultEvent) -> None:
        d.deferred[id(what)] = event
        d.events.append(event)

    def respond(
        self, msg: dict[str, Any], decision: Decision, *, can_duplicate: bool = True, can_hold: bool = True
    ) -> tuple[dict[str, Any] | None, list[FaultEvent]]:
        """The response as the client should see it (None: unchanged) and the answer-side faults that took
        effect. A driver passes `can_duplicate=False` / `can_hold=False` where it cannot repeat or hold an
        answer (one JSON body per HTTP response; the simulator's sequential calls), so those are not counted."""
        if self._selftest_response and decision.tool and fnmatchcase(decision.tool, self._selftest_response):
            raise RuntimeError(
                f"self-test failure requested by ${SELFTEST_RESPONSE_ENV} for tool {decision.tool!r}"
            )
        mutated, changed = self._mutate(msg, decision)
        effective = [decision.deferred[id(f)] for f in changed if id(f) in decision.deferred]
        if decision.duplicate and can_duplicate and id(_DUPLICATE) in decision.deferred:
            effective.append(decision.deferred[id(_DUPLICATE)])
        if decision.hold_s is not None and can_hold and id(_HOLD) in decision.deferred:
            effective.append(decision.deferred[id(_HOLD)])
        return mutated, effective

    def on_response(self, msg: dict[str, Any], decision: Decision) -> dict[str, Any] | None:
        """The response as the client should see it; None when it is unchanged."""
        return self._mutate(msg, decision)[0]

    def _mutate(self, msg: dict[str, Any], decision: Decision) -> tuple[dict[str, Any] | None, list[Any]]:
        result = msg.get("result")
        earlier = self._earlier.get(decision.tool) if decision.tool is not None else None
        if (
            decision.watch_answers
            and decision.tool is not None
            and isinstance(result, dict)
            and result.get("isError") is not True
            and (len(self._earlier) < 1000 or decision.tool in self._earlier)  # tool names come from clients
        ):
            self._earlier[decision.tool] = result  # replaced, never mutated: copies are taken below
        if not decision.mutators:
            return None, []
        if not isinstance(result, dict):
            return None, []  # errors carry no payload to corrupt
        out = copy.deepcopy(msg)
        res = out["result"]
        changed = []
        for fault in decision.mutators:
            hit = False
            if isinstance(fault, RegistryInconsistencyFault) and fault.mode == "stale_route":
                if earlier is not None and earlier != result:
                    out["result"] = res = copy.deepcopy(earlier)
                    hit = True
            elif isinstance(fault, RegistryInconsistencyFault):
                hit = _hide_tools(res, fault.tools)
            elif isinstance(fault, SchemaDriftFault):
                hit = _drift_result(res, fault)
            elif isinstance(fault, PartialResultFault):
                hit = _truncate_result(res, fault)
            if hit:
                changed.append(fault)
        return (out if changed else None), changed


# Markers for the answer-side faults that are not mutators.
_DUPLICATE = object()
_HOLD = object()


# --- result mutations -------------------------------------------------------------------------------------


def _hide_tools(result: dict[str, Any], patterns: list[str]) -> bool:
    tools = result.get("tools")
    if not isinstance(tools, list):
        return False
    kept = [
        t
        for t in tools
        if not (isinstance(t, dict) and any(fnmatchcase(str(t.get("name")), p) for p in patterns))
    ]
    result["tools"] = kept
    return len(kept) != len(tools)


def _json_blocks(result: dict[str, Any]) -> list[tuple[dict[str, Any], Any]]:
    """Text content blocks whose text is a JSON document, with the decoded document."""
    out = []
    content = result.get("content")
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                text = block["text"].strip()
                if text[:1] in ("{", "["):
                    with contextlib.suppress(ValueError):
                        out.append((block, loads_bounded(text)))
    return out


def _retyped(value: Any, kind: str) -> Any:
    try:
        if kind == "string":
            return value if isinstance(value, str) else json.dumps(value)
        if kind == "number":
            return float(value) if not isinstance(value, dict | list) else 0.0
        if kind == "integer":
            return int(float(value)) if not isinstance(value, dict | list) else 0
        if kind == "boolean":
            return bool(value)
        if kind == "list":
            return [value]
        if kind == "object":
            return {"value": value}
    except (TypeError, ValueError):
        return str(value)
    return None


def _walk(doc: Any, path: str) -> tuple[Any, str] | None:
    """The container holding the dotted `path`'s last key, and that key."""
    parts = path.split(".")
    node = doc
    for part in parts[:-1]:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if isinstance(node, dict) and parts[-1] in node:
        return node, parts[-1]
    return None


def _drift_doc(doc: Any, fault: SchemaDriftFault) -> bool:
    if fault.default_drift:
        if not isinstance(doc, dict) or not doc:
            return False
        renamed = {f"{k}_v2": v for k, v in doc.items()}
        doc.clear()
        doc.update(renamed)
        return True
    changed = False
    for old, new in fault.rename.items():
        hit = _walk(doc, old)
        if hit:
            node, key = hit
            node[new.split(".")[-1]] = node.pop(key)
            changed = True
    for path in fault.remove:
        hit = _walk(doc, path)
        if hit:
            node, key = hit
            del node[key]
            changed = True
    for path, kind in fault.retype.items():
        hit = _walk(doc, path)
        if hit:
            node, key = hit
            node[key] = _retyped(node[key], kind)
            changed = True
    return changed


def _drift_result(result: dict[str, Any], fault: SchemaDriftFault) -> bool:
    changed = False
    sc = result.get("structuredContent")
    if isinstance(sc, dict):
        changed |= _drift_doc(sc, fault)
    for block, doc in _json_blocks(result):
        if isinstance(doc, dict) and _drift_doc(doc, fault):
            block["text"] = json.dumps(doc)
            changed = True
    return changed


def _keep(n: int, fault: PartialResultFault, cap: int | None) -> int:
    keep = math.floor(n * fault.keep_fraction)
    if cap is not None:
        keep = min(keep, cap)
    return keep


def _has_list(doc: Any) -> bool:
    if isinstance(doc, list):
        return True
    return isinstance(doc, dict) and any(_has_list(v) for v in doc.values())


def _truncate_doc(doc: Any, fault: PartialResultFault, strings: bool | None = None) -> tuple[Any, bool]:
    """Cut lists short; when there is no list to cut, cut the text instead (partial output either way)."""
    if strings is None:
        strings = not _has_list(doc)
    if isinstance(doc, list):
        keep = _keep(len(doc), fault, fault.max_items)
        items = [_truncate_doc(x, fault, strings)[0] for x in doc[:keep]]
        return items, keep < len(doc) or items != doc[:keep]
    if isinstance(doc, dict):
        changed = False
        out = {}
        for k, v in doc.items():
            out[k], c = _truncate_doc(v, fault, strings)
            changed |= c
        return out, changed
    if strings and isinstance(doc, str) and doc:
        keep = _keep(len(doc), fault, fault.max_chars)
        return doc[:keep], keep < len(doc)
    return doc, False


def _truncate_result(result: dict[str, Any], fault: PartialResultFault) -> bool:
    changed = False
    sc = result.get("structuredContent")
    if isinstance(sc, dict):
        new, c = _truncate_doc(sc, fault)
        if c:
            result["structuredContent"] = new
            changed = True
    content = result.get("content")
    if isinstance(content, list) and content:
        json_blocks = {id(b): doc for b, doc in _json_blocks(result)}
        if len(content) > 1:
            # One block per list item (how SDK servers render a list result): drop the tail blocks.
            keep = max(1, _keep(len(content), fault, fault.max_items))
            if keep < len(content):
                del content[keep:]
                changed = True
        for block in content:
            if not (isinstance(block, dict) and block.get("type") == "text"):
                continue
            text = block.get("text")
            if not isinstance(text, str) or not text:
                continue
            if id(block) in json_blocks:
                new, c = _truncate_doc(json_blocks[id(block)], fault)
                if c:
                    block["text"] = json.dumps(new)
                    changed = True
                    continue
                if len(content) > 1:
                    continue
            keep_chars = _keep(len(text), fault, fault.max_chars)
            if keep_chars < len(text) and id(block) not in json_blocks:
                block["text"] = text[:keep_chars]
                changed = True
    return changed
