"""Fixtures for the driver tests: the real servers of tests/servers.py, plus small loopback TCP servers."""

from __future__ import annotations

import os

import pytest
from redis_secret import REDIS_PASSWORD
from tcp import standalone_netproxy

from netns_helpers import veth_pair
from servers import SshdServer, postgres_server, redis_server, sshd_server  # noqa: F401  (fixtures)


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


@pytest.fixture
def ssh_target(sshd_server: SshdServer) -> dict[str, object]:  # noqa: F811  (the fixture imported above)
    """The test sshd as the ssh driver's host arguments."""
    return {
        "host": sshd_server.host,
        "port": sshd_server.port,
        "username": sshd_server.username,
        "client_keys": [str(sshd_server.client_key)],
        "known_hosts": str(sshd_server.known_hosts),
    }


# --- servers for the failure variants (shared per session) ------------------------------------------------------


@pytest.fixture(scope="session")
def redis_auth_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A second Redis that requires a password (``REDIS_PASSWORD``): wrong and missing passwords are refused."""
    from servers import running_redis

    with running_redis(tmp_path_factory.mktemp("redis-auth"), "--requirepass", REDIS_PASSWORD) as server:
        yield server


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
    env = dict(os.environ)
    env["FAULTPLANE_NO_WATCHDOG"] = "1"
    with standalone_netproxy("--upstream", "127.0.0.1:9", env=env) as info:
        yield info["control"]


# --- a pair of network namespaces joined by a veth pair, for host network faults --------------------------------

NETNS_SERVER = r"""
import socket, sys, threading
host = sys.argv[1]

def echo(port):
    srv = socket.create_server((host, port), backlog=128)
    while True:
        c, _ = srv.accept()
        def serve(c=c):
            with c:
                while data := c.recv(65536):
                    c.sendall(data)
        threading.Thread(target=serve, daemon=True).start()

def source(port):
    srv = socket.create_server((host, port), backlog=128)
    while True:
        c, _ = srv.accept()
        with c:
            c.sendall(b"x" * 262144)

def udp(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host, port))
    while True:
        data, addr = s.recvfrom(2048)
        s.sendto(data, addr)

for f, p in ((echo, 7000), (source, 7001), (echo, 7002), (udp, 7003)):
    threading.Thread(target=f, args=(p,), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""


@pytest.fixture(scope="session")
def netns_pair():  # type: ignore[no-untyped-def]
    """Namespaces A and B joined by veth (10.213.N.1 <-> 10.213.N.2), servers in B: TCP echo on 7000 and 7002,
    a 256 KiB source on 7001, UDP echo on 7003. Needs root."""
    import random
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nft") is None:
        pytest.skip("host network faults need root, iproute2 and nftables")
    with veth_pair("fp", "fp", f"10.213.{random.randrange(1, 250)}") as pair:
        server = subprocess.Popen(
            ["ip", "netns", "exec", pair.b, sys.executable, "-c", NETNS_SERVER, pair.ip_b],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"
            yield pair
        finally:
            server.kill()
            server.wait(5)
