"""An eval as one volley: a task per item and arm, carrying all it needs; and read back.

Each item's documents are stored once, as the volley's documents; each task
names the ones that are its context (so every arm of an item reads the same
text, and any ``rlm volley work`` process runs the task as it was made).  A
``direct`` task is one completion (``mode`` ``completion``) held to its
model's context window — the arm's ``context_window``, the eval's, or the price
table's — and fails having sent nothing when the item does not fit; an ``rlm``
task is a whole RLM call.  Each task's ``group`` is its arm, whose
``max_cost`` caps what the arm's tasks spend.

What the eval is (dataset, items and their answers, arms, scoring options) is
kept with the volley (:data:`EVAL_KEY` of its stored settings); :class:`EvalRecord`
reads it back with the verdicts the journal holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlm._config import EvalOptions, RunConfig, VolleyMode, VolleyOptions
from rlm._run.assembly import make_budget
from rlm._traffic.prices import PriceTable
from rlm.errors import SettingError, UsageError
from rlm.eval.arms import Arm
from rlm.eval.items import EvalItem
from rlm.journal.volleys import StoredVolley
from rlm.volley.records import TASK_SETTINGS, TaskResult, VolleyTask

__all__ = [
    "EVAL_KEY", "EvalPlan", "EvalRecord", "arm_config", "eval_volley_options", "is_eval",
    "plan_eval",
]

#: Where a volley's stored settings keep what the eval is.
EVAL_KEY = "eval"


@dataclass(frozen=True)
class EvalPlan:
    """The volley an eval is: its tasks, its documents, and what the journal keeps of it."""

    tasks: list[VolleyTask]
    documents: list[str]
    spec: dict[str, Any]


def arm_config(config: RunConfig, arm: Arm) -> RunConfig:
    """The run settings ``arm``'s tasks run with (SettingError naming the arm's bad one)."""
    try:
        return dataclasses.replace(config, **arm.settings).validate()
    except SettingError as exc:
        raise SettingError(f"--arm {arm.name}: {exc.template}") from None


def plan_eval(items: Sequence[EvalItem], arms: Sequence[Arm], *, config: RunConfig,
              prices: PriceTable, dataset: str, options: EvalOptions,
              judge_prompt: str | None) -> EvalPlan:
    """The volley of ``items`` × ``arms`` (UsageError before anything is stored)."""
    names = [arm.name for arm in arms]
    if len(set(names)) != len(names):
        raise UsageError(f"two arms share a name ({', '.join(names)}): name each one")
    configs = [arm_config(config, arm) for arm in arms]
    # A model without a price under --max-cost is refused now, not when the volley runs.
    make_budget(config, prices, models=[m for c in configs
                                        for m in (c.model, c.effective_sub_model)])
    documents: list[str] = []
    tasks: list[VolleyTask] = []
    records = []
    for item in items:
        positions = tuple(range(len(documents), len(documents) + len(item.context)))
        documents.extend(item.context)
        indices = []
        for arm, arm_settings in zip(arms, configs, strict=True):
            tasks.append(_task(len(tasks) + 1, item, positions, arm, arm_settings, prices))
            indices.append(len(tasks))
        records.append({**item.record(), "tasks": indices})
    spec = {
        "dataset": dataset,
        "arms": [arm.record() for arm in arms],
        "items": records,
        "options": {**dataclasses.asdict(options), "tiers": list(options.tiers),
                    "judge_prompt": judge_prompt},
    }
    return EvalPlan(tasks, documents, spec)


def _task(index: int, item: EvalItem, positions: tuple[int, ...], arm: Arm,
          config: RunConfig, prices: PriceTable) -> VolleyTask:
    own = {k: v for k, v in arm.settings.items() if k in TASK_SETTINGS}
    if arm.kind == "direct" and "context_window" not in own:
        price = prices.lookup(config.model)
        window = config.context_window or (price.context_window if price else None)
        if window is not None:
            own["context_window"] = window
    return VolleyTask(
        index=index, prompt=item.question, timeout=arm.settings.get("timeout"),
        model=arm.settings.get("model"), max_tokens=arm.settings.get("max_tokens"),
        context=positions, mode="completion" if arm.kind == "direct" else "rlm",
        settings=own or None, group=arm.name, group_max_cost=arm.max_cost,
    )


def eval_volley_options(options: VolleyOptions, arms: Sequence[Arm]) -> VolleyOptions:
    """The volley options an eval runs with: a volley of mode ``rlm`` when an arm is an RLM
    (its tasks' sandboxes are the volley's; direct tasks say ``completion`` themselves), and
    no cache warm-up (no context is shared by all tasks)."""
    mode: VolleyMode = "rlm" if any(arm.kind == "rlm" for arm in arms) else "completion"
    return dataclasses.replace(options, mode=mode, cache_warm=False)


def is_eval(settings: Mapping[str, Any]) -> bool:
    """Whether a volley's stored settings are an eval's."""
    return isinstance(settings.get(EVAL_KEY), dict)


@dataclass(frozen=True)
class EvalRecord:
    """An eval read back: what it is, and the verdicts its tasks have so far."""

    eval_id: str
    created_at: float
    dataset: str
    arms: list[Arm]
    items: list[dict[str, Any]]
    options: dict[str, Any]
    results: dict[int, TaskResult]
    settings: dict[str, Any]  # the volley's run settings, as stored

    @classmethod
    def from_stored(cls, stored: StoredVolley) -> EvalRecord:
        spec = stored.settings.get(EVAL_KEY)
        if not isinstance(spec, dict):
            raise UsageError(f"volley {stored.volley_id} is not an eval (see `rlm volley show "
                             f"{stored.volley_id}`)")
        return cls(
            eval_id=stored.volley_id, created_at=stored.row.created_at,
            dataset=str(spec.get("dataset", "")),
            arms=[Arm.from_record(a) for a in spec.get("arms", [])],
            items=list(spec.get("items", [])), options=dict(spec.get("options", {})),
            results={r.index: r for r in stored.earlier},
            settings=dict(stored.settings.get("config", {})),
        )
