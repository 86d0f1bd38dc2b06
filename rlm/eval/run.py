"""An eval in its journal: recorded, found again, and reported (the judge run where asked).

Working on an eval is working on its volley (:meth:`JournaledVolley.work`): any
number of processes, ``rlm volley work`` among them, resumable after any stop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm._config import EvalOptions, RunConfig, VolleyOptions
from rlm._files import ReadLimits, read_bytes
from rlm.errors import UsageError
from rlm.eval.arms import Arm
from rlm.eval.judge import DEFAULT_TEMPLATE, JudgeCase, judge
from rlm.eval.plan import EVAL_KEY, EvalPlan, EvalRecord, eval_volley_options, is_eval
from rlm.eval.report import Report, build_report, item_answers, outcomes
from rlm.journal.cache import ResponseCache
from rlm.providers.base import Lane, Provider
from rlm.providers.fixture import FixtureOptions
from rlm.volley.journaled import JournaledVolley

__all__ = ["Scoring", "create_eval", "find_eval", "read_judge_prompt", "report_eval"]


@dataclass(frozen=True)
class Scoring:
    """How a report scores outputs: the default scorer, and the judge's model and prompt."""

    scorer: str = "exact"
    judge_model: str | None = None
    judge_prompt: str | None = None  # the template's text

    @classmethod
    def of(cls, options: EvalOptions, prompt: str | None) -> Scoring:
        return cls(options.scorer, options.judge_model, prompt)

    @classmethod
    def stored(cls, record: EvalRecord) -> Scoring:
        kept = record.options
        return cls(str(kept.get("scorer") or "exact"), kept.get("judge_model"),
                   kept.get("judge_prompt"))


def read_judge_prompt(path: str | None) -> str | None:
    """The judge's template from ``--judge-prompt`` (UsageError when it cannot be used)."""
    if path is None:
        return None
    name = str(Path(path).expanduser())
    data = read_bytes(name, "--judge-prompt", ReadLimits.file_only())
    try:
        text = data.decode("utf-8")[:100_000]
    except UnicodeDecodeError:
        raise UsageError(f"--judge-prompt {path} is not UTF-8 text; save it as UTF-8") from None
    if "{answer}" not in text:
        raise UsageError(f"--judge-prompt {path}: the prompt must hold {{answer}} (the output "
                         "judged), and usually {question} and {expected}")
    return text


def create_eval(journal: JournaledVolley, plan: EvalPlan, config: RunConfig,
                options: VolleyOptions, fixture: FixtureOptions | None = None) -> str:
    """Record ``plan`` as one volley (nothing is sent); its id is the eval's.  The volley
    runs with :func:`eval_volley_options` of ``options``."""
    arms = [Arm.from_record(arm) for arm in plan.spec["arms"]]
    return journal.create(plan.tasks, plan.documents, config,
                          eval_volley_options(options, arms), fixture=fixture,
                          about={EVAL_KEY: plan.spec})


def find_eval(journal: JournaledVolley, ref: str) -> EvalRecord:
    """The eval ``ref`` names (an id, or ``last``: the newest eval in the journal)."""
    if ref == "last":
        evals = [v for v in journal.store.volleys() if is_eval(v.settings)]
        if not evals:
            raise UsageError(f"journal {journal.store.where} holds no eval yet; `rlm eval "
                             "DATASET` makes one")
        ref = max(evals, key=lambda v: v.created_at).volley_id
    return EvalRecord.from_stored(journal.load(ref))


async def report_eval(record: EvalRecord, scoring: Scoring, *, config: RunConfig,
                      journal: JournaledVolley,
                      providers: Mapping[Lane, Provider] | None = None) -> Report:
    """Score every finished item (the judge's verdicts read from, or kept in, ``journal``'s
    response cache) and build the report."""
    cases = _judge_cases(record, scoring.scorer)
    model = scoring.judge_model or config.model
    judged, usage = await judge(
        cases, config=config, model=model, template=scoring.judge_prompt or DEFAULT_TEMPLATE,
        cache=ResponseCache(journal.store), providers=providers)
    shown: dict[str, Any] = {"scorer": scoring.scorer}
    if cases:
        shown["judge"] = {"model": model, "verdicts": len(cases), "calls": usage.calls,
                          "cached": usage.cached, "cost": round(usage.cost, 8)}
    found = outcomes(record, scorer=scoring.scorer, judged=judged)
    return build_report(record, found, scoring=shown)


def _judge_cases(record: EvalRecord, scorer: str) -> list[JudgeCase]:
    cases = []
    for item in record.items:
        if (item.get("scorer") or scorer) != "judge":
            continue
        for arm, index in zip(record.arms, item["tasks"], strict=True):
            result = record.results.get(index)
            if result is not None and result.status == "succeeded":
                cases.append(JudgeCase((item["id"], arm.name), item["question"],
                                       item_answers(item), result.output or ""))
    return cases
