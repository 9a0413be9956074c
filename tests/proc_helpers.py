"""Processes that tests act on and watch: `sleepers` whose command line carries a marker (for faults that select
processes by pattern), `eventually`, which polls for a state a fault or its revert reaches asynchronously, and the
servers tests and benchmarks start: a free port, the wait until one listens, and a stop that never hangs."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil


def eventually(pred: Callable[[], object], timeout: float = 5.0, step: float = 0.02) -> bool:
    """Whether `pred()` holds within `timeout` seconds, asked every `step`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return False


@contextmanager
def sleepers(
    prefix: str, count: int, seconds: int = 60
) -> Iterator[tuple[str, list[subprocess.Popen[bytes]]]]:
    """`count` Python processes sleeping `seconds`, a marker unique to them (`prefix` and random hex) last on
    their command line; the marker and the processes, killed on exit."""
    marker = f"{prefix}{uuid.uuid4().hex[:10]}"
    procs = [
        subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})", marker])
        for _ in range(count)
    ]
    try:
        yield marker, procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(5)


def process_status(pid: int) -> str:
    """psutil's status of `pid` (running, sleeping, stopped, zombie...), "gone" once it no longer exists."""
    try:
        return str(psutil.Process(pid).status())
    except psutil.NoSuchProcess:
        return "gone"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(
    port: int,
    proc: subprocess.Popen[bytes] | None = None,
    timeout: float = 20.0,
    what: str = "process",
    log: Path | None = None,
) -> None:
    """Return once something listens on 127.0.0.1:`port`; fail when `proc` (the server `what`) exits first, with
    the end of its `log`, or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-4000:] if log and log.exists() else ""
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening on {port}:\n{tail}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{what}: nothing listening on 127.0.0.1:{port} after {timeout}s")


def wait_or_kill(proc: subprocess.Popen, timeout: float) -> None:
    """Give `proc` `timeout` seconds to exit on its own (asked to by a signal or a closed stdin), then kill it."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def stop(proc: subprocess.Popen, timeout: float = 5.0, sig: int = signal.SIGTERM) -> None:
    """Send `sig` (SIGTERM) to `proc` if it still runs, and kill it when it has not exited `timeout` seconds
    later."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):  # it exited between the poll and the signal
            proc.send_signal(sig)
        wait_or_kill(proc, timeout)


_FORKER = textwrap.dedent(
    """
    import errno, os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # an existing descendant
    print(child.pid, flush=True)
    for line in sys.stdin:
        try:
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            print("ok", flush=True)
        except OSError as e:
            print(errno.errorcode[e.errno], flush=True)
    child.kill()
    """
)


def start_forker() -> tuple[subprocess.Popen[str], int]:
    """A process that forks once for each `fork` call (for PID exhaustion faults), and the pid of the child it
    keeps alive throughout; the caller kills it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _FORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def fork(forker: subprocess.Popen[str]) -> str:
    """Have `forker` fork once: "ok", or the errno's name when it could not (EAGAIN when out of PIDs)."""
    assert forker.stdin is not None and forker.stdout is not None
    forker.stdin.write("fork\n")
    forker.stdin.flush()
    return forker.stdout.readline().strip()
