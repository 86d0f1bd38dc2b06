"""Prompt texts shipped with rlm.  ``load("system")`` reads ``system.md`` beside this file."""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["load"]

_HERE = Path(__file__).resolve().parent


@functools.cache
def load(name: str) -> str:
    """The text of ``prompts/rlm/prompts/<name>.md`` (read once per process: every call uses it)."""
    return (_HERE / f"{name}.md").read_text(encoding="utf-8")
