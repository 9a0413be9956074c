"""Real servers for tests: PostgreSQL, Redis and sshd on free loopback ports, in temporary directories, and
`http_server` for a test's own request handler.

A pytest plugin module: load it with ``pytest_plugins = ["servers"]`` in ``tests/conftest.py`` (``tests/`` is on
``sys.path``), or import the fixtures into an area's conftest. Servers are session-scoped (one start per test
session) and stopped at the end. A missing binary skips the tests that need it with the command that installs
it (``make services``).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from proc_helpers import free_port, stop, wait_port

__all__ = [
    "PostgresServer",
    "RedisServer",
    "SshdServer",
    "http_server",
    "postgres_server",
    "redis_server",
    "sshd_server",
]

_START_TIMEOUT_S = 30.0
_SSHD = Path("/usr/sbin/sshd")


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, log: Path | None = None) -> None:
    wait_port(port, proc, _START_TIMEOUT_S, what, log)


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """Stop a server: `sig`, then a kill if it has not exited 15 s later (a database may checkpoint first)."""
    stop(proc, 15.0, sig)


def send_json(handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
    """Answer the request `handler` serves: `status` and `body` as JSON (bytes are sent as they are), its length
    declared so that keep-alive clients know where it ends."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class StatusPages(BaseHTTPRequestHandler):
    """A service's status pages, for HTTP probes: GET /health (JSON, healthy), /broken (500), /text (plain text);
    anything else 404."""

    protocol_version = "HTTP/1.1"
    ROUTES = {
        "/health": (200, b'{"status": "ok", "services": [{"name": "db", "up": true}]}'),
        "/broken": (500, b'{"status": "down"}'),
        "/text": (200, b"all systems nominal"),
    }

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        status, body = self.ROUTES.get(self.path, (404, b'{"error": "not found"}'))
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if body.startswith(b"{") else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextlib.contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded HTTP server answering with `handler` on a free loopback port, yielding its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# --- PostgreSQL -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str
    dbname: str
    data_dir: Path

    @property
    def dsn(self) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.dbname}"

    def conninfo(self, **extra: str) -> str:
        parts = [f"host={self.host}", f"port={self.port}", f"user={self.user}", f"dbname={self.dbname}"]
        parts += [f"{k}={v}" for k, v in extra.items()]
        return " ".join(parts)


