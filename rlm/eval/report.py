"""An eval's report: every item scored under every arm, then per-arm and per-tier figures.

Per arm: accuracy (the mean score of the items that finished; a failed item
scores 0, one whose scorer failed is left out and counted) with its 95 %
bootstrap interval, cost (total and per item), tokens, LLM calls, latency
(p50, p95; a task refused before it sent anything is left out) and failures
by kind; and the same by context-size tier.  The
report is plain data (:meth:`Report.to_dict` is the ``--output-format json``
shape); the bootstrap is seeded from the eval's seed, the arm and the tier, so
the same verdicts give the same report, however many processes gave them.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from rlm.errors import UsageError
from rlm.eval.items import Answer
from rlm.eval.plan import EvalRecord
from rlm.eval.scorers import Score, make_scorer, score_output
from rlm.eval.stats import bootstrap_mean, percentile

__all__ = ["ArmFigures", "Outcome", "Report", "build_report", "item_answers", "outcomes"]

OutcomeState = Literal["scored", "failed", "unscored", "pending"]
#: Failures of a task refused before it sent anything (its latency is no latency).
_REFUSED = frozenset({"context_window", "budget"})


@dataclass(frozen=True)
class Outcome:
    """One item under one arm: its task's verdict and its score."""

    item: str
    arm: str
    tier: str
    context_chars: int
    task: int
    state: OutcomeState
    score: float | None = None
    failure: str | None = None  # the failure's kind (``scorer``: the scorer failed)
    error: str | None = None
    output: str | None = None
    cost: float | None = None
    tokens_input: int = 0
    tokens_output: int = 0
    calls: int = 0
    latency: float | None = None
    trace: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cost"] = None if self.cost is None else round(self.cost, 8)
        data["latency"] = None if self.latency is None else round(self.latency, 3)
        return data


def item_answers(item: Mapping[str, Any]) -> tuple[Answer, ...]:
    """An item record's accepted answers (lists as tuples)."""
    return tuple(tuple(a) if isinstance(a, list) else str(a) for a in item.get("answers", []))


def outcomes(record: EvalRecord, *, scorer: str,
             judged: Mapping[tuple[str, str], Score] | None = None) -> list[Outcome]:
    """Every item under every arm, scored (``scorer`` for items that name none; ``judged``
    holds the judge's verdicts)."""
    made: dict[str, Any] = {}
    found = []
    for item in record.items:
        spec = item.get("scorer") or scorer
        for arm, index in zip(record.arms, item["tasks"], strict=True):
            result = record.results.get(index)
            base = Outcome(item["id"], arm.name, item.get("tier", ""),
                           int(item.get("context_chars", 0)), index, "pending")
            if result is None:
                found.append(base)
                continue
            finished = replace(
                base, state="failed", output=result.output, cost=result.cost,
                tokens_input=result.tokens_input, tokens_output=result.tokens_output,
                calls=result.calls, latency=result.duration_sec, trace=result.trace)
            if result.status != "succeeded":
                found.append(replace(finished, failure=result.error_kind or "error",
                                     error=result.error, score=0.0))
                continue
            score = _score(spec, made, result.output or "", item, arm.name, judged)
            state: OutcomeState = "scored" if score.value is not None else "unscored"
            found.append(replace(finished, state=state, score=score.value, error=score.error,
                                 failure=None if score.error is None else "scorer"))
    return found


def _score(spec: str, made: dict[str, Any], output: str, item: Mapping[str, Any], arm: str,
           judged: Mapping[tuple[str, str], Score] | None) -> Score:
    if spec == "judge":
        if judged is None or (item["id"], arm) not in judged:
            return Score(None, "not judged (the judge scorer did not run)")
        return judged[(item["id"], arm)]
    try:
        scorer = made.get(spec) or made.setdefault(spec, make_scorer(spec))
    except UsageError as exc:  # an item's own scorer gone since (its module) marks it alone
        return Score(None, f"scorer {spec}: {exc}")
    shown = {**item, "answer": item_answers(item)[0] if item.get("answers") else None}
    return score_output(scorer, output, item_answers(item), shown)


