"""Executing one activity through its provider: python, process, http, or a Faultplane driver."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib
import inspect
import itertools
import json
import os
import queue
import shlex
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any

import anyio

from faultplane.core.model import (
    Activity,
    DriverProvider,
    HttpProvider,
    ProcessProvider,
    PythonProvider,
)
from faultplane.drivers.base import ActivityContext, DriverError, get_activity
from faultplane.engine.strategies import CTK_COMPAT

__all__ = ["ActivityFailed", "ActivityTimeout", "execute_provider", "jsonable"]


class ActivityFailed(RuntimeError):
    """The activity could not do its job (raised, timed out, unreachable, unexpected status). `output` keeps
    what it produced all the same (a failed process's status, stdout and stderr) for the journal."""

    def __init__(self, message: str, output: Any = None) -> None:
        super().__init__(message)
        self.output = output


class ActivityTimeout(ActivityFailed):
    """The provider's own timeout (process or HTTP) expired."""


_FUNC_CACHE: dict[tuple[str, str], tuple[Callable[..., Any], bool, bool, bool]] = {}


def _python_func(module: str, func: str) -> tuple[Callable[..., Any], bool, bool, bool]:
    """(function, takes `configuration`, takes `secrets`, is a coroutine function), looked up once per run of
    the process: inspecting a signature costs more than calling a trivial probe."""
    key = (module, func)
    found = _FUNC_CACHE.get(key)
    if found is None:
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            raise ActivityFailed(f"cannot import module {module!r}: {exc}") from None
        fn = getattr(mod, func, None)
        if not callable(fn):
            raise ActivityFailed(f"module {module!r} has no function {func!r}")
        try:
            params: Any = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        found = (fn, "configuration" in params, "secrets" in params, inspect.iscoroutinefunction(fn))
        _FUNC_CACHE[key] = found
    return found


class _Worker(threading.Thread):
    """A thread that runs blocking provider functions one at a time, handed over through a queue.

    The hop to a thread is what lets a timeout, an abort or Ctrl-C stop waiting for a function that blocks;
    anyio's `to_thread` does the same but costs ~3x more per call (a capacity limiter, a checkpoint and a
    wrapper per call), which for a run of quick probes is most of the engine's time. A waiter that is
    cancelled abandons its worker as `to_thread(abandon_on_cancel=True)` does: the function runs on, its
    result is dropped, and the worker rejoins the pool only once it is free, so later calls never queue
    behind a hung function."""

    _IDLE: list[_Worker] = []
    _LOCK = threading.Lock()
    _MAX_IDLE = 8

    def __init__(self) -> None:
        super().__init__(name="faultplane-provider", daemon=True)
        self.jobs: queue.SimpleQueue[
            tuple[Callable[[], Any], contextvars.Context, asyncio.AbstractEventLoop, asyncio.Future[Any]]
        ] = queue.SimpleQueue()
        self.start()

    @classmethod
    def take(cls) -> _Worker:
        with cls._LOCK:
            if cls._IDLE:
                return cls._IDLE.pop()
        return cls()

    def run(self) -> None:
        while True:
            fn, ctx, loop, fut = self.jobs.get()
            try:
                outcome: tuple[bool, Any] = (True, ctx.run(fn))
            except BaseException as exc:  # handed to the waiter, which decides what it means
                outcome = (False, exc)
            del fn, ctx
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
                loop.call_soon_threadsafe(_settle, fut, *outcome)
            del loop, fut, outcome
            with self._LOCK:
                if len(self._IDLE) >= self._MAX_IDLE:
                    return
                self._IDLE.append(self)


def _settle(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if fut.done():  # the waiter was cancelled (timeout, abort): the result is dropped
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


async def _in_thread(fn: Callable[[], Any]) -> Any:
    """Run a blocking function in a worker thread; cancelling the wait abandons the function."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # another anyio backend (trio)
        return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)
    fut: asyncio.Future[Any] = loop.create_future()
    # the function sees this task's context variables (the run's blast-radius cap among them)
    _Worker.take().jobs.put((fn, contextvars.copy_context(), loop, fut))
    return await fut


# ---- running a blocking function on the loop's own thread ---------------------------------------------------
#
# A hop to a worker thread and back costs ~170 µs on a small VM (two cross-CPU wake-ups), more than a quick
# probe itself: for a run of 200 probes it is most of the engine's time. When the engine owns the process's
# signals (the CLI) and nothing else runs on the loop at that moment (no gate, monitor, load or background
# activity), a blocking function runs inline instead. What the thread gave is kept: Ctrl-C and SIGTERM still
# stop a function that blocks (the engine's handler raises `_InlineInterrupt` in it; the loop sees the same
# signal through its wake-up fd and cancels the run as before), and an activity timeout still stops it
# (a one-shot SIGALRM at the cancel scope's deadline). A function stuck in C code that ignores EINTR delays
# both until it returns, as it would under Chaos Toolkit.


class _InlineInterrupt(BaseException):
    """A signal reached a function running inline. BaseException, so a probe's `except Exception` lets it by."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Inline:
    armed = False  # the engine's signal watcher installed `_on_signal` (main thread, asyncio loop)
    running = False  # a function runs inline right now: only then may the handler raise
    saved_alarm: Any = None


def _on_signal(signum: int, frame: Any) -> None:
    if _Inline.running:
        _Inline.running = False
        raise _InlineInterrupt(signum)


def arm_inline_signals() -> bool:
    """Called by the engine's signal watcher once the loop handles SIGINT and SIGTERM: let blocking functions
    run inline. Only the main thread can install handlers; elsewhere functions keep using worker threads."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return False
    alarm = signal.getsignal(signal.SIGALRM)
    if alarm not in (signal.SIG_DFL, signal.SIG_IGN, None):
        return False  # somebody else uses SIGALRM: activity timeouts could not be enforced inline
    # The loop keeps its wake-up fd (a C-level handler writes every signal to it); these Python-level handlers
    # only interrupt an inline function, and only while one runs.
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    _Inline.saved_alarm = alarm
    signal.signal(signal.SIGALRM, _on_signal)
    _Inline.armed = True
    return True


def disarm_inline_signals() -> None:
    """Back to worker threads. SIGINT/SIGTERM go back to the loop when its signal receiver closes."""
    if not _Inline.armed:
        return
    _Inline.armed = False
    _Inline.running = False
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, _Inline.saved_alarm or signal.SIG_DFL)


async def _inline(fn: Callable[[], Any], timed: bool) -> Any:
    """`timed`: the activity has a timeout. The engine runs inline only where its own activity timeouts are
    the only deadlines (see `lifecycle._Runner._run_phases`), so the deadline is looked up only then."""
    deadline = anyio.current_effective_deadline() if timed else float("inf")
    timed = deadline != float("inf")
    loop = asyncio.get_running_loop()
    try:
        try:
            if timed:
                signal.setitimer(signal.ITIMER_REAL, max(deadline - anyio.current_time(), 1e-6))
            # the function sees the thread as a worker thread would: no running loop, so a probe that calls
            # asyncio.run() or anyio.run() (Chaos Toolkit extensions do) works as it did in a thread
            asyncio._set_running_loop(None)
            _Inline.running = True
            result = fn()
        finally:
            _Inline.running = False
            asyncio._set_running_loop(loop)
            if timed:
                signal.setitimer(signal.ITIMER_REAL, 0)
    except _InlineInterrupt as exc:
        # The loop has the signal too (SIGINT/SIGTERM: the watcher cancels the run) or the deadline passed
        # (SIGALRM: the cancel scope fires): yield so that cancellation arrives here, as for a thread.
        await anyio.sleep(0)
        await anyio.sleep(1.0)
        if exc.signum == signal.SIGALRM:
            raise ActivityTimeout("timed out") from None
        raise ActivityFailed(f"interrupted by {signal.Signals(exc.signum).name}") from None
    return result


def _scoped_secrets(ctx: ActivityContext, scopes: list[str] | None) -> dict[str, Any]:
    if not scopes:
        return {}
    out: dict[str, Any] = {}
    for scope in scopes:
        out.update(ctx.secrets.get(scope, {}))
    return out


async def _run_python(p: PythonProvider, ctx: ActivityContext, timed: bool = True) -> Any:
    fn, wants_configuration, wants_secrets, is_async = _python_func(p.module, p.func)
    kwargs = dict(p.arguments)
    # Chaos Toolkit passes configuration/secrets to functions that declare them
    if wants_configuration and "configuration" not in kwargs:
        kwargs["configuration"] = ctx.configuration
    if wants_secrets and "secrets" not in kwargs:
        kwargs["secrets"] = _scoped_secrets(ctx, p.secrets)
    try:
        if is_async:
            return await fn(**kwargs)
        if ctx.inline and _Inline.armed:
            return await _inline(lambda: fn(**kwargs), timed)
        return await _in_thread(lambda: fn(**kwargs))
    except TypeError as exc:
        raise ActivityFailed(f"{p.module}.{p.func}: {exc}") from None
    except (ActivityFailed, DriverError):
        raise
    except Exception as exc:
        raise ActivityFailed(f"{type(exc).__name__}: {exc}") from exc


def process_command(path: str, arguments: str | list[Any] | dict[str, Any]) -> str | list[str]:
    """The command as Chaos Toolkit runs it: a string of arguments goes through the shell after the resolved
    executable (`sh -c "<path> <arguments>"`, so quoting, pipes and redirections work as they did there); a
    list runs as a list; a mapping runs as its keys and values in order. Empty and null items are left out."""
    exe = shutil.which(os.path.expanduser(path)) or path
    if isinstance(arguments, str):
        return f"{shlex.quote(exe)} {arguments}" if arguments else shlex.quote(exe)
    items = itertools.chain.from_iterable(arguments.items()) if isinstance(arguments, dict) else arguments
    return [exe, *(str(a) for a in items if a not in (None, ""))]


async def _run_process(p: ProcessProvider, ctx: ActivityContext, kind: str) -> Any:
    env = {**os.environ, **(p.env or {})}
    cmd = process_command(p.path, p.arguments)
    try:
        with anyio.fail_after(p.timeout) if p.timeout else _nullcontext():
            proc = await anyio.run_process(cmd, check=False, env=env, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ActivityFailed(f"executable not found: {p.path}") from None
    except TimeoutError:
        raise ActivityTimeout(f"process {p.path} timed out after {p.timeout}s") from None
    out: dict[str, Any] = {
        "status": proc.returncode,
        "stdout": proc.stdout.decode("utf-8", "replace"),
        "stderr": proc.stderr.decode("utf-8", "replace"),
    }
    if kind == "action" and proc.returncode != 0 and not CTK_COMPAT.get():
        raise ActivityFailed(
            f"process {p.path} exited with status {proc.returncode}: {out['stderr'][-500:]}", output=out
        )
    return out


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


async def _run_http(p: HttpProvider, ctx: ActivityContext) -> Any:
    import httpx  # ~0.1 s to import; only experiments with http activities pay it

    timeout: Any = p.timeout if p.timeout is not None else 30.0
    if isinstance(timeout, list):
        timeout = httpx.Timeout(timeout[1], connect=timeout[0])
    method = p.method.upper()
    kwargs: dict[str, Any] = {"headers": p.headers}
    if p.arguments is not None:
        # as Chaos Toolkit sends them: query parameters for GET; otherwise JSON only when the request says
        # `Content-Type: application/json`, else a form (a mapping) or the raw text
        declared_json = any(
            k.lower() == "content-type" and v == "application/json" for k, v in p.headers.items()
        )
        if method == "GET" and isinstance(p.arguments, dict):
            kwargs["params"] = p.arguments
        elif isinstance(p.arguments, str):
            kwargs["content"] = p.arguments
        elif declared_json or not isinstance(p.arguments, dict):
            kwargs["json"] = p.arguments
        else:
            kwargs["data"] = {
                k: v if isinstance(v, str | bytes) else json.dumps(v) for k, v in p.arguments.items()
            }
    try:
        async with httpx.AsyncClient(timeout=timeout, verify=p.verify_tls) as client:
            resp = await client.request(method, p.url, **kwargs)
    except httpx.TimeoutException:
        raise ActivityTimeout(f"{method} {p.url} timed out") from None
    except httpx.HTTPError as exc:
        raise ActivityFailed(f"{method} {p.url} failed: {type(exc).__name__}: {exc}") from None
    # a JSON body is decoded when the response says it is JSON (Chaos Toolkit: exactly `application/json`)
    media = resp.headers.get("content-type", "")
    is_json = (
        media == "application/json" if CTK_COMPAT.get() else media.split(";")[0].strip() == "application/json"
    )
    body: Any = resp.text
    if is_json:
        with contextlib.suppress(json.JSONDecodeError, ValueError):
            body = resp.json()
    out = {"status": resp.status_code, "headers": dict(resp.headers), "body": body}
    if p.expected_status is not None and resp.status_code != p.expected_status:
        raise ActivityFailed(f"{method} {p.url} returned {resp.status_code}, expected {p.expected_status}")
    return out


async def _run_driver(p: DriverProvider, ctx: ActivityContext) -> Any:
    try:
        spec = get_activity(p.driver, p.name)
        return await spec.invoke(ctx, p.arguments)
    except DriverError as exc:
        raise ActivityFailed(str(exc)) from None
    except Exception as exc:
        raise ActivityFailed(f"{p.driver}.{p.name}: {type(exc).__name__}: {exc}") from exc


async def execute_provider(activity: Activity, ctx: ActivityContext) -> Any:
    """Run the activity's provider once and return its output (raises ActivityFailed)."""
    p = activity.provider
    if isinstance(p, PythonProvider):
        return await _run_python(p, ctx, activity.timeout is not None)
    if isinstance(p, ProcessProvider):
        return await _run_process(p, ctx, activity.type)
    if isinstance(p, HttpProvider):
        return await _run_http(p, ctx)
    return await _run_driver(p, ctx)


def jsonable(value: Any) -> Any:
    """The value as JSON-compatible data; whatever JSON cannot hold becomes its string form, never dropped."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hasattr(value, "model_dump"):
        try:
            return jsonable(value.model_dump(mode="json"))
        except Exception:
            pass
    return str(value)
