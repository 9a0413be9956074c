"""Splitting a comma-separated list whose items may hold commas inside parentheses, as SQL column definitions
(`DECIMAL(10, 2)`) and Kubernetes label selectors (`env in (a, b)`) do: only a comma at depth zero separates."""

from __future__ import annotations

__all__ = ["split_outside_parens"]


def split_outside_parens(text: str) -> list[str]:
    """The items of `text` between its top-level commas, unstripped; a blank last item is left out."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return parts
