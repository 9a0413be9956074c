"""Blast radius: how many of the matching targets an action touches, chosen with the run's seeded RNG.

The engine sets the experiment's declared blast radius as a cap for the whole run (`radius_cap`). Every
selection is held to it: an action that names no count or percentage gets the declared radius instead of every
match, and one that names more than the cap (in a unit the policy could not compare before the run, e.g. a count
under a percentage radius) is cut down to it.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Self, TypeVar

from pydantic import BaseModel, Field, model_validator

from faultplane.drivers.base import DriverError

__all__ = ["BlastRadius", "current_cap", "radius_cap", "select_targets"]

T = TypeVar("T")

_CAP: ContextVar[dict[str, float] | None] = ContextVar("faultplane_blast_radius_cap", default=None)


@contextlib.contextmanager
def radius_cap(radius: Mapping[str, float | int] | None) -> Iterator[None]:
    """Hold every `select_targets` in this context (and the tasks and threads it starts) to `radius`:
    `{percent: P}` and/or `{count: N}`; both given means the smaller of the two."""
    cap = {k: float(v) for k, v in (radius or {}).items() if k in ("percent", "count") and v}
    token = _CAP.set(cap or None)
    try:
        yield
    finally:
        _CAP.reset(token)


def current_cap() -> dict[str, float] | None:
    return _CAP.get()


class BlastRadius(BaseModel):
    """Either ``count`` targets or ``percentage`` of them (rounded up, at least one); default: the run's
    declared blast radius (see `radius_cap`), or every match outside a run."""

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
        k = n
    cap = _CAP.get()
    if cap:
        if "percent" in cap:
            k = min(k, max(1, math.ceil(n * cap["percent"] / 100.0)))
        if "count" in cap:
            k = min(k, max(1, int(cap["count"])))
    if count is None and percentage is None and k >= n:
        return list(items)  # no radius anywhere: every match, as before (and the RNG is left untouched)
    rng = rng or random.Random()
    picked = sorted(rng.sample(range(n), k))
    return [items[i] for i in picked]
