"""Start the payment system on loopback: payment-service instances and the caller, as real subprocesses."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PaymentSystem", "payment_system"]

_START_TIMEOUT_S = 20.0


@dataclass
class PaymentSystem:
    caller_url: str
    payment_urls: list[str]
    pool_kind: str
    pool_size: int
    pids: list[int] = field(default_factory=list)

    def variables(self) -> dict[str, Any]:
        """The `--var`s the bundled payment experiments need."""
        out: dict[str, Any] = {"caller_url": self.caller_url}
        for i, url in enumerate(self.payment_urls):
            out[f"payment_{i}_url"] = url
        return out


def _start(args: list[str], name: str, logs: Path) -> tuple[subprocess.Popen[str], int]:
    err = open(logs / f"{name}.stderr", "w+")  # noqa: SIM115 - the child writes it; closed on stop
    proc = subprocess.Popen(
        [sys.executable, "-m", *args],
        stdout=subprocess.PIPE,
        stderr=err,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + _START_TIMEOUT_S
    line = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "listening on" in line or proc.poll() is not None:
            break
    if "listening on" not in line:
        _stop(proc)
        err.seek(0)
        raise RuntimeError(f"{name} did not start: {line!r}\n{err.read()[-2000:]}")
    return proc, int(line.split()[-1])


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    if proc.stdout is not None:
        proc.stdout.close()


@contextlib.contextmanager
def payment_system(
    *,
    instances: int = 2,
    pool_size: int = 10,
    dsn: str | None = None,
    acquire_timeout_ms: float = 1000.0,
    work_ms: float = 20.0,
    slow_fraction: float = 0.02,
    slow_ms: float = 200.0,
    seed: int = 1,
    caller_policy: str | None = None,
    abandoned_work: bool = False,
    pause_every_s: float = 0.0,
    pause_ms: float = 0.0,
    pause_together: bool = False,
) -> Iterator[PaymentSystem]:
    """Start `instances` payment-services (PostgreSQL pools when `dsn` is given, else embedded) and the caller;
    yield their URLs; stop them all on exit, whatever happened. See payment_service for the parameters."""
    if instances < 1:
        raise ValueError("instances must be at least 1")
    procs: list[subprocess.Popen[str]] = []
    # one clock for every instance's pause schedule (CLOCK_MONOTONIC is system-wide), whenever each one started
    epoch = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="faultplane-payment-") as tmp:
        logs = Path(tmp)
        try:
            urls = []
            for i in range(instances):
                args = [
                    "faultplane.examples.payment.payment_service",
                    "--port",
                    "0",
                    "--pool-size",
                    str(pool_size),
                    "--acquire-timeout-ms",
                    str(acquire_timeout_ms),
                    "--work-ms",
                    str(work_ms),
                    "--slow-fraction",
                    str(slow_fraction),
                    "--slow-ms",
                    str(slow_ms),
                    "--seed",
                    str(seed + i),
                ]
                if dsn:
                    args += ["--dsn", dsn]
                if abandoned_work:
                    args.append("--abandoned-work")
                if pause_every_s > 0 and pause_ms > 0:
                    # in turn, one instance's pause is the other's surge; together (a pause of what they share,
                    # e.g. the database host), no instance is left to absorb the retries
                    offset = pause_every_s * (0.5 if pause_together else (i + 0.5) / instances)
                    args += ["--pause-every-s", str(pause_every_s), "--pause-ms", str(pause_ms)]
                    args += ["--pause-offset-s", str(offset), "--pause-epoch", repr(epoch)]
                proc, port = _start(args, f"payment-{i}", logs)
                procs.append(proc)
                urls.append(f"http://127.0.0.1:{port}")
            caller_args = ["faultplane.examples.payment.caller", "--port", "0", "--seed", str(seed)]
            for url in urls:
                caller_args += ["--payment", url]
            if caller_policy:
                caller_args += ["--policy", caller_policy]
            proc, port = _start(caller_args, "caller", logs)
            procs.append(proc)
            yield PaymentSystem(
                caller_url=f"http://127.0.0.1:{port}",
                payment_urls=urls,
                pool_kind="postgres" if dsn else "embedded",
                pool_size=pool_size,
                pids=[p.pid for p in procs],
            )
        finally:
            for proc in reversed(procs):
                _stop(proc)