@dataclass(frozen=True)
class ArmFigures:
    """The figures of one arm over some items (all of them, or one tier's)."""

    items: int
    finished: int
    pending: int
    unscored: int
    accuracy: float | None
    ci95: list[float | None]
    cost_total: float | None
    cost_mean: float | None
    tokens_input: int
    tokens_output: int
    calls_total: int
    calls_mean: float | None
    latency_p50: float | None
    latency_p95: float | None
    failures: dict[str, int]


def figures(found: Sequence[Outcome], seed: int) -> ArmFigures:
    done = [o for o in found if o.state != "pending"]
    counted = [o.score for o in done if o.score is not None]
    interval = bootstrap_mean(counted, seed=seed)
    costs = [o.cost for o in done if o.cost is not None]
    # A task refused before it sent anything (too long for its window, a cap spent) took
    # no time worth the name: counted, it would make its arm look fast.
    latencies = sorted(o.latency for o in done if o.latency is not None
                       and not (o.calls == 0 and o.failure in _REFUSED))
    unpriced = any(o.cost is None for o in done)
    total = math.fsum(costs) if done and not unpriced else None
    return ArmFigures(
        items=len(found), finished=len(done), pending=len(found) - len(done),
        unscored=sum(1 for o in done if o.state == "unscored"),
        accuracy=_round(interval.mean), ci95=interval.to_list(),
        cost_total=_round(total, 8), cost_mean=_round(total / len(done), 8)
        if total is not None and done else None,
        tokens_input=sum(o.tokens_input for o in done),
        tokens_output=sum(o.tokens_output for o in done),
        calls_total=sum(o.calls for o in done),
        calls_mean=_round(sum(o.calls for o in done) / len(done), 3) if done else None,
        latency_p50=_round(percentile(latencies, 50), 3),
        latency_p95=_round(percentile(latencies, 95), 3),
        failures=dict(sorted(Counter(o.failure for o in done if o.failure).items())),
    )


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True)
class Report:
    """A whole eval's report (``to_dict``: the JSON shape)."""

    head: dict[str, Any]
    arms: list[dict[str, Any]]
    tiers: list[str]
    items: list[Outcome]

    @property
    def complete(self) -> bool:
        return all(o.state != "pending" for o in self.items)

    def to_dict(self) -> dict[str, Any]:
        return {**self.head, "status": "complete" if self.complete else "incomplete",
                "tiers": self.tiers, "arms": self.arms,
                "items": [o.to_dict() for o in self.items]}


def build_report(record: EvalRecord, found: Sequence[Outcome], *,
                 scoring: Mapping[str, Any]) -> Report:
    """The report of ``record`` from its scored outcomes (``scoring``: how they were scored)."""
    seed = int(record.options.get("seed", 0))
    tiers = list(dict.fromkeys(o.tier for o in found))
    arms = []
    for arm in record.arms:
        mine = [o for o in found if o.arm == arm.name]
        by_tier = [{"tier": tier, **asdict(figures([o for o in mine if o.tier == tier],
                                                   _seed(seed, arm.name, tier)))}
                   for tier in tiers]
        arms.append({"name": arm.name, "kind": arm.kind, "arm": arm.describe(),
                     **asdict(figures(mine, _seed(seed, arm.name, ""))), "tiers": by_tier})
    head = {"eval_id": record.eval_id, "dataset": record.dataset,
            "created_at": record.created_at, "provider": record.settings.get("provider"),
            "model": record.settings.get("model"), "scoring": dict(scoring)}
    return Report(head, arms, tiers, list(found))


def _seed(seed: int, arm: str, tier: str) -> int:
    return seed * 1_000_003 + zlib.crc32(f"{arm}\0{tier}".encode())
