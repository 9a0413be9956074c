"""The third-party `mcp-server-time` server (PyPI), served over streamable HTTP for the HTTP proxy tests.

Its own entry point speaks only stdio; `create_server` builds the same MCPServer it runs there.
Usage: python time_server_http.py PORT
"""

from __future__ import annotations

import sys

from mcp_server_time.server import create_server

if __name__ == "__main__":
    create_server("UTC").run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
