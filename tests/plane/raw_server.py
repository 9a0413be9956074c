"""A line-level stdio "MCP server" for wire-order tests: it writes exactly what a test needs, in order.

* tools/call `late`: no answer, until a notifications/cancelled names it; then it answers anyway, like a
  server that ignores cancellation.
* tools/call `chatty`: answers, then sends a notification and a server->client request.
* anything else with an id: answered at once with an empty result.
"""

from __future__ import annotations

import json
import sys


def send(msg: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def main() -> None:
    late: set[object] = set()
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        method, rid = msg.get("method"), msg.get("id")
        if method == "notifications/cancelled":
            cancelled = msg["params"]["requestId"]
            if cancelled in late:
                late.discard(cancelled)
                send({"jsonrpc": "2.0", "id": cancelled, "result": {"content": [], "isError": False}})
            continue
        if rid is None or method is None:
            continue
        name = (msg.get("params") or {}).get("name")
        if method == "tools/call" and name == "late":
            late.add(rid)
            continue
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [], "isError": False}})
        if method == "tools/call" and name == "chatty":
            send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/message",
                    "params": {"level": "info", "data": "x"},
                }
            )
            send({"jsonrpc": "2.0", "id": "srv-1", "method": "roots/list"})


if __name__ == "__main__":
    main()
