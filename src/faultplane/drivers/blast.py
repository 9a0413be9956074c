"""Blast radius: how many of the matching targets an action touches, chosen with the run's seeded RNG."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Self, TypeVar

from pydantic import BaseModel, Field, model_validator

from faultplane.drivers.base import DriverError

__all__ = ["BlastRadius", "select_targets"]

T = TypeVar("T")


class BlastRadius(BaseModel):
    """Either ``count`` targets or ``percentage`` of them (rounded up, at least one); default all."""

    count: int | None = Field(default=None, ge=1, description="touch at most this many matching targets")
    percentage: float | None = Field(
        default=None, gt=0, le=100, description="touch this share of matching targets (rounded up)"
    )

    @model_validator(mode="after")
    def _one_of(self) -> Self:
        if self.count is not None and self.percentage is not None:
            raise ValueError("give either count or percentage, not both")
        return self


def select_targets(
    items: Sequence[T],
    *,
    count: int | None = None,
    percentage: float | None = None,
    rng: random.Random | None = None,
    what: str = "targets",
) -> list[T]:
    """Pick the blast radius out of ``items``, deterministically for a given RNG state."""
    if count is not None and percentage is not None:
        raise DriverError("give either count or percentage, not both")
    if not items:
        return []
    n = len(items)
    if count is not None:
        if count < 1:
            raise DriverError(f"count must be >= 1 (got {count})")
        k = min(count, n)
    elif percentage is not None:
        if not 0 < percentage <= 100:
            raise DriverError(f"percentage must be in (0, 100] (got {percentage})")
        k = max(1, math.ceil(n * percentage / 100.0))
    else:
        return list(items)
    rng = rng or random.Random()
    picked = sorted(rng.sample(range(n), k))
    return [items[i] for i in picked]
