"""Arms as written on the command line, and an eval laid out as one volley of tasks."""

from __future__ import annotations

import pytest

from rlm._config import EvalOptions, RunConfig
from rlm._profiles import Profile
from rlm._traffic.prices import PriceTable
from rlm.errors import SettingError, UsageError
from rlm.eval.arms import Arm, default_arms, parse_arm
from rlm.eval.items import EvalItem
from rlm.eval.plan import plan_eval

VALUES = {"provider": "openai", "base_url": None, "rpm": None}
PROFILES = {"fast": Profile("fast", chosen={"model": "small", "max_depth": 2, "rpm": None}),
            "elsewhere": Profile("elsewhere", chosen={"base_url": "http://other:1/v1"}),
            "plain": Profile("plain", chosen={"mode": "completion", "max_cost": 3.0})}


def arm(text: str) -> Arm:
    return parse_arm(text, eval_values=VALUES, profiles=PROFILES.__getitem__)


def test_arms_are_a_kind_settings_or_a_profile() -> None:
    assert arm("rlm") == Arm("rlm", "rlm") and arm("direct") == Arm("direct", "direct")
    assert arm("d2=max_depth=2,sub_model=nano") == Arm("d2", "rlm", {"max_depth": 2,
                                                                     "sub_model": "nano"})
    assert arm("big=direct,model=gpt-4.1,max_cost=2,timeout=90s") == Arm(
        "big", "direct", {"model": "gpt-4.1", "timeout": 90.0}, 2.0)
    assert arm("local=profile:fast") == Arm("local", "rlm", {"model": "small", "max_depth": 2})
    assert arm("p=profile:plain") == Arm("p", "direct", {}, 3.0)
    assert [a.name for a in default_arms()] == ["rlm", "direct"]
    assert Arm.from_record(arm("d2=max_depth=2,max_cost=1").record()) == arm(
        "d2=max_depth=2,max_cost=1")


@pytest.mark.parametrize(("text", "says"), [
    ("=rlm", "name the arm first"),
    ("x=max_depth", "is not key=value"),
    ("x=max_depth=lots", "max_depth: 'lots' is not a whole number"),
    ("x=flavour=sweet", "unknown setting 'flavour'"),
    ("x=provider=anthropic", "provider is the whole eval's"),
    ("x=profile:elsewhere", "base_url is the whole eval's"),
])
def test_a_bad_arm_says_what_to_write(text: str, says: str) -> None:
    with pytest.raises(UsageError, match="--arm") as caught:
        arm(text)
    assert says in str(caught.value)


ITEMS = [EvalItem("a", "What is the magic number?", ("x" * 300_000,), ("1",), tier="200k"),
         EvalItem("b", "Q?", ("d1", "d2"), ("2",), scorer="contains", tier="2k")]


def test_an_eval_is_a_task_per_item_and_arm_each_with_its_own_documents() -> None:
    config = RunConfig(provider="fixture")
    plan = plan_eval(ITEMS, [Arm("rlm", "rlm"), Arm("direct", "direct", {"max_tokens": 50})],
                     config=config, prices=PriceTable.default(), dataset="d.jsonl",
                     options=EvalOptions(), judge_prompt=None)
    assert plan.documents == ["x" * 300_000, "d1", "d2"]
    assert [(t.index, t.context, t.mode, t.group) for t in plan.tasks] == [
        (1, (0,), "rlm", "rlm"), (2, (0,), "completion", "direct"),
        (3, (1, 2), "rlm", "rlm"), (4, (1, 2), "completion", "direct")]
    # The direct arm is held to the model's window (the price table's, for the fixture).
    assert plan.tasks[1].settings == {"context_window": 32_768}
    assert plan.tasks[1].max_tokens == 50 and plan.tasks[0].settings is None
    assert [i["tasks"] for i in plan.spec["items"]] == [[1, 2], [3, 4]]
    assert plan.spec["items"][1]["scorer"] == "contains"
    assert "context" not in plan.spec["items"][0]  # the documents are stored once


def test_an_arms_bad_value_or_an_unpriced_model_is_refused_before_anything_is_stored() -> None:
    config = RunConfig(provider="fixture", max_cost=1.0)
    for arms, says in (([Arm("deep", "rlm", {"max_depth": 99})], "--arm deep"),
                       ([Arm("x", "rlm", {"model": "mystery"})], "'mystery' has no price"),
                       ([Arm("a", "rlm"), Arm("a", "direct")], "two arms share a name")):
        with pytest.raises((SettingError, UsageError), match=says):
            plan_eval(ITEMS, arms, config=config, prices=PriceTable.default(), dataset="d",
                      options=EvalOptions(), judge_prompt=None)
