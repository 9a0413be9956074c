"""Leases: every injected fault carries one, so a dead controller's faults are reverted without it.

A lease is a small JSON file in ``$XDG_STATE_HOME/faultplane/leases``: who holds the fault (controller pid and
its start time, so a recycled pid is not mistaken for a live controller), until when (``expires_at``, renewed
by the controller while it lives) and a *serialisable* revert recipe ``{"driver", "revert", "args"}`` naming a
function registered with :func:`revert_recipe` in the driver's module.

Three parties may revert a lease and exactly one must: the controller's own revert, the watchdog
(``python -m faultplane.drivers.leases watch``, started detached with the first lease) and ``faultplane
drivers leases reap``. Each claims the lease by renaming its file first; ``rename`` is atomic, so the loser
sees the file gone and does nothing.

Lease files are private (0600 in a 0700 folder). Credentials in a recipe's args are sealed with a key only the
controller and its own watchdog hold (:mod:`faultplane.drivers.sealing`), so one watchdog runs per controller.
A lease is written just before a change that reached its target; an action that failed before applying
anything withdraws it (:func:`withdraw`). Every reap is recorded in ``outcomes.jsonl`` (:func:`outcomes`),
from which a crashed run's journal is completed.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import importlib
import inspect
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil

from faultplane.core.paths import faultplane_dir
from faultplane.drivers import sealing
from faultplane.drivers.base import ActivityContext, DriverError, RevertEntry

__all__ = [
    "DEFAULT_TTL_S",
    "Lease",
    "ReapResult",
    "apply_or_revert",
    "create_lease",
    "ensure_watchdog",
    "lease_dir",
    "lease_ttl",
    "leased_revert",
    "list_leases",
    "outcomes",
    "reap",
    "release_lease",
    "revert_now",
    "revert_recipe",
    "run_recipe",
    "update_lease_args",
    "withdraw",
]

DEFAULT_TTL_S = 30.0
_MAX_ATTEMPTS = 5
_WATCH_INTERVAL_S = 0.25
_WATCH_IDLE_EXIT_S = 10.0

RecipeFn = Callable[[dict[str, Any]], Any]
_T = TypeVar("_T")
_RECIPES: dict[tuple[str, str], RecipeFn] = {}


def revert_recipe(driver: str, name: str) -> Callable[[RecipeFn], RecipeFn]:
    """Register ``fn(args) -> None`` as the revert ``name`` of ``driver``; args come from the lease JSON.

    A recipe runs in a process that did not apply the fault, so it must rebuild everything from ``args``
    and be idempotent (the fault may already be gone).
    """

    def deco(fn: RecipeFn) -> RecipeFn:
        _RECIPES[(driver, name)] = fn
        return fn

    return deco


def lease_dir() -> Path:
    path = faultplane_dir("state") / "leases"
    _private_dir(path)
    return path


def _private_dir(path: Path) -> None:
    """A folder only its owner can list or enter: lease files name targets, and sealed secrets are still
    nobody else's business."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)


def _proc_start_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


@dataclass
class Lease:
    lease_id: str
    run_id: str
    label: str
    driver: str
    revert: str
    args: dict[str, Any]
    controller_pid: int
    controller_started: float | None
    ttl_s: float
    created_at: float
    expires_at: float
    attempts: int = 0
    last_error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # the sealing key of the controller that wrote it, when some of `args` are sealed (see sealing.py)
    key_id: str | None = None

    @property
    def recipe(self) -> dict[str, Any]:
        return {"driver": self.driver, "revert": self.revert, "args": self.args}

    def controller_alive(self) -> bool:
        started = _proc_start_time(self.controller_pid)
        if started is None:
            return False
        try:
            if psutil.Process(self.controller_pid).status() == psutil.STATUS_ZOMBIE:
                return False
        except psutil.Error:
            return False
        # A recycled pid has a different start time than the controller that wrote the lease.
        return self.controller_started is None or abs(started - self.controller_started) < 1.0

    def stale_reason(self, now: float | None = None) -> str | None:
        """Why this lease must be reaped now, or None while its controller holds it."""
        now = time.time() if now is None else now
        if self.extra.get("forced"):
            return "forced"
        if now >= self.expires_at:
            return "expired"
        if not self.controller_alive():
            return f"controller pid {self.controller_pid} is gone"
        return None

    def path(self, directory: Path | None = None) -> Path:
        return (directory or lease_dir()) / f"{self.lease_id}.json"