def _pg_bindir() -> Path | None:
    for cand in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (cand / "initdb").exists():
            return cand
    found = shutil.which("initdb")
    return Path(found).parent if found else None


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A PostgreSQL server (trust auth, user ``postgres``, db ``postgres``, max_connections=60)."""
    bindir = _pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (run `make services`)")
    # Not under pytest's tmp dir: that is private to root, and the server runs as `postgres` when we are root.
    base = Path(tempfile.mkdtemp(prefix="faultplane-pg-"))
    data, sock = base / "data", base / "sock"
    data.mkdir()
    sock.mkdir()
    log = base / "postgres.log"
    prefix: list[str] = []
    if os.geteuid() == 0:
        # initdb and postgres refuse to run as root: run them as the postgres system user.
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no `postgres` user to run PostgreSQL as")
        for p in (base, data, sock):
            os.chown(p, pw.pw_uid, pw.pw_gid)
        log.touch()
        os.chown(log, pw.pw_uid, pw.pw_gid)
        os.chmod(base, 0o755)
        prefix = ["runuser", "-u", "postgres", "--"]
    init = subprocess.run(
        [
            *prefix,
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        ],
        capture_output=True,
        text=True,
        cwd=base,
    )
    if init.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"initdb failed ({init.returncode}):\n{init.stdout}\n{init.stderr}")
    port = free_port()
    proc = subprocess.Popen(
        [
            *prefix,
            str(bindir / "postgres"),
            "-D",
            str(data),
            "-p",
            str(port),
            "-k",
            str(sock),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=60",
            "-c",
            "superuser_reserved_connections=3",
            "-c",
            "logging_collector=off",
        ],
        stdout=open(log, "ab"),  # noqa: SIM115 - the child owns it
        stderr=subprocess.STDOUT,
        cwd=base,
    )
    try:
        _wait_port(port, proc, "postgres", log)
        # Accepting TCP precedes accepting logins by a moment; wait for a real query.
        import psycopg

        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                with psycopg.connect(
                    host="127.0.0.1", port=port, user="postgres", dbname="postgres", connect_timeout=2
                ) as c:
                    c.execute("SELECT 1")
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield PostgresServer("127.0.0.1", port, "postgres", "postgres", data)
    finally:
        # Signal the postmaster itself (runuser does not pass SIGINT on): fast shutdown.
        pidfile = data / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text().split()[0]), signal.SIGINT)
        _stop(proc, signal.SIGINT)
        shutil.rmtree(base, ignore_errors=True)


# --- Redis ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RedisServer:
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"


@contextlib.contextmanager
def running_redis(base: Path, *options: str) -> Iterator[RedisServer]:
    """A redis-server on a free loopback port, without persistence, its files in `base`, with the extra `options`
    (`--requirepass PW`...); the test is skipped where redis-server is not installed."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (run `make services`)")
    port = free_port()
    log = base / "redis.log"
    proc = subprocess.Popen(
        [
            *(exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
            *("--dir", str(base), "--daemonize", "no", "--logfile", str(log), *options),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port, proc, "redis-server", log)
        yield RedisServer("127.0.0.1", port)
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis server with DEBUG enabled, no persistence, maxclients 200."""
    debug = ("--maxclients", "200", "--enable-debug-command", "yes")
    with running_redis(tmp_path_factory.mktemp("redis"), *debug) as server:
        yield server


# --- sshd -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SshdServer:
    host: str
    port: int
    username: str
    client_key: Path
    known_hosts: Path


def sshd_keys(base: Path) -> tuple[Path, Path, Path]:
    """Skip the test unless sshd can run here (installed, as root); else make `base` private and generate in it
    a host key, a client key and the authorized_keys file that accepts the client key."""
    keygen = shutil.which("ssh-keygen")
    if not _SSHD.exists() or keygen is None:
        pytest.skip("openssh-server is not installed (run `make services`)")
    if os.geteuid() != 0:
        pytest.skip("sshd needs root to run on a test port here")
    os.chmod(base, 0o700)
    host_key, user_key = base / "host_ed25519", base / "user_ed25519"
    for key in (host_key, user_key):
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    auth = base / "authorized_keys"
    shutil.copy(user_key.with_suffix(".pub"), auth)
    os.chmod(auth, 0o600)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege-separation dir sshd insists on
    return host_key, user_key, auth


def start_sshd(
    base: Path, host_key: Path, auth: Path, name: str = "sshd"
) -> tuple[subprocess.Popen[bytes], int, Path]:
    """An sshd on a free loopback port with `host_key`, accepting the keys in `auth`, its files under `base`
    named after `name`: its process (stop it with _stop), its port and a known_hosts file that trusts it."""
    port = free_port()
    cfg = base / f"{name}_config"
    cfg.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"PidFile {base / f'{name}.pid'}",
                f"AuthorizedKeysFile {auth}",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                "PermitRootLogin prohibit-password",
                "UsePAM no",
                "StrictModes no",
                "LogLevel ERROR",
                "",
            ]
        )
    )
    log = base / f"{name}.log"
    with open(log, "ab") as logf:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [str(_SSHD), "-D", "-e", "-f", str(cfg)], stdout=logf, stderr=subprocess.STDOUT
        )
    try:
        _wait_port(port, proc, "sshd", log)
    except BaseException:
        _stop(proc)
        raise
    known = base / f"{name}_known_hosts"
    pub = host_key.with_suffix(".pub").read_text().split()
    known.write_text(f"[127.0.0.1]:{port} {pub[0]} {pub[1]}\n")
    return proc, port, known


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdServer]:
    """OpenSSH's sshd on loopback accepting a generated key for the current user (needs root)."""
    base = tmp_path_factory.mktemp("sshd")
    host_key, user_key, auth = sshd_keys(base)
    proc, port, known = start_sshd(base, host_key, auth)
    try:
        yield SshdServer("127.0.0.1", port, pwd.getpwuid(os.geteuid()).pw_name, user_key, known)
    finally:
        _stop(proc)
