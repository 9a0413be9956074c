"""A loopback HTTP/1.1 server with one known stall: the reference for coordinated-omission checks.

It answers every request at once (`200`, a two-byte body, keep-alive), except that for `stall_s` seconds,
starting `stall_after_s` after the first request it sees, nothing is answered: a request read during the stall
is answered when the stall ends (`--mode hold`), or its connection is reset then (`--mode reset`).

With an open-model client at rate R for D seconds and one stall of S seconds, the requests scheduled during
the stall wait until it ends, so their latencies from the schedule spread evenly from S down to 0: the
corrected p99 is S - (D * 0.01) seconds when that is positive (1 s stall, 10 s run: 900 ms), whereas a
client that waits for each answer before sending the next sees a single slow request.

Run: `python -m faultplane.examples.stall_server [--port 0] [--stall-after 4] [--stall 1] [--mode hold]`;
it prints `listening on http://127.0.0.1:PORT/` once ready, and `stall from T0 to T1` (monotonic seconds)
when the stall begins.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time

_RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


class _State:
    def __init__(self, stall_after_s: float, stall_s: float, mode: str) -> None:
        self.stall_after_s = stall_after_s
        self.stall_s = stall_s
        self.mode = mode
        self.first: float | None = None
        self.announced = False

    def stall_end(self, now: float) -> float | None:
        """When the stall in force at `now` ends, or None when there is none."""
        if self.first is None:
            self.first = now
        start = self.first + self.stall_after_s
        end = start + self.stall_s
        if start <= now < end:
            if not self.announced:
                self.announced = True
                print(f"stall from {start:.6f} to {end:.6f}", flush=True)
            return end
        return None


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, state: _State) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:].strip() or 0)
            if length:
                await reader.readexactly(length)
            end = state.stall_end(time.monotonic())
            if end is not None:
                await asyncio.sleep(max(0.0, end - time.monotonic()))
                if state.mode == "reset":
                    writer.transport.abort()
                    return
            writer.write(_RESPONSE)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--stall-after", type=float, default=4.0, help="seconds after the first request")
    ap.add_argument("--stall", type=float, default=1.0, help="stall length in seconds")
    ap.add_argument("--mode", choices=("hold", "reset"), default="hold")
    args = ap.parse_args(argv)
    state = _State(args.stall_after, args.stall, args.mode)
    server = await asyncio.start_server(
        lambda r, w: _serve(r, w, state), "127.0.0.1", args.port, backlog=4096
    )
    port = server.sockets[0].getsockname()[1]
    print(f"listening on http://127.0.0.1:{port}/", flush=True)
    async with server:
        await server.serve_forever()


def run(argv: list[str] | None = None) -> None:
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(main(argv))


if __name__ == "__main__":
    run(sys.argv[1:])
