"""The judge scorer: a model reads the question, the expected answer and the output, and
says CORRECT or INCORRECT.

Its requests go through a gate of their own (the eval's endpoint and limits, a
ledger counted apart from the arms') with the response cache in front: a
verdict once given is read back, never paid for again, when the report is made
again or another scorer is tried.  The system prompt is rlm's
(``prompts/rlm/prompts/judge.md``); the user message is a template with
``{question}``, ``{expected}`` and ``{answer}`` filled in (``--judge-prompt``).
A verdict that says neither word, or a request that fails, marks its item with
that error; the others are judged all the same.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

from rlm import prompts
from rlm._config import RunConfig
from rlm._events import EventBus
from rlm._run.assembly import build_gate, make_budget
from rlm._traffic.gate import CompletionCache, Gate
from rlm.errors import RLMError
from rlm.eval.items import Answer
from rlm.eval.scorers import Score
from rlm.providers.base import CompletionRequest, Lane, Message, Provider
from rlm.providers.open import open_providers

__all__ = ["DEFAULT_TEMPLATE", "JudgeCase", "JudgeUsage", "judge", "verdict"]

DEFAULT_TEMPLATE = (
    "Question: {question}\nExpected answer: {expected}\nCandidate answer: {answer}"
)
_WORD = re.compile(r"[A-Z]+")


@dataclass(frozen=True)
class JudgeCase:
    """One output to judge; ``key`` says whose it is (item id, arm name)."""

    key: tuple[str, str]
    question: str
    answers: tuple[Answer, ...]
    output: str


@dataclass(frozen=True)
class JudgeUsage:
    """What judging cost: requests sent, verdicts read from the cache, USD."""

    calls: int = 0
    cached: int = 0
    cost: float = 0.0


def verdict(text: str) -> Score:
    """A judge's reply as a score: INCORRECT (or NOT CORRECT) 0, CORRECT 1, else an error."""
    words = _WORD.findall(text.upper())
    if "INCORRECT" in words or " ".join(words).find("NOT CORRECT") >= 0:
        return Score(0.0)
    if "CORRECT" in words:
        return Score(1.0)
    return Score(None, f"the judge said neither CORRECT nor INCORRECT: {text.strip()[:80]!r}")


def _expected(answers: Sequence[Answer]) -> str:
    return " or ".join(", ".join(a) if isinstance(a, tuple) else a for a in answers)


def _messages(case: JudgeCase, template: str) -> list[Message]:
    user = (template.replace("{question}", case.question)
            .replace("{expected}", _expected(case.answers))
            .replace("{answer}", case.output))
    return [Message(role="system", content=prompts.load("judge")),
            Message(role="user", content=user)]


async def judge(cases: Sequence[JudgeCase], *, config: RunConfig, model: str, template: str,
                cache: CompletionCache | None,
                providers: Mapping[Lane, Provider] | None = None,
                ) -> tuple[dict[tuple[str, str], Score], JudgeUsage]:
    """Every case's verdict, and what judging them cost."""
    scores: dict[tuple[str, str], Score] = {}
    if not cases:
        return scores, JudgeUsage()
    budget = make_budget(config, models=[model])
    async with _providers(config, providers) as opened:
        gate = build_gate(dataclasses.replace(config, root_permits=0), providers=opened,
                          events=EventBus(keep=False), ledger=budget, cache=cache)
        async with trio.open_nursery() as nursery:
            for number, case in enumerate(cases, 1):
                nursery.start_soon(_one, gate, case, model, template, number, scores)
    usage = JudgeUsage(budget.spent.calls, gate.cached_calls, budget.spent.cost)
    return scores, usage


async def _one(gate: Gate, case: JudgeCase, model: str, template: str, number: int,
               scores: dict[tuple[str, str], Score]) -> None:
    request = CompletionRequest(messages=_messages(case, template), model=model,
                                call_id=f"judge{number}")
    try:
        completion = await gate.complete(request)
    except RLMError as exc:  # a failed verdict marks its item, never the others
        scores[case.key] = Score(None, f"the judge failed: {exc}")
        return
    scores[case.key] = verdict(completion.text)


@asynccontextmanager
async def _providers(config: RunConfig, given: Mapping[Lane, Provider] | None
                     ) -> AsyncIterator[Mapping[Lane, Provider]]:
    if given is not None:
        yield given
        return
    async with open_providers(config) as opened:
        yield opened
