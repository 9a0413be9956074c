"""The error every input check raises. Kept apart from `formats` (pydantic, YAML, TOON) so that a command
can name it in an `except` clause without paying for those imports at start-up."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from faultplane.core.formats import ValidationIssue

__all__ = ["ExperimentError"]


class ExperimentError(ValueError):
    """Invalid input, with every problem found (not just the first)."""

    def __init__(self, issues: list[ValidationIssue]) -> None:
        self.issues = issues
        super().__init__("; ".join(str(i) for i in issues))
