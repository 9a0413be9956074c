"""Standalone proxy: ``python -m faultplane.drivers.netproxy --upstream HOST:PORT [--listen ...] [--control ...]``.

Prints one JSON line once listening (``{"control": ..., "routes": [...]}``) so a parent can read the ports.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from faultplane.drivers.base import DriverError
from faultplane.drivers.netproxy.control import ProxyManager, serve
from faultplane.drivers.netproxy.registry import registry_available
from faultplane.drivers.netproxy.toxics import parse_toxic


async def run_standalone(
    *,
    name: str = "default",
    listen: str | None = None,
    upstream: str | None = None,
    control: str | None = "127.0.0.1:8474",
    toxics: list[dict[str, object]] | None = None,
    registry: bool = True,
    seed: int | None = None,
    verbose: bool = False,
) -> None:
    manager = ProxyManager(
        fault_source=True if registry and registry_available() else None, seed=seed, verbose=verbose
    )
    if upstream:
        route = await manager.create_route(name, listen or "127.0.0.1:0", upstream)
        for t in toxics or []:
            await route.add_toxic(parse_toxic(t))

    def ready(ctl: str | None) -> None:
        print(
            json.dumps(
                {
                    "control": f"http://{ctl}" if ctl else None,
                    "routes": [r.describe() for r in manager.routes.values()],
                }
            ),
            flush=True,
        )

    await serve(manager, control, ready=ready)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m faultplane.drivers.netproxy", description=__doc__)
    ap.add_argument("--name", default="default", help="route name (registry target netproxy:<name>)")
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--upstream", help="host:port; omit to start with no route (add them over the API)")
    ap.add_argument("--control", default="127.0.0.1:8474", help="control API address; 'none' to disable")
    ap.add_argument(
        "--toxic", action="append", default=[], help='JSON toxic, e.g. {"type":"latency","latency_ms":50}'
    )
    ap.add_argument("--no-registry", action="store_true", help="do not apply fault-registry faults")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    try:
        toxics = [json.loads(t) for t in a.toxic]
        asyncio.run(
            run_standalone(
                name=a.name,
                listen=a.listen,
                upstream=a.upstream,
                control=None if a.control == "none" else a.control,
                toxics=toxics,
                registry=not a.no_registry,
                seed=a.seed,
                verbose=a.verbose,
            )
        )
    except KeyboardInterrupt:
        return 0
    except (DriverError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
