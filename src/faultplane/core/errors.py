"""The error every input check raises. Kept apart from `formats` (pydantic, YAML, TOON) so that a command
can name it in an `except` clause without paying for those imports at start-up."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from faultplane.core.issues import ValidationIssue

__all__ = ["ExperimentError"]


class ExperimentError(ValueError):
    """Invalid input, with every problem found (not just the first)."""

    def __init__(self, issues: list[ValidationIssue]) -> None:
        self.issues = issues
        super().__init__("; ".join(str(i) for i in issues))

    @classmethod
    def one(cls, field: str, message: str, fix: str) -> ExperimentError:
        """The error of a single problem at `field`: what most checks raise, stopping at the first they find."""
        from faultplane.core.issues import ValidationIssue

        return cls([ValidationIssue(field=field, message=message, fix=fix)])

    def one_line(self, what: str) -> str | None:
        """`what: field: problem; fix: ...` when there is a single problem (a hostile file, a bad value), else
        None: one problem is one line, for a reader, a log and an agent alike."""
        if len(self.issues) != 1:
            return None
        i = self.issues[0]
        # a file's own errors often start with its path already: say it once
        message = i.message if i.message.startswith(i.field) else f"{i.field}: {i.message}"
        return f"{what}: {' '.join(message.split())}; fix: {' '.join(i.fix.split())}"
