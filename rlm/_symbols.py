"""The few symbols rlm prints (✓ ✗ … · → × ⚠ ──), and their ASCII forms.

A terminal whose locale says it is not UTF-8 (``LANG=C``, ``LC_ALL=POSIX``, a Latin-1
locale) shows them as garbage or question marks: there each is printed as the ASCII
text beside it.  With no locale variable set at all, Python writes UTF-8 and so do we.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping

__all__ = ["symbol", "utf8_locale"]

_SYMBOLS = {
    "ok": ("✓", "ok"),
    "failed": ("✗", "x"),
    "more": ("…", "..."),
    "sep": ("·", "-"),
    "to": ("→", "->"),
    "times": ("×", "x"),
    "warn": ("⚠", "!"),
    "rule": ("──", "--"),
    "busy": ("⋯", "..."),
    "none": ("—", "-"),
}


def utf8_locale(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the locale in effect (``LC_ALL``, else ``LC_CTYPE``, else ``LANG``) is UTF-8;
    true when none of them is set."""
    environ = os.environ if environ is None else environ
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = environ.get(name)
        if value:
            return "UTF-8" in value.upper() or "UTF8" in value.upper()
    return True


@functools.cache
def _ascii() -> bool:
    return not utf8_locale()


def symbol(name: str) -> str:
    """The symbol ``name`` (``ok``, ``failed``, ``more``, ``sep``, ``to``, ``times``,
    ``warn``, ``rule``, ``busy``, ``none``) as this terminal can show it."""
    unicode, plain = _SYMBOLS[name]
    return plain if _ascii() else unicode
