"""Durations as people write them: ``0.5``, ``2s``, ``500ms``, ``5m``, ``2h``.

Every flag and file field that takes a duration goes through
:func:`parse_duration`, so they all accept the same forms.
"""

from __future__ import annotations

import math
import re

from rlm.errors import UsageError

__all__ = ["format_duration", "format_wait", "parse_duration"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$", re.IGNORECASE)


def parse_duration(value: str | float | int, what: str = "duration") -> float:
    """Seconds from a number or a string like ``2s``; raises UsageError naming ``what``.

    A plain number means seconds.  The result is positive and finite.
    """
    if isinstance(value, bool):
        raise UsageError(f"{what} must be a duration like 30, 2s, 500ms, 5m or 2h")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION_RE.match(str(value))
        if match is None:
            raise UsageError(
                f"{what} must be a duration like 30, 2s, 500ms, 5m or 2h, got {value!r}"
            )
        seconds = float(match.group(1)) * _UNITS[(match.group(2) or "s").lower()]
    if not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"{what} must be a positive duration, got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """``90`` → ``1m30s``, ``2.5`` → ``2.5s``, ``0.25`` → ``250ms``: short and exact enough."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s" if rest else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"


def format_wait(seconds: float) -> str:
    """A back-off as a progress line says it: ``0.92s``, ``2.5s``, ``1m30s``."""
    return f"{seconds:.2g}s" if seconds < 10 else format_duration(seconds)
