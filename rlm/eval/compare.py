"""Two evals side by side: per arm name, the accuracy of each and the paired difference.

The difference is taken over the items both evals finished (matched by item id)
under that arm, with its 95 % bootstrap interval, so two runs of the same
dataset with another model, prompt or setting are compared item by item.
"""

from __future__ import annotations

import zlib
from typing import Any

from rlm.eval.report import Outcome, Report
from rlm.eval.stats import paired_difference

__all__ = ["compare_reports"]


def compare_reports(a: Report, b: Report) -> dict[str, Any]:
    """The comparison's data (the ``--output-format json`` shape of ``rlm eval compare``)."""
    arms_a = {arm["name"]: arm for arm in a.arms}
    arms_b = {arm["name"]: arm for arm in b.arms}
    rows = []
    for name in [*arms_a, *(n for n in arms_b if n not in arms_a)]:
        left, right = arms_a.get(name), arms_b.get(name)
        row: dict[str, Any] = {"arm": name, "a": _side(left), "b": _side(right)}
        if left is not None and right is not None:
            row.update(_paired(name, a.items, b.items))
        rows.append(row)
    return {"a": a.head["eval_id"], "b": b.head["eval_id"],
            "datasets": [a.head["dataset"], b.head["dataset"]], "arms": rows}


def _side(arm: dict[str, Any] | None) -> dict[str, Any] | None:
    if arm is None:
        return None
    keys = ("arm", "items", "finished", "accuracy", "ci95", "cost_mean", "cost_total",
            "calls_mean", "latency_p50", "latency_p95")
    return {k: arm.get(k) for k in keys}


def _paired(name: str, left: list[Outcome], right: list[Outcome]) -> dict[str, Any]:
    def scored(found: list[Outcome]) -> dict[str, float]:
        return {o.item: o.score for o in found
                if o.arm == name and o.state != "pending" and o.score is not None}

    a, b = scored(left), scored(right)
    common = [item for item in a if item in b]
    diff = paired_difference([a[i] for i in common], [b[i] for i in common],
                             seed=zlib.crc32(name.encode()))
    return {"paired_items": len(common),
            "accuracy_delta": None if diff.mean is None else round(diff.mean, 6),
            "delta_ci95": diff.to_list()}
