"""One problem found in an input: the field it is at, what is wrong, and how to fix it.

The unit every check reports in (`ExperimentError.issues`, `Plan.warnings`, `validate`'s output). It sits below
both `errors` (which carries a list of them) and `formats` (which makes them from YAML and pydantic failures),
so neither has to import the other for it."""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["ValidationIssue", "dotted_path"]


def dotted_path(path: tuple[object, ...], top: str) -> str:
    """Where a value sits in a document, as a reader writes it (`method[2].provider.url`); `top` names the
    document itself (an empty path)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or top


class ValidationIssue(BaseModel):
    field: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message} (fix: {self.fix})"
