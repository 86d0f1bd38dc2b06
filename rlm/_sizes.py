"""Memory sizes as people write them: ``2GiB``, ``1.5G``, ``512MiB``, ``512M``, bytes.

K, M, G and T are powers of 1024, with or without the ``iB``; a plain number is
bytes.  :func:`format_size` writes a size back the way ``--help`` shows it, and
:func:`format_count` a count (of tokens) the way progress lines show it.
"""

from __future__ import annotations

import re

__all__ = ["format_count", "format_size", "parse_size"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_SHIFTS = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}


def parse_size(text: str) -> int:
    """Bytes in ``text``; ValueError saying how to write one otherwise."""
    found = _SIZE.match(text)
    if found is None:
        raise ValueError(f"{text!r} is not a size; write e.g. 2GiB, 1536MiB or 512M")
    return int(float(found.group(1)) * (1 << _SHIFTS[found.group(2).lower()]))


def format_size(size: int) -> str:
    """``2GiB``, ``1.5GiB``, ``512MiB``: a size as flags take it."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.3g}{unit}"
    return f"{size}B"


def format_count(n: int) -> str:
    """``950``, ``3.9k``, ``412k``, ``1.85M``: three figures at most."""
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size:
            value = float(f"{n / size:.3g}")  # rounded first: 999,999 is 1M, not 1e+03k
            if value >= 1000 and unit == "k":
                return format_count(int(value * size))
            return f"{value:,.3g}{unit}" if value < 1000 else f"{value:,.0f}{unit}"
    return str(n)
