"""Describing ``context`` to the root model without showing it."""

from __future__ import annotations

__all__ = ["Context", "context_chars", "describe_context"]

Context = str | list[str]

_PREFIX_CHARS = 300
_LISTED_LENGTHS = 20


def context_chars(context: Context) -> int:
    return len(context) if isinstance(context, str) else sum(len(doc) for doc in context)


def describe_context(context: Context) -> str:
    """Type, size and a short prefix of ``context``: never the whole input."""
    if isinstance(context, str):
        lines = [
            f"Your context is a str of {len(context):,} characters "
            f"(about {len(context) // 4:,} tokens).",
        ]
        if context:
            lines.append(f"It begins with:\n{_quote(context[:_PREFIX_CHARS])}")
        return "\n".join(lines)
    lengths = [len(doc) for doc in context]
    shown = ", ".join(f"{n:,}" for n in lengths[:_LISTED_LENGTHS])
    more = f", … ({len(lengths) - _LISTED_LENGTHS} more)" if len(lengths) > _LISTED_LENGTHS else ""
    lines = [
        f"Your context is a list of {len(context)} str documents, "
        f"{sum(lengths):,} characters in total (about {sum(lengths) // 4:,} tokens).",
        f"Document lengths: [{shown}{more}].",
    ]
    if context and context[0]:
        lines.append(f"The first document begins with:\n{_quote(context[0][:_PREFIX_CHARS])}")
    return "\n".join(lines)


def _quote(text: str) -> str:
    return "\n".join("> " + line for line in text.splitlines() or [""])
