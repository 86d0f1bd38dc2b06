"""Text that can travel: what arrives from outside (a provider's JSON) made encodable.

JSON may carry a lone surrogate as a valid escape (``"\\ud800"``); Python decodes it
into a ``str`` that no UTF-8 writer accepts (a trace, the journal, msgpack frames,
a terminal).  Such text is cleaned where it enters, so nothing downstream fails on it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["clean_text", "clean_value"]


def clean_text(text: str) -> str:
    """Replace lone surrogates (valid JSON escapes, invalid text) so the text can travel on."""
    if text.isascii():  # constant time in CPython: most text needs no more look
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def clean_value(value: Any) -> Any:
    """``value`` with :func:`clean_text` applied to every string in it (dicts, lists
    and tuples are copied; a provider's metadata is a few keys)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_value(k): clean_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_value(v) for v in value]
    if isinstance(value, tuple):
        return tuple(clean_value(v) for v in value)
    return value
