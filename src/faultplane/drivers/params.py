"""Parameter types the drivers share: each limit that many faults' arguments obey is stated here once.

A field takes one as its type, alone (``duration_seconds: HoldSeconds = None``) or with a ``Field`` of its own
for the default and description (pydantic merges both), so the published JSON schemas stay what they were.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

__all__ = ["HoldSeconds", "WaitSeconds"]

# How long a fault holds before it reverts itself (an hour at most); None keeps it until the run's rollbacks.
HoldSeconds = Annotated[float | None, Field(gt=0, le=3600)]

# How long an action waits for a server to come back or change role (restart, failover) before it gives up.
WaitSeconds = Annotated[float, Field(gt=0, le=600)]
