"""Flag conversions for limits: a number or ``none`` (no limit), and memory sizes like ``2GiB``.

Callbacks rather than ``click.ParamType`` subclasses: the latter became generic in
click 8.4, and these must type-check with every click the project accepts.
"""

from __future__ import annotations

from typing import Any

import click

from rlm._durations import parse_duration
from rlm._sizes import parse_size
from rlm.errors import UsageError

__all__ = ["memory_size", "optional_count", "optional_duration", "optional_number"]


def _lifted(value: Any) -> bool:
    return value is None or str(value).strip().lower() == "none"


def optional_count(ctx: click.Context, param: click.Parameter, value: Any) -> int | None:
    """A whole number, or None for ``none``."""
    if _lifted(value):
        return None
    try:
        return int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a whole number or 'none'") from None


def optional_number(ctx: click.Context, param: click.Parameter, value: Any) -> float | None:
    """A number (``2``, ``0.5``), or None for ``none``."""
    if _lifted(value):
        return None
    try:
        return float(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number or 'none'") from None


def optional_duration(ctx: click.Context, param: click.Parameter, value: Any) -> float | None:
    """Seconds (``90``, ``30s``, ``5m``, ``2h``), or None for ``none``."""
    if _lifted(value):
        return None
    try:
        return parse_duration(str(value))
    except UsageError:
        raise click.BadParameter(
            f"{value!r} is not a duration (90, 30s, 5m, 2h) or 'none'"
        ) from None


def memory_size(ctx: click.Context, param: click.Parameter, value: Any) -> int:
    """Bytes from ``2GiB``, ``512M`` or a number of bytes."""
    try:
        return parse_size(str(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
