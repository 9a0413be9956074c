"""Cleaning up after lease tests: the watchdogs their controllers started outlive the test otherwise."""

from __future__ import annotations

import os
import signal

import psutil

from faultplane.drivers import leases


def stop_watchdogs() -> None:
    """SIGTERM every lease watchdog still running (one per controller process: each holds its controller's
    sealing key); a pid in a stale lock file that now belongs to another program is left alone."""
    for lock in leases.lease_dir().glob("watchdog*.lock"):
        text = lock.read_text().strip()
        alive = text.isdigit() and psutil.pid_exists(int(text))
        if alive and "faultplane.drivers.leases" in " ".join(psutil.Process(int(text)).cmdline()):
            os.kill(int(text), signal.SIGTERM)
