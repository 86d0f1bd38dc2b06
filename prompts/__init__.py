"""Prompt texts shipped with rlm.  ``load("system")`` reads ``system.md`` beside this file."""

from __future__ import annotations

from pathlib import Path

__all__ = ["load"]

_HERE = Path(__file__).resolve().parent


def load(name: str) -> str:
    """The text of ``prompts/<name>.md``."""
    return (_HERE / f"{name}.md").read_text(encoding="utf-8")
