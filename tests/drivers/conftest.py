"""Fixtures for the driver tests: the real servers of tests/servers.py, plus small loopback TCP servers."""

from __future__ import annotations

import os

import pytest

from servers import postgres_server, redis_server, sshd_server  # noqa: F401  (fixtures)


@pytest.fixture(autouse=True)
def _fast_leases(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each test has its own lease dir (XDG_STATE_HOME is per test); a watchdog per test would outlive it.
    # Tests that exercise the watchdog unset this.
    monkeypatch.setenv("FAULTPLANE_NO_WATCHDOG", "1")


@pytest.fixture
def lease_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("FAULTPLANE_NO_WATCHDOG", None)
    return env


# --- servers for the failure variants (shared per session) ------------------------------------------------------

REDIS_PASSWORD = "Zq9s3cr3tPW77x"


@pytest.fixture(scope="session")
def redis_auth_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A second Redis that requires a password (``REDIS_PASSWORD``): wrong and missing passwords are refused."""
    import shutil
    import subprocess

    from servers import RedisServer, _free_port, _stop, _wait_port

    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (run `make services`)")
    base = tmp_path_factory.mktemp("redis-auth")
    port = _free_port()
    proc = subprocess.Popen(
        [
            *(exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
            *("--dir", str(base), "--requirepass", REDIS_PASSWORD, "--logfile", str(base / "redis.log")),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port, proc, "redis-server", base / "redis.log")
        yield RedisServer("127.0.0.1", port)
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def silent_port():  # type: ignore[no-untyped-def]
    """A loopback port that accepts connections and never sends a byte (a hung server)."""
    import socket
    import threading

    srv = socket.create_server(("127.0.0.1", 0), backlog=64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            held.append(conn)  # keep it open, say nothing

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(2)
    for c in held:
        c.close()
    srv.close()


@pytest.fixture(scope="session")
def netproxy_control():  # type: ignore[no-untyped-def]
    """A standalone netproxy process (route ``default`` to a closed port) and its control URL."""
    import json
    import subprocess
    import sys

    env = dict(os.environ)
    env["FAULTPLANE_NO_WATCHDOG"] = "1"
    proxy = subprocess.Popen(
        [
            *(sys.executable, "-m", "faultplane.drivers.netproxy", "--upstream", "127.0.0.1:9"),
            *("--control", "127.0.0.1:0", "--no-registry"),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        info = json.loads(proxy.stdout.readline())  # type: ignore[union-attr]
        yield info["control"]
    finally:
        proxy.terminate()
        proxy.wait(10)
