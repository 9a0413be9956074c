"""How the bundled example HTTP services run: announce the port they listen on (the line their launchers wait
for), serve until interrupted, and close without a traceback."""

from __future__ import annotations

import sys
from http.server import HTTPServer

__all__ = ["run_server"]


def run_server(server: HTTPServer, announce: str) -> None:
    """Print `<announce> PORT`, serve until KeyboardInterrupt, then close the listening socket."""
    print(f"{announce} {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        sys.stdout.flush()
