"""Scorers: how right one output is, from 0 to 1.

A scorer is named by a spec (``--scorer``, or an item's own ``scorer``):

- ``exact``: the output equals an accepted answer once both are normalised
  (case, accents' forms, punctuation, articles and spacing set aside);
- ``contains``: a normalised accepted answer appears, as whole words, in the output;
- ``numeric``, ``numeric:0.5``, ``numeric:1%``: the output's number (the last one
  in it) equals the answer's, within an absolute or a relative tolerance;
- ``regex``: an accepted answer, read as a regular expression, matches the output;
- ``set_f1``: list answers — the F1 of the output's items (a JSON list, or items
  split on commas, semicolons and lines) against the answer's, normalised;
- ``judge``: a model decides (:mod:`rlm.eval.judge`; its verdicts are cached);
- ``module:function``: your own, called as ``function(output, item)`` with the item
  as a dict (``id``, ``question``, ``answer``, ``answers``, ``tier``...), returning
  True/False or a number from 0 to 1.

An item accepts several answers: its score is the best against any of them (an
answer the scorer cannot read, ``twelve`` for ``numeric``, is passed over when
another one scores).  A scorer that fails on an item (a bad pattern, your
function raising or returning something else) marks that item with the error;
the run goes on.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rlm.errors import UsageError
from rlm.eval.items import Answer

__all__ = [
    "BUILT_IN",
    "Score",
    "Scorer",
    "make_scorer",
    "normalise",
    "number_in",
    "score_output",
    "set_f1",
]

BUILT_IN = ("exact", "contains", "numeric", "regex", "set_f1", "judge")
_ARTICLES = frozenset({"a", "an", "the"})
_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")
_ITEM_SPLIT = re.compile(r"[,;\n]+")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


@dataclass(frozen=True)
class Score:
    """An item's score from 0 to 1, or why it has none (``error``: the scorer failed)."""

    value: float | None
    error: str | None = None


#: Scores one output against one accepted answer, from 0 to 1 (raises to mark the item).
Check = Callable[[str, Answer], float]


@dataclass(frozen=True)
class Scorer:
    """A scorer made from its spec.  ``judge`` scorers are scored by the judge, not here."""

    spec: str
    check: Check | None = None
    own: Callable[..., Any] | None = None  # module:function

    @property
    def is_judge(self) -> bool:
        return self.spec == "judge"


def normalise(text: str) -> str:
    """Case-folded NFKC text without punctuation, articles or extra spaces."""
    text = unicodedata.normalize("NFKC", text).casefold()
    words = re.sub(r"[^\w\s]", " ", text).split()
    return " ".join(w for w in words if w not in _ARTICLES)


def _flat(answer: Answer) -> str:
    return ", ".join(answer) if isinstance(answer, tuple) else answer


def _exact(output: str, answer: Answer) -> float:
    return float(normalise(output) == normalise(_flat(answer)))


def _contains(output: str, answer: Answer) -> float:
    wanted = normalise(_flat(answer))
    return float(bool(wanted) and f" {wanted} " in f" {normalise(output)} ")


def number_in(text: str) -> float | None:
    """The last number written in ``text`` (``1,234.5`` reads as 1234.5), or None."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def _numeric(tolerance: str) -> Check:
    relative = tolerance.endswith("%")
    try:
        amount = float(tolerance.rstrip("%")) if tolerance else 0.0
    except ValueError:
        raise UsageError(f"scorer numeric:{tolerance}: the tolerance must be a number (0.5) "
                         "or a percentage (1%)") from None
    if not math.isfinite(amount) or amount < 0:
        raise UsageError(f"scorer numeric:{tolerance}: the tolerance must be 0 or more")

    def check(output: str, answer: Answer) -> float:
        expected = number_in(_flat(answer))
        if expected is None:
            raise ValueError(f"the answer {_flat(answer)!r} holds no number")
        got = number_in(output)
        if got is None:
            return 0.0
        allowed = amount / 100 * abs(expected) if relative else amount
        return float(abs(got - expected) <= allowed + 1e-9 * max(1.0, abs(expected)))

    return check


def _regex(output: str, answer: Answer) -> float:
    try:
        pattern = re.compile(_flat(answer), re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"the answer {_flat(answer)!r} is not a regular expression: {exc}") \
            from None
    return float(pattern.search(output) is not None)


def _items(text: str) -> set[str]:
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            parsed = json.loads(stripped)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, list):
            return {normalise(str(v)) for v in parsed} - {""}
    return {normalise(_BULLET.sub("", part)) for part in _ITEM_SPLIT.split(text)} - {""}


def set_f1(output: str, answer: Answer) -> float:
    """F1 of the output's items against the answer's (both normalised)."""
    expected = {normalise(a) for a in answer} - {""} if isinstance(answer, tuple) \
        else _items(answer)
    got = _items(output)
    if not expected and not got:
        return 1.0
    common = len(expected & got)
    if common == 0:
        return 0.0
    precision, recall = common / len(got), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def make_scorer(spec: str) -> Scorer:
    """The scorer ``spec`` names (UsageError for an unknown one, before anything runs)."""
    name, _, argument = spec.strip().partition(":")
    checks: dict[str, Check] = {"exact": _exact, "contains": _contains, "regex": _regex,
                                "set_f1": set_f1}
    if name in checks or name == "judge":
        if argument:
            raise UsageError(f"scorer {name} takes no argument (got {spec!r})")
        return Scorer(name, checks.get(name))
    if name == "numeric":
        return Scorer(spec, _numeric(argument))
    if argument:
        from rlm._run.tools import load_tool  # a user's module: only when one is named

        return Scorer(spec, own=load_tool(spec, flag="--scorer"))
    raise UsageError(f"unknown scorer {spec!r}: use {', '.join(BUILT_IN)}, numeric:TOLERANCE, "
                     "or module:function for your own")


def score_output(scorer: Scorer, output: str, answers: tuple[Answer, ...],
                 item: Mapping[str, Any]) -> Score:
    """``output``'s score under ``scorer`` (not a judge): the best over ``answers``, or the
    scorer's error."""
    if scorer.own is not None:
        try:
            return Score(_own_value(scorer.own(output, dict(item))))
        except Exception as exc:  # a scorer error marks this item, never the run
            return _failed(scorer, exc)
    assert scorer.check is not None
    values: list[float] = []
    error: Exception | None = None
    for answer in answers:
        try:
            values.append(scorer.check(output, answer))
        except Exception as exc:  # an answer this scorer cannot read ("twelve" for numeric)
            error = error or exc
    # One accepted answer the scorer cannot read does not spoil another it can.
    if values:
        return Score(max(values))
    return _failed(scorer, error or ValueError("the item has no accepted answer"))


def _failed(scorer: Scorer, exc: Exception) -> Score:
    return Score(None, f"scorer {scorer.spec} failed: {type(exc).__name__}: {exc}")


def _own_value(value: Any) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and math.isfinite(value) and 0 <= value <= 1:
        return float(value)
    raise TypeError(f"returned {value!r}; a scorer returns True/False or a number from 0 to 1")
