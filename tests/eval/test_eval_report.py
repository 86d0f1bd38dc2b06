"""Reports from verdicts: scores, failures by kind, pending items, tiers, the same every time."""

from __future__ import annotations

from rlm.eval.arms import Arm
from rlm.eval.plan import EvalRecord
from rlm.eval.render import report_lines, report_text
from rlm.eval.report import build_report, outcomes
from rlm.eval.scorers import Score
from rlm.volley.records import TaskResult


def record(results: list[TaskResult], *, scorer: str | None = None) -> EvalRecord:
    items = [{"id": f"i{n}", "question": "Q?", "answers": [str(n)], "tier": tier,
              "context_chars": 1_000 if tier == "2k" else 10_000, "scorer": scorer,
              "tasks": [2 * n + 1, 2 * n + 2]}
             for n, tier in enumerate(["2k", "2k", "20k", "20k"])]
    return EvalRecord("vE", 0.0, "data.jsonl", [Arm("rlm", "rlm"), Arm("direct", "direct")],
                      items, {"seed": 1}, {r.index: r for r in results},
                      {"provider": "fixture", "model": "fixture"})


def ok(index: int, output: str, cost: float = 0.01, seconds: float = 1.0) -> TaskResult:
    return TaskResult(index, "Q?", "succeeded", seconds, 100, 10, cost=cost, output=output,
                      calls=3)


def failed(index: int, kind: str) -> TaskResult:
    return TaskResult(index, "Q?", "failed", 0.5, error=f"it {kind}", error_kind=kind, cost=0.0)


RESULTS = [ok(1, "0"), ok(2, "0"), ok(3, "1"), ok(4, "wrong"), ok(5, "2"),
           failed(6, "context_window"), ok(7, "3", seconds=3.0)]  # task 8: never ran


def test_scores_failures_and_pending_items_per_arm_and_tier() -> None:
    found = outcomes(record(RESULTS), scorer="exact")
    report = build_report(record(RESULTS), found, scoring={"scorer": "exact"})
    rlm, direct = report.arms
    assert (rlm["accuracy"], rlm["finished"], rlm["pending"]) == (1.0, 4, 0)
    assert direct["finished"] == 3 and direct["pending"] == 1 and not report.complete
    assert direct["accuracy"] == round(1 / 3, 6)  # right, wrong, and a failure scoring 0
    assert direct["failures"] == {"context_window": 1}
    assert rlm["cost_total"] == 0.04 and rlm["calls_total"] == 12 and rlm["calls_mean"] == 3.0
    assert rlm["latency_p50"] == 1.0 and rlm["latency_p95"] == 2.7
    assert [t["tier"] for t in rlm["tiers"]] == ["2k", "20k"]
    assert [t["accuracy"] for t in direct["tiers"]] == [0.5, 0.0]
    assert report.to_dict()["status"] == "incomplete"


def test_the_same_verdicts_give_the_same_report() -> None:
    first = build_report(record(RESULTS), outcomes(record(RESULTS), scorer="exact"),
                         scoring={"scorer": "exact"})
    again = build_report(record(list(reversed(RESULTS))),
                         outcomes(record(RESULTS), scorer="exact"), scoring={"scorer": "exact"})
    assert first.to_dict() == again.to_dict()


def test_a_scorer_error_leaves_the_item_out_of_accuracy_and_counts_it() -> None:
    results = [ok(1, "0"), ok(3, "1"), ok(5, "2"), ok(7, "3")]
    found = outcomes(record(results, scorer="regex"), scorer="exact")
    assert all(o.state == "scored" for o in found if o.arm == "rlm")
    judged = {("i0", "rlm"): Score(1.0), ("i1", "rlm"): Score(None, "the judge failed: 500")}
    found = outcomes(record(results, scorer="judge"), scorer="exact", judged=judged)
    report = build_report(record(results), found, scoring={"scorer": "judge"})
    rlm = report.arms[0]
    assert rlm["unscored"] == 3 and rlm["failures"] == {"scorer": 3}
    assert rlm["accuracy"] == 1.0  # of the one item judged
    assert next(o for o in found if o.item == "i1" and o.arm == "rlm").error == (
        "the judge failed: 500")


def test_text_and_json_lines_show_the_same_report() -> None:
    report = build_report(record(RESULTS), outcomes(record(RESULTS), scorer="exact"),
                          scoring={"scorer": "exact"})
    text = report_text(report)
    assert "rlm     1.000" in text and "context_window 1" in text and "direct 1 pending" in text
    assert "accuracy by context size" in text
    lines = list(report_lines(report))
    assert lines[0].startswith('{"type": "eval"') and len(lines) == 1 + 8 + 2


def test_the_heading_counts_one_arm_and_one_item_in_the_singular() -> None:
    one = EvalRecord("vE", 0.0, "data.jsonl", [Arm("rlm", "rlm")],
                     [{"id": "i0", "question": "Q?", "answers": ["0"], "tier": "2k",
                       "tasks": [1]}], {"seed": 1}, {1: ok(1, "0")}, {})
    text = report_text(build_report(one, outcomes(one, scorer="exact"),
                                    scoring={"scorer": "exact"}))
    assert "data.jsonl · 1 item × 1 arm ·" in text.splitlines()[0]


def test_latency_leaves_out_a_task_refused_before_it_sent_anything() -> None:
    refused = TaskResult(2, "Q?", "failed", 0.001, error="too long", cost=0.0,
                         error_kind="context_window")
    timed_out = TaskResult(4, "Q?", "failed", 9.0, error="timeout", error_kind="timeout",
                           calls=1)
    results = [ok(1, "0"), refused, ok(3, "1"), timed_out, ok(6, "2", seconds=2.0)]
    direct = build_report(record(results), outcomes(record(results), scorer="exact"),
                          scoring={"scorer": "exact"}).arms[1]
    assert direct["finished"] == 3 and direct["failures"] == {"context_window": 1, "timeout": 1}
    assert (direct["latency_p50"], direct["latency_p95"]) == (5.5, 8.65)  # of 2 s and 9 s
