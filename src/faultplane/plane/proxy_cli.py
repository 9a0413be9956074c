"""What the two MCP proxies' own command lines share: the session options, and how a proxy starts.

`python -m faultplane.plane.proxy_stdio` and `python -m faultplane.plane.proxy_http` take the same five options
(the fault plan, strictness, the session id, the store, whether to record) and start the same way: warnings go
to stderr in the plane's format, and a plan that cannot be read stops the proxy with one line and exit code 2,
before a server is spawned or a port bound. Kept apart from both proxies so neither imports the other.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from faultplane.plane.plan import FaultPlan, PlanError, load_plan


def add_session_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plan", type=Path, default=None)
    parser.add_argument("--strict", action="store_true")
    parser.add_argument("--session", default=None)
    parser.add_argument("--store", default=None)
    parser.add_argument("--no-record", action="store_true")


def session_keywords(
    plan: Path | None, strict: bool, session: str | None, store: str | None, no_record: bool
) -> dict[str, Any]:
    """The session options (these, or `faultplane plane proxy`'s same-named ones) as the keywords both
    proxies' `serve` take."""
    return {
        "plan_path": plan,
        "strict": strict,
        "session_id": session,
        "store": str(store) if store else None,
        "record": not no_record,
    }


def session_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options `add_session_options` read, as `session_keywords`."""
    return session_keywords(args.plan, args.strict, args.session, args.store, args.no_record)


def start(plan_path: str | Path | None) -> FaultPlan | None:
    """Set up the proxy's logging and read its plan; None (the reason printed) when the plan is unusable."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="faultplane-plane: %(message)s")
    try:
        return load_plan(plan_path)
    except PlanError as exc:
        print(f"faultplane plane proxy: {exc}", file=sys.stderr)
        return None
