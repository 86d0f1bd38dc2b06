"""Reading an eval's dataset: a JSONL file, or a built-in generator by name.

A JSONL dataset has one item per line::

    {"id": "q1", "question": "What is the magic number?", "context_path": "big.txt",
     "answer": "4817263"}

- ``id``: a string or number, unique (default: the line number);
- ``question``: the question (required);
- the context: ``context`` (a text, or a list of documents) or ``context_path``
  (a file, or a list of files; relative to the dataset's folder);
- ``answer`` (one accepted answer: a text, a number, or a list for list answers) or
  ``answers`` (a list of accepted answers, any one is right);
- ``scorer`` (optional): this item's scorer (see :mod:`rlm.eval.scorers`).

Every mistake is a UsageError naming the file and line; each item's context is held
to ``max_context_bytes`` before it is read.  A name that is not a file and is one of
:data:`~rlm.eval.generators.GENERATORS` generates the items instead.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rlm._files import ReadLimits, open_file, read_bytes
from rlm.errors import UsageError
from rlm.eval.generators import GENERATORS, generate
from rlm.eval.items import Answer, EvalItem, tier_of

__all__ = ["load_dataset", "read_jsonl"]

_KEYS = ("id", "question", "context", "context_path", "answer", "answers", "scorer")


def load_dataset(
    name: str, *, tiers: Sequence[int], per_tier: int, seed: int, max_context_bytes: int
) -> list[EvalItem]:
    """The items ``name`` gives: a JSONL file, or a generator (``needle``, ``oolong``,
    ``multidoc``) making ``per_tier`` items at each of ``tiers`` from ``seed``."""
    path = Path(name).expanduser()
    if not path.exists() and name in GENERATORS:
        return generate(name, tiers=tiers, per_tier=per_tier, seed=seed)
    if not path.is_file():
        known = ", ".join(GENERATORS)
        raise UsageError(f"no dataset file {name!r}; give a JSONL file or one of the built-in "
                         f"generators ({known})")
    return read_jsonl(path, tiers=tiers, max_context_bytes=max_context_bytes)


def read_jsonl(path: Path, *, tiers: Sequence[int], max_context_bytes: int) -> list[EvalItem]:
    """The items of a JSONL dataset file (see the module docstring)."""
    items: list[EvalItem] = []
    seen: set[str] = set()
    for lineno, data in _lines(path, max_context_bytes):
        where = f"{path}, line {lineno}"
        item = _item(data, where, path.parent, lineno, tiers, max_context_bytes)
        if item.id in seen:
            raise UsageError(f"{where}: id {item.id!r} is used twice; every item needs its own")
        seen.add(item.id)
        items.append(item)
    if not items:
        raise UsageError(f"{path} holds no items: one JSON object per line, each with a "
                         "'question', a context and an 'answer'")
    return items


def _lines(path: Path, max_context_bytes: int) -> Iterator[tuple[int, dict[str, Any]]]:
    # A line may carry its context inline: it is held to the context bound (and some room).
    cap = max_context_bytes + 64 * 1024
    # A dataset's own size is not bounded (each line is): its lines are read one by one.
    whole = ReadLimits(sys.maxsize, raised_by=None, streams=False)
    try:
        with open_file(str(path), "dataset", whole) as handle:
            for lineno, raw in enumerate(iter(lambda: handle.readline(cap + 1), b""), 1):
                if len(raw) > cap:
                    raise UsageError(f"{path}, line {lineno} is longer than --max-context-bytes "
                                     "allows; put a large context in a file (context_path)")
                text = raw.decode("utf-8", errors="replace")
                if not text.strip():
                    continue
                try:
                    data = json.loads(text)
                except (json.JSONDecodeError, RecursionError) as exc:
                    raise UsageError(f"{path}, line {lineno} is not a JSON object "
                                     f"({getattr(exc, 'msg', 'nested too deeply')}); a dataset "
                                     "has one item object per line") from None
                if not isinstance(data, dict):
                    raise UsageError(f"{path}, line {lineno}: each line must be an item object")
                yield lineno, data
    except OSError as exc:
        raise UsageError(f"cannot read dataset {path}: {exc.strerror}") from None


def _item(data: dict[str, Any], where: str, folder: Path, lineno: int, tiers: Sequence[int],
          max_context_bytes: int) -> EvalItem:
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}; an item may have "
                         f"{', '.join(_KEYS)}")
    question = data.get("question")
    if not isinstance(question, str) or not question.strip():
        raise UsageError(f"{where}: 'question' must be a non-empty string")
    ident = data.get("id", lineno)
    if isinstance(ident, bool) or not isinstance(ident, str | int) or str(ident) == "":
        raise UsageError(f"{where}: 'id' must be a non-empty string or a number")
    scorer = data.get("scorer")
    if scorer is not None and (not isinstance(scorer, str) or not scorer.strip()):
        raise UsageError(f"{where}: 'scorer' must be a scorer's name (exact, contains, "
                         "numeric, regex, set_f1, judge, or module:function)")
    context = _context(data, where, folder, max_context_bytes)
    return EvalItem(id=str(ident), question=question, context=context,
                    answers=_answers(data, where), scorer=scorer,
                    tier=tier_of(sum(len(doc) for doc in context), tiers))


def _answers(data: dict[str, Any], where: str) -> tuple[Answer, ...]:
    if ("answer" in data) == ("answers" in data):
        raise UsageError(f"{where}: give 'answer' (one accepted answer) or 'answers' (a list "
                         "of accepted answers), one of them")
    if "answer" in data:
        return (_answer(data["answer"], where, "answer"),)
    answers = data["answers"]
    if not isinstance(answers, list) or not answers:
        raise UsageError(f"{where}: 'answers' must be a non-empty list of accepted answers")
    return tuple(_answer(a, where, "answers") for a in answers)


def _answer(value: Any, where: str, key: str) -> Answer:
    if isinstance(value, list):
        if all(_scalar(v) for v in value):
            return tuple(_text(v) for v in value)
    elif _scalar(value):
        return _text(value)
    raise UsageError(f"{where}: '{key}' must hold texts, numbers, or lists of them")


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _text(value: str | int | float) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _context(data: dict[str, Any], where: str, folder: Path,
             max_context_bytes: int) -> tuple[str, ...]:
    inline, paths = data.get("context"), data.get("context_path")
    if inline is not None and paths is not None:
        raise UsageError(f"{where}: give 'context' or 'context_path', not both")
    if inline is not None:
        docs = [inline] if isinstance(inline, str) else inline
        if not isinstance(docs, list) or not all(isinstance(d, str) for d in docs):
            raise UsageError(f"{where}: 'context' must be a text or a list of texts")
        if sum(len(d.encode("utf-8", "surrogatepass")) for d in docs) > max_context_bytes:
            raise UsageError(f"{where}: the context is larger than --max-context-bytes allows")
        return tuple(docs)
    if paths is None:
        return ()
    names = [paths] if isinstance(paths, str) else paths
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise UsageError(f"{where}: 'context_path' must be a file or a list of files")
    docs, left = [], max_context_bytes
    for name in names:
        file = folder / Path(name).expanduser()
        raw = read_bytes(str(file), f"{where}: context file",
                         ReadLimits(left, streams=False))  # a file, within what is left
        left -= len(raw)
        docs.append(raw.decode("utf-8", errors="replace"))
    return tuple(docs)
