"""Built-in datasets, generated from :mod:`rlm.fixtures`: the same seed gives the same items.

- ``needle``: one planted number in filler text ("What is the magic number?"), the
  needle at a depth spread over each tier's items;
- ``oolong``: OOLONG-style aggregation questions over labelled records (counts,
  most and least common labels, months);
- ``multidoc``: four documents with planted facts; a question on a fact that only
  one of them holds.

Each makes ``per_tier`` items at each tier's size (characters of context).  Every
item draws from its own seed, derived from ``seed``, its tier and its number, so
adding a tier or items leaves the others as they were.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from rlm.eval.items import EvalItem, tier_label
from rlm.fixtures import generate_multidoc, generate_needle, generate_oolong

__all__ = ["GENERATORS", "generate"]

_RECORD_CHARS = 80  # about one oolong record line
_DOCS = 4  # a multidoc item's documents


def _seed(seed: int, size: int, number: int) -> int:
    return (seed * 1_000_003 + size) * 1_009 + number


def _needle(size: int, number: int, per_tier: int, seed: int) -> EvalItem:
    fixture = generate_needle(size, seed=_seed(seed, size, number),
                              depth=(number + 0.5) / per_tier)
    return EvalItem(id="", question=fixture.question, context=(fixture.text,),
                    answers=(fixture.answer,))


def _oolong(size: int, number: int, per_tier: int, seed: int) -> EvalItem:
    fixture = generate_oolong(max(5, size // _RECORD_CHARS), seed=_seed(seed, size, number))
    question = fixture.questions[number % len(fixture.questions)]
    return EvalItem(id="", question=question.text, context=(fixture.text,),
                    answers=(question.answer,))


def _multidoc(size: int, number: int, per_tier: int, seed: int) -> EvalItem:
    per_doc = max(500, size // _DOCS)
    attempt = 0
    while True:  # a draw where every key is in two documents has no unambiguous question
        fixture = generate_multidoc(_DOCS, per_doc, seed=_seed(seed, size, number) + attempt)
        held = Counter(key for doc in fixture.documents for key in doc.facts)
        single = sorted(key for key, count in held.items() if count == 1)
        if single:
            key = single[number % len(single)]
            value = next(doc.facts[key] for doc in fixture.documents if key in doc.facts)
            return EvalItem(id="", question=f"What is the {key}?", context=tuple(fixture.texts),
                            answers=(value,))
        attempt += 1


GENERATORS: dict[str, Callable[[int, int, int, int], EvalItem]] = {
    "needle": _needle, "oolong": _oolong, "multidoc": _multidoc,
}


def generate(name: str, *, tiers: Sequence[int], per_tier: int, seed: int) -> list[EvalItem]:
    """``per_tier`` items of generator ``name`` at each of ``tiers`` (characters)."""
    make = GENERATORS[name]
    items = []
    for size in tiers:
        label = tier_label(size)
        for number in range(per_tier):
            item = make(size, number, per_tier, seed)
            items.append(EvalItem(id=f"{name}-{label}-{number + 1:03d}", question=item.question,
                                  context=item.context, answers=item.answers, tier=label))
    return items
