"""Idempotent tool contracts for Python MCP servers: a retry, a replayed request or a retry storm acts once.

A mutating tool declares an `idempotency_key` argument and is wrapped with `@idempotent()` under the
official SDK's `@server.tool()`:

    @mcp.tool()
    @idempotent()
    def transfer(amount: int, idempotency_key: str) -> Receipt: ...

The first call with a key runs the tool and keeps its result; a later call with the same key and the same
arguments gets that result back without running the tool again (also while the first is still running: it
waits for it); the same key with different arguments is refused, since that is a bug, not a retry. Keys are
kept for `ttl_s` seconds, at most `max_keys` of them (the oldest go first). The store is in memory, per
process: a server with several instances shares keys through its own database instead.
"""

from __future__ import annotations

import functools
import inspect
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from mcp.server.mcpserver.exceptions import ToolError

__all__ = ["IdempotencyConflict", "idempotent"]

F = TypeVar("F", bound=Callable[..., Any])


class IdempotencyConflict(ToolError, ValueError):
    """The key is missing, or was used before with different arguments: a tool error the client sees."""


class _Entry:
    __slots__ = ("args", "done", "error", "expires", "result")

    def __init__(self, args: str, expires: float, done: anyio.Event | None) -> None:
        self.args = args
        self.expires = expires
        self.done = done  # set when the first call ends (async tools: a retry waits for it)
        self.result: Any = None
        self.error: BaseException | None = None


def _bound(signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()  # a retry that leaves out a default is the same call
    return dict(bound.arguments)


def idempotent(
    *, key: str = "idempotency_key", ttl_s: float = 3600.0, max_keys: int = 10_000
) -> Callable[[F], F]:
    """Make a tool act once per idempotency key (see the module doc). The key argument must be declared."""

    def wrap(fn: F) -> F:
        signature = inspect.signature(fn)
        if key not in signature.parameters:
            raise TypeError(f"@idempotent: {fn.__name__} has no {key!r} argument; declare `{key}: str`")
        seen: OrderedDict[str, _Entry] = OrderedDict()
        lock = threading.Lock()

        def fingerprint(kwargs: dict[str, Any]) -> str:
            return json.dumps({k: v for k, v in kwargs.items() if k != key}, sort_keys=True, default=repr)

        def claim(kwargs: dict[str, Any], *, in_loop: bool) -> tuple[_Entry, bool]:
            """The entry for this call's key, and whether this call must run the tool."""
            k = kwargs.get(key)
            if not isinstance(k, str) or not k:
                raise IdempotencyConflict(
                    f"{key}: required for {fn.__name__}; fix: send a unique key per action"
                )
            now = time.monotonic()
            with lock:
                while seen and next(iter(seen.values())).expires < now:
                    seen.popitem(last=False)
                entry = seen.get(k)
                if entry is not None:
                    if entry.args != fingerprint(kwargs):
                        raise IdempotencyConflict(
                            f"{key}: {k!r} was used for a {fn.__name__} call with other arguments; fix: a new "
                            "key for a new action, the same arguments for a retry"
                        )
                    return entry, False
                entry = seen[k] = _Entry(fingerprint(kwargs), now + ttl_s, anyio.Event() if in_loop else None)
                while len(seen) > max_keys:
                    seen.popitem(last=False)
                return entry, True

        def forget(kwargs: dict[str, Any], entry: _Entry) -> None:
            with lock:
                if seen.get(kwargs[key]) is entry:
                    del seen[kwargs[key]]  # a failed action did not happen: a retry may run it

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                kwargs = _bound(signature, args, kwargs)
                entry, first = claim(kwargs, in_loop=True)
                if not first:
                    if entry.done is not None:
                        await entry.done.wait()
                    if entry.error is not None:
                        raise entry.error
                    return entry.result
                try:
                    entry.result = await fn(**kwargs)
                except BaseException as exc:
                    entry.error = exc
                    forget(kwargs, entry)
                    raise
                finally:
                    if entry.done is not None:
                        entry.done.set()
                return entry.result

            return run_async  # type: ignore[return-value]

        call_lock = threading.Lock()

        @functools.wraps(fn)
        def run_sync(*args: Any, **kwargs: Any) -> Any:
            kwargs = _bound(signature, args, kwargs)
            with call_lock:  # a sync tool's concurrent retries run one after another
                entry, first = claim(kwargs, in_loop=False)
                if not first:
                    if entry.error is not None:
                        raise entry.error
                    return entry.result
                try:
                    entry.result = fn(**kwargs)
                except BaseException:
                    forget(kwargs, entry)
                    raise
                return entry.result

        return run_sync  # type: ignore[return-value]

    return wrap