def _write(lease: Lease, path: Path) -> None:
    tmp = path.with_suffix(f".tmp-{os.getpid()}-{threading.get_ident()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(asdict(lease), sort_keys=True))
    os.replace(tmp, path)


def _read(path: Path) -> Lease | None:
    try:
        data = json.loads(path.read_text())
        lease = Lease(**data)
        # Renewal touches the file's mtime (see _Keeper): the effective expiry is the later of the two.
        lease.expires_at = max(lease.expires_at, path.stat().st_mtime + lease.ttl_s)
        return lease
    except (OSError, ValueError, TypeError):
        return None


def list_leases(directory: Path | None = None) -> list[Lease]:
    directory = directory or lease_dir()
    out = []
    for p in sorted(directory.glob("*.json")):
        lease = _read(p)
        if lease is not None:
            out.append(lease)
    return out


class _Keeper:
    """Renews this process's leases from a daemon thread: renewals stop exactly when the process dies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, tuple[Path, float]] = {}
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()

    def hold(self, lease: Lease, path: Path) -> None:
        with self._lock:
            self._held[lease.lease_id] = (path, lease.ttl_s)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="faultplane-lease-keeper", daemon=True)
                self._thread.start()

    def drop(self, lease_id: str) -> None:
        with self._lock:
            self._held.pop(lease_id, None)

    def _run(self) -> None:
        while True:
            with self._lock:
                held = dict(self._held)
            if not held:
                # Park briefly, then exit if still idle; hold() restarts the thread.
                time.sleep(1.0)
                with self._lock:
                    if not self._held:
                        self._thread = None
                        return
                continue
            interval = 5.0
            for lease_id, (path, ttl_s) in held.items():
                # Touch, never rewrite: a lease claimed (renamed) by a reaper must not be re-created.
                try:
                    os.utime(path)
                except FileNotFoundError:
                    self.drop(lease_id)
                    continue
                except OSError:
                    pass
                interval = min(interval, max(ttl_s / 3.0, 0.1))
            self._wake.wait(interval)
            self._wake.clear()


_KEEPER = _Keeper()


def create_lease(
    *,
    run_id: str,
    label: str,
    driver: str,
    revert: str,
    args: dict[str, Any],
    ttl_s: float = DEFAULT_TTL_S,
    start_watchdog: bool = True,
    secret_values: list[str] | tuple[str, ...] = (),
) -> Lease:
    """Write a lease for a fault about to be applied, keep it renewed, and make sure a watchdog runs.

    Sensitive strings in ``args`` (``secret_values``, URL passwords, ``password=``) are sealed with this
    process's key (see :mod:`faultplane.drivers.sealing`) and the label is masked."""
    if (driver, revert) not in _RECIPES:
        _load_driver(driver)
    if (driver, revert) not in _RECIPES:
        raise DriverError(f"no revert recipe {driver}.{revert} is registered; cannot lease this fault")
    try:
        json.dumps(args)
    except TypeError as exc:
        raise DriverError(f"revert args for {driver}.{revert} must be JSON-serialisable: {exc}") from None
    now = time.time()
    sealed, kid = sealing.seal(args, secret_values)
    lease = Lease(
        lease_id=f"{run_id}-{uuid.uuid4().hex[:12]}",
        run_id=run_id,
        label=sealing.mask_text(label, secret_values),
        driver=driver,
        revert=revert,
        args=sealed,
        controller_pid=os.getpid(),
        controller_started=_proc_start_time(os.getpid()),
        ttl_s=ttl_s,
        created_at=now,
        expires_at=now + ttl_s,
        key_id=kid,
    )
    path = lease.path()
    _write(lease, path)
    _KEEPER.hold(lease, path)
    if start_watchdog and not os.environ.get("FAULTPLANE_NO_WATCHDOG"):
        ensure_watchdog()
    return lease


def _claim(lease_id: str, directory: Path) -> Path | None:
    """Take exclusive ownership of a lease file; None if someone else already has it."""
    src = directory / f"{lease_id}.json"
    dst = directory / f"{lease_id}.reaping-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        os.rename(src, dst)
    except FileNotFoundError:
        return None
    return dst


def _unclaim(claimed: Path, lease: Lease, directory: Path) -> None:
    _write(lease, directory / f"{lease.lease_id}.json")
    claimed.unlink(missing_ok=True)


def update_lease_args(
    lease_id: str, args: dict[str, Any], secret_values: list[str] | tuple[str, ...] = ()
) -> bool:
    """Replace a live lease's revert arguments (e.g. with what the action reported). False if it is gone."""
    json.dumps(args)
    sealed, kid = sealing.seal(args, secret_values)
    directory = lease_dir()
    claimed = _claim(lease_id, directory)  # hold it so no reaper reverts with the old arguments meanwhile
    if claimed is None:
        return False
    lease = _read(claimed)
    if lease is None:
        claimed.unlink(missing_ok=True)
        return False
    lease.args, lease.key_id = sealed, kid
    _unclaim(claimed, lease, directory)
    return True


def release_lease(lease_id: str) -> None:
    """Drop a lease without reverting (the fault ended on its own)."""
    _KEEPER.drop(lease_id)
    directory = lease_dir()
    claimed = _claim(lease_id, directory)
    if claimed is not None:
        claimed.unlink(missing_ok=True)


def _load_driver(driver: str) -> None:
    with contextlib.suppress(ModuleNotFoundError):
        importlib.import_module(f"faultplane.drivers.{driver}")


def run_recipe(driver: str, revert: str, args: dict[str, Any]) -> None:
    """Run a registered revert recipe (synchronously; async recipes are run to completion)."""
    if (driver, revert) not in _RECIPES:
        _load_driver(driver)
    fn = _RECIPES.get((driver, revert))
    if fn is None:
        raise DriverError(f"no revert recipe {driver}.{revert} is registered")
    result = fn(args)
    if inspect.isawaitable(result):
        import anyio

        async def _await() -> None:
            await result

        anyio.run(_await)


def lease_ttl(ctx: ActivityContext, *, at_least: float = 0.0) -> float:
    """The lease TTL of this run (the experiment's ``configuration: {lease_ttl_s: ...}``, DEFAULT_TTL_S if
    unset), raised to ``at_least`` for a fault whose own apply or revert waits that long on a server."""
    return max(float(ctx.configuration.get("lease_ttl_s", DEFAULT_TTL_S)), at_least)


def leased_revert(
    ctx: ActivityContext,
    *,
    label: str,
    driver: str,
    revert: str,
    args: dict[str, Any],
    fn: Callable[[], Awaitable[None] | None] | None = None,
    ttl_s: float | None = None,
) -> RevertEntry:
    """Register a revert with ``ctx`` *and* a lease backing it. Call before applying the change.

    ``fn`` is the in-process revert (defaults to running the recipe in a worker thread). When the
    controller reverts normally it claims the lease first, so the watchdog cannot revert twice; if the
    in-process revert fails, the lease is put back so the watchdog retries it.
    """
    ttl = ttl_s if ttl_s is not None else lease_ttl(ctx)
    lease = create_lease(
        run_id=ctx.run_id,
        label=label,
        driver=driver,
        revert=revert,
        args=args,
        ttl_s=ttl,
        secret_values=ctx.secret_values,
    )

    async def _revert() -> None:
        import anyio

        _KEEPER.drop(lease.lease_id)
        directory = lease_dir()
        claimed = _claim(lease.lease_id, directory)
        if claimed is None:
            return  # the watchdog (or a reap) already reverted this fault
        try:
            if fn is None:
                await anyio.to_thread.run_sync(run_recipe, driver, revert, args)
            else:
                result = fn()
                if inspect.isawaitable(result):
                    await result
        except BaseException as exc:
            lease.attempts += 1
            lease.last_error = sealing.mask_text(f"{type(exc).__name__}: {exc}", ctx.secret_values)
            _unclaim(claimed, lease, directory)
            raise
        claimed.unlink(missing_ok=True)

    return ctx.on_revert(_revert, label=label, lease_id=lease.lease_id)


def withdraw(ctx: ActivityContext, entry: RevertEntry) -> None:
    """Take back a revert whose change was never applied (the action failed before touching anything):
    no revert runs, and its lease is dropped so no watchdog retries undoing nothing."""
    with contextlib.suppress(ValueError):
        ctx.reverts.remove(entry)
        ctx.applied -= 1  # nothing was applied after all: this action shows no injection
    if entry.lease_id is not None:
        release_lease(entry.lease_id)


async def revert_now(ctx: ActivityContext, entry: RevertEntry) -> None:
    """Undo one change early (a fault with a duration that ran out) and take it off the revert stack."""
    with contextlib.suppress(ValueError):
        ctx.reverts.remove(entry)
    import anyio

    with anyio.CancelScope(shield=True):
        result = entry.fn()
        if inspect.isawaitable(result):
            await result


async def apply_or_revert(ctx: ActivityContext, entry: RevertEntry, fn: Callable[..., _T], *args: Any) -> _T:
    """Apply a fault's change, `fn(*args)` in a worker thread, once its revert is leased. A change that fails in
    any way (an error, a cancellation) may have done part of its work, so the revert runs before the error
    goes on."""
    import anyio

    try:
        return await anyio.to_thread.run_sync(fn, *args)
    except BaseException:
        await revert_now(ctx, entry)
        raise


async def hold_then_revert(ctx: ActivityContext, entry: RevertEntry, duration_s: float | None) -> bool:
    """Keep a fault for `duration_s`, then undo it, also when the wait is cancelled. False (and nothing done)
    for a fault without a duration: it stays until the run's rollbacks."""
    if not duration_s:
        return False
    import anyio

    if ctx.on_hold is not None:
        with contextlib.suppress(Exception):  # a progress display must never break a fault
            ctx.on_hold(entry.label, float(duration_s))
    try:
        await anyio.sleep(duration_s)
    finally:
        await revert_now(ctx, entry)
    return True


@dataclass
class ReapResult:
    lease_id: str
    label: str
    reason: str
    ok: bool
    error: str | None = None


_OUTCOMES = "outcomes.jsonl"


def _record(directory: Path, lease: Lease, reason: str, ok: bool, error: str | None, *, parked: bool) -> None:
    """Append what a reaper did to ``outcomes.jsonl``: the record a crashed run's journal is completed from."""
    row = {
        "at": time.time(),
        "run_id": lease.run_id,
        "lease_id": lease.lease_id,
        "label": lease.label,
        "reason": reason,
        "ok": ok,
        "error": error,
        "parked": parked,
        "by_pid": os.getpid(),
    }
    fd = os.open(directory / _OUTCOMES, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a") as f:
        f.write(json.dumps(row) + "\n")


def outcomes(run_id: str | None = None, directory: Path | None = None) -> list[dict[str, Any]]:
    """What reapers (the watchdog, ``reap``, the kill switch) did, oldest first; only ``run_id``'s if given."""
    path = (directory or lease_dir()) / _OUTCOMES
    rows = []
    try:
        text = path.read_text()
    except OSError:
        return []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if run_id is None or row.get("run_id") == run_id:
            rows.append(row)
    return rows


def _held_keys(extra: dict[str, bytes] | None) -> dict[str, bytes]:
    keys = dict(extra or {})
    if sealing._key is not None:  # only a process that sealed something holds a key
        keys[sealing.key_id(sealing._key)] = sealing._key
    return keys


def _watchdog_lock(directory: Path, kid: str) -> Path:
    return directory / f"watchdog-{kid}.lock"


def _lock_held(path: Path) -> bool:
    """True when another process holds the flock on ``path`` (a watchdog is alive)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _park(directory: Path, claimed: Path, lease: Lease) -> None:
    # Keep the evidence (sealed arguments stay sealed, the label is masked) but stop retrying.
    failed = directory / "failed"
    _private_dir(failed)
    _write(lease, failed / f"{lease.lease_id}.json")
    claimed.unlink(missing_ok=True)


def reap(
    *, directory: Path | None = None, force: bool = False, keys: dict[str, bytes] | None = None
) -> list[ReapResult]:
    """Revert every lease whose controller is dead or whose expiry passed (all of them with ``force``).

    A lease sealed with a key this process does not hold is left to the watchdog that holds it (with
    ``force``, that watchdog is told to revert it now and this call waits for it); when no living process
    holds the key, the lease is parked for a person."""
    directory = directory or lease_dir()
    held = _held_keys(keys)
    results: list[ReapResult] = []
    handed: list[Lease] = []
    now = time.time()
    for path in sorted(directory.glob("*.json")):
        lease = _read(path)
        if lease is None:
            continue
        reason = "forced" if force else lease.stale_reason(now)
        if reason is None:
            continue
        kids = sealing.sealed_key_ids(lease.args)
        missing = kids - set(held)
        # a key holder is alive: its watchdog, or the controller itself (whose watchdog may be starting)
        if missing and (
            lease.controller_alive() or any(_lock_held(_watchdog_lock(directory, k)) for k in missing)
        ):
            if force and not lease.extra.get("forced"):
                claimed = _claim(lease.lease_id, directory)
                if claimed is not None:
                    lease.extra["forced"] = True
                    _unclaim(claimed, lease, directory)
                    handed.append(lease)
            continue  # its own watchdog reverts it
        claimed = _claim(lease.lease_id, directory)
        if claimed is None:
            continue
        try:
            args = sealing.unseal(lease.args, held)
        except sealing.SealedKeyMissing as exc:
            lease.last_error = str(exc)
            _park(directory, claimed, lease)
            _record(directory, lease, reason, False, str(exc), parked=True)
            results.append(ReapResult(lease.lease_id, lease.label, reason, False, str(exc)))
            continue
        try:
            run_recipe(lease.driver, lease.revert, args)
        except Exception as exc:
            lease.attempts += 1
            lease.last_error = sealing.mask_text(f"{type(exc).__name__}: {exc}")
            parked = lease.attempts >= _MAX_ATTEMPTS
            if parked:
                _park(directory, claimed, lease)
            else:
                _unclaim(claimed, lease, directory)
            _record(directory, lease, reason, False, lease.last_error, parked=parked)
            results.append(ReapResult(lease.lease_id, lease.label, reason, False, lease.last_error))
            continue
        claimed.unlink(missing_ok=True)
        _record(directory, lease, reason, True, None, parked=False)
        results.append(ReapResult(lease.lease_id, lease.label, reason, True))
    # Claims left by a reaper that died mid-revert go back into the pool.
    for stale in directory.glob("*.reaping-*"):
        owner = stale.name.split(".reaping-", 1)[1].split("-", 1)[0]
        if owner.isdigit() and not psutil.pid_exists(int(owner)):
            lease_id = stale.name.split(".reaping-", 1)[0]
            with contextlib.suppress(OSError):
                os.rename(stale, directory / f"{lease_id}.json")
    if handed:
        results += _await_handed(directory, handed)
    return results


def _await_handed(directory: Path, handed: list[Lease], timeout: float = 10.0) -> list[ReapResult]:
    """Wait (bounded) for the key-holding watchdogs to revert the leases a forced reap handed them."""
    deadline = time.monotonic() + timeout
    pending = {lease.lease_id: lease for lease in handed}
    out: list[ReapResult] = []
    while pending and time.monotonic() < deadline:
        for row in outcomes(directory=directory):
            lease = pending.get(row["lease_id"])
            if lease is not None and (row["ok"] or row["parked"]):
                out.append(ReapResult(lease.lease_id, lease.label, "forced", row["ok"], row["error"]))
                del pending[lease.lease_id]
        time.sleep(0.05)
    for lease in pending.values():
        out.append(
            ReapResult(lease.lease_id, lease.label, "forced", False, "its watchdog did not revert it in time")
        )
    return out


def ensure_watchdog(directory: Path | None = None) -> int | None:
    """Start this process's watchdog for ``directory`` unless it already runs; return its pid if started.

    One watchdog per controller process: it is the only other holder of the controller's sealing key,
    handed over a pipe, so it can unseal the controller's leases after the controller died."""
    directory = directory or lease_dir()
    key = sealing.own_key()
    kid = sealing.key_id(key)
    lock = _watchdog_lock(directory, kid)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    log_fd = os.open(directory / "watchdog.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    log = os.fdopen(log_fd, "ab")
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "faultplane.drivers.leases",
                "watch",
                "--dir",
                str(directory),
                "--key-stdin",
            ],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            start_new_session=True,  # survives the controller's process group being killed
            close_fds=True,
        )
    finally:
        log.close()
    assert proc.stdin is not None
    try:
        proc.stdin.write(base64.b64encode(key) + b"\n")
        proc.stdin.close()
    except BrokenPipeError:
        return None
    # Wait (bounded; once per watchdog start) until it holds its lock: from then on a reaper without the key
    # (`reap`, the kill switch) sees a live key holder and hands it the lease instead of parking it.
    deadline = time.monotonic() + 5.0
    while not _lock_held(lock) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    return proc.pid


def watch(
    directory: Path,
    *,
    interval_s: float = _WATCH_INTERVAL_S,
    idle_exit_s: float = _WATCH_IDLE_EXIT_S,
    keys: dict[str, bytes] | None = None,
) -> int:
    """The watchdog loop: reap stale leases until none it can revert are left for ``idle_exit_s``."""
    _private_dir(directory)
    keys = dict(keys or {})
    name = f"watchdog-{next(iter(keys))}.lock" if keys else "watchdog.lock"
    fd = os.open(directory / name, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another watchdog already watches this directory
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    idle_since: float | None = None
    while True:
        for r in reap(directory=directory, keys=keys):
            status = "reverted" if r.ok else f"revert failed: {r.error}"
            print(
                f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {r.lease_id} ({r.label}): {r.reason}; {status}",
                flush=True,
            )
        pending = any(directory.glob("*.reaping-*")) or any(
            lease.key_id is None or lease.key_id in keys for lease in list_leases(directory)
        )
        if pending:
            idle_since = None
        else:
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since >= idle_exit_s:
                return 0
        time.sleep(interval_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faultplane.drivers.leases")
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("watch", help="reap stale leases until none are left")
    w.add_argument("--dir", type=Path, default=None)
    w.add_argument("--idle-exit", type=float, default=_WATCH_IDLE_EXIT_S)
    w.add_argument("--key-stdin", action="store_true", help="read the controller's sealing key from stdin")
    r = sub.add_parser("reap", help="reap stale leases once")
    r.add_argument("--dir", type=Path, default=None)
    r.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    directory = args.dir or lease_dir()
    if args.cmd == "watch":
        keys: dict[str, bytes] = {}
        if args.key_stdin:
            key = base64.b64decode(sys.stdin.buffer.readline().strip())
            keys[sealing.key_id(key)] = key
        return watch(directory, idle_exit_s=args.idle_exit, keys=keys)
    results = reap(directory=directory, force=args.force)
    for res in results:
        print(json.dumps(asdict(res)))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    # Run the imported module's main, not __main__'s: driver modules register their recipes in the
    # registry of `faultplane.drivers.leases`, which is a different module object from `__main__`.
    from faultplane.drivers.leases import main as _main

    sys.exit(_main())
