"""The numbers of a report: a mean with its 95 % bootstrap interval, and percentiles.

The bootstrap is seeded and draws only ``random.Random(seed).random()`` (whose
sequence Python keeps stable across versions), so the same scores give the same
interval on every machine and every run: a report read back equals the first.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["RESAMPLES", "Interval", "bootstrap_mean", "paired_difference", "percentile"]

#: Resamples per interval: enough for a stable 2.5 % and 97.5 % at a few hundred items.
RESAMPLES = 2_000


@dataclass(frozen=True)
class Interval:
    """A mean and its 95 % bootstrap interval (all None for no values)."""

    mean: float | None
    low: float | None
    high: float | None

    def to_list(self) -> list[float | None]:
        return [_rounded(self.low), _rounded(self.high)]


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def bootstrap_mean(values: Sequence[float], *, seed: int = 0,
                   resamples: int = RESAMPLES) -> Interval:
    """The mean of ``values`` and its 95 % percentile-bootstrap interval."""
    n = len(values)
    if n == 0:
        return Interval(None, None, None)
    mean = math.fsum(values) / n
    r = random.Random(seed)
    means = sorted(
        math.fsum(values[int(r.random() * n)] for _ in range(n)) / n for _ in range(resamples)
    )
    return Interval(mean, percentile(means, 2.5), percentile(means, 97.5))


def paired_difference(a: Sequence[float], b: Sequence[float], *, seed: int = 0,
                      resamples: int = RESAMPLES) -> Interval:
    """The mean of ``b - a`` over paired values and its 95 % bootstrap interval."""
    if len(a) != len(b):
        raise ValueError("paired values must be as many on each side")
    return bootstrap_mean([y - x for x, y in zip(a, b, strict=True)], seed=seed,
                          resamples=resamples)


def percentile(values: Sequence[float], p: float) -> float | None:
    """The ``p``-th percentile of sorted ``values``, interpolated between ranks."""
    if not values:
        return None
    position = (len(values) - 1) * p / 100
    low = math.floor(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)
