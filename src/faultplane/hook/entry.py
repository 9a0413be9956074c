"""The hook's process entry: stdin JSON in, exit code out. Imports nothing heavy until a command needs it.

Claude Code's PreToolUse contract: exit 0 lets the tool call run, exit 2 blocks it and shows stderr to the
agent. Any other exit code lets the call through, so every failure here exits 2.
"""

from __future__ import annotations

import json
import sys

_MAX_INPUT = 4_000_000  # a tool call is small; a hostile one is cut off, not parsed


def main() -> int:
    try:
        text = sys.stdin.read(_MAX_INPUT + 1)
        if len(text) > _MAX_INPUT:
            return _block(f"faultplane guard hook: input larger than {_MAX_INPUT} bytes; blocking to be safe")
        try:
            payload = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            return _block(f"faultplane guard hook: stdin is not the hook's JSON ({exc}); blocking to be safe")
        from faultplane.hook.judge import judge_tool_call

        verdict = judge_tool_call(payload)
    except Exception as exc:  # exit 1 would let the tool call through: any failure here must block
        return _block(f"faultplane guard hook failed ({exc.__class__.__name__}: {exc}); blocking to be safe")
    if not verdict.allow:
        return _block(verdict.reason)
    return 0


def _block(message: str) -> int:
    print(message, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
