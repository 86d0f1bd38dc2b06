"""An eval's items: a question over a context, the answers it accepts, its scorer.

:class:`EvalItem` is what every dataset gives (a JSONL file, :mod:`rlm.eval.datasets`;
a built-in generator, :mod:`rlm.eval.generators`) and what the journal keeps of it
(:meth:`EvalItem.record`, without the context: the volley holds that once).
Context sizes are grouped into *tiers* (``2k``, ``20k``, ``200k``, ``1M``
characters): a generated item is made at its tier's size; a file's item falls in
the smallest tier its context fits.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_TIERS",
    "Answer",
    "EvalItem",
    "parse_tiers",
    "tier_label",
    "tier_of",
]

#: An accepted answer: a text, or a list of texts (a list answer, scored by set F1).
Answer = str | tuple[str, ...]

DEFAULT_TIERS = (2_000, 20_000, 200_000)
_TIER = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*$")
_UNITS = {"": 1, "k": 1_000, "m": 1_000_000}
_MAX_TIER = 100_000_000


def parse_tiers(text: str) -> tuple[int, ...]:
    """``"2k,20k,200k,1M"`` → character counts, ascending (ValueError saying how to write them)."""
    sizes = []
    for part in text.split(","):
        if not part.strip():
            continue
        found = _TIER.match(part)
        if found is None:
            raise ValueError(f"{part.strip()!r} is not a size in characters; write e.g. "
                             "2k,20k,200k,1M")
        size = int(float(found.group(1)) * _UNITS[found.group(2).lower()])
        if not 200 <= size <= _MAX_TIER:
            raise ValueError(f"{part.strip()!r}: a tier is 200 to 100M characters")
        sizes.append(size)
    if not sizes:
        raise ValueError("no tiers; write e.g. 2k,20k,200k")
    return tuple(sorted(set(sizes)))


def tier_label(size: int) -> str:
    """``2k``, ``200k``, ``1M``, ``1.5M``: a tier as people write it."""
    for unit, scale in (("M", 1_000_000), ("k", 1_000)):
        if size >= scale:
            value = size / scale
            return f"{value:.3g}{unit}" if value != int(value) else f"{int(value)}{unit}"
    return str(size)


def tier_of(chars: int, tiers: Sequence[int]) -> str:
    """The label of the smallest tier ``chars`` fits (``>1M`` past the largest)."""
    for size in tiers:
        if chars <= size:
            return tier_label(size)
    return f">{tier_label(tiers[-1])}"


@dataclass(frozen=True)
class EvalItem:
    """One question of an eval.

    ``context`` holds its documents (one for a plain text); ``answers`` the answers
    accepted (any one is right); ``scorer`` the item's own scorer, else the eval's;
    ``tier`` the context-size tier it is reported under.
    """

    id: str
    question: str
    context: tuple[str, ...]
    answers: tuple[Answer, ...]
    scorer: str | None = None
    tier: str = ""

    @property
    def context_chars(self) -> int:
        return sum(len(doc) for doc in self.context)

    def record(self) -> dict[str, Any]:
        """What the journal keeps of the item (its context is the volley's documents)."""
        return {
            "id": self.id, "question": self.question, "tier": self.tier,
            "answers": [list(a) if isinstance(a, tuple) else a for a in self.answers],
            "scorer": self.scorer, "context_chars": self.context_chars,
            "documents": len(self.context),
        }
