"""``rlm eval``: does the recursive strategy pay on my data, with my model, within my budget?

An eval runs every item of a dataset (:mod:`rlm.eval.datasets`) under every *arm*
(an RLM with some settings, one direct completion, another model:
:mod:`rlm.eval.arms`) as one journaled volley, scores each output
(:mod:`rlm.eval.scorers`), and reports accuracy with its 95 % bootstrap
interval, cost, tokens, calls and latency per arm and per context-size tier
(:mod:`rlm.eval.report`), as text, JSON or one HTML page (:mod:`rlm.eval.page`).
"""

from rlm.eval.datasets import load_dataset, read_jsonl
from rlm.eval.items import EvalItem, parse_tiers, tier_label
from rlm.eval.scorers import Score, Scorer, make_scorer, score_output
from rlm.eval.stats import Interval, bootstrap_mean, percentile

__all__ = [
    "EvalItem",
    "Interval",
    "Score",
    "Scorer",
    "bootstrap_mean",
    "load_dataset",
    "make_scorer",
    "parse_tiers",
    "percentile",
    "read_jsonl",
    "score_output",
    "tier_label",
]
