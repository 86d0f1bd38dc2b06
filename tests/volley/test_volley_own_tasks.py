"""Tasks that carry what they need: their own documents, mode, settings and group cap.

An eval is one volley of such tasks (an item's context under one arm), so any worker
runs each as it was made.  In process, with the fixture model and real sandboxes.
"""

from __future__ import annotations

import pytest

from rlm import RunConfig
from rlm._config import VolleyOptions
from rlm._traffic.prices import ModelPrice, PriceTable
from rlm.errors import UsageError
from rlm.providers.base import Completion, CompletionRequest
from rlm.providers.fixture import FixtureProvider
from rlm.volley.engine import Volley
from rlm.volley.layout import ContextTooLong, fit_window
from rlm.volley.records import TaskResult, VolleyTask, check_task_settings

DOCS = ["The magic number is 1111111.", "The magic number is 2222222.",
        "filler " * 2_000 + "The magic number is 3333333."]
QUESTION = "What is the magic number?"


class Recording(FixtureProvider):
    """The fixture model, keeping every request it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[CompletionRequest] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        self.sent.append(request)
        return await super().complete(request)


async def run(tasks: list[VolleyTask], *, window: int | None = None, rlm: bool = False,
              prices: PriceTable | None = None) -> tuple[list[TaskResult], Recording]:
    model = Recording()
    options = VolleyOptions(window=window, mode="rlm" if rlm else "completion")
    volley = Volley(RunConfig(provider="fixture", max_concurrent=4), tasks, context=DOCS,
                    options=options, providers={"root": model, "sub": model}, prices=prices)
    result = await volley.run()
    return list(result.tasks), model


def test_a_tasks_own_fields_round_trip_and_a_plain_task_stays_small() -> None:
    own = VolleyTask(3, "q", context=(0, 2), mode="rlm", settings={"max_depth": 2},
                     group="d2", group_max_cost=0.5)
    assert VolleyTask.from_dict(own.to_dict()) == own
    assert set(VolleyTask(1, "q").to_dict()) == {"index", "prompt", "timeout", "model",
                                                 "max_tokens"}
    with pytest.raises(UsageError, match="provider cannot differ between tasks"):
        check_task_settings({"provider": "openai", "max_depth": 2}, "arm x")


async def test_each_task_reads_its_own_documents_in_its_own_mode() -> None:
    tasks = [
        VolleyTask(1, QUESTION, context=(0,), mode="completion"),
        VolleyTask(2, QUESTION, context=(1,), settings={"max_iterations": 3}),
        VolleyTask(3, QUESTION, context=(2,), mode="completion"),
        VolleyTask(4, QUESTION, context=(2,), mode="rlm"),
    ]
    results, model = await run(tasks, rlm=True)
    assert [r.output for r in results] == ["1111111", "2222222", "3333333", "3333333"]
    assert [r.status for r in results] == ["succeeded"] * 4
    # A completion task is one request with only its documents; an rlm task is a call.
    assert [r.calls for r in results][0::2] == [1, 1]
    assert results[1].calls > 1 and results[3].calls > 1
    one = next(r for r in model.sent if r.task == 1)
    assert "1111111" in str(one.messages) and "2222222" not in str(one.messages)
    assert all(r.error_kind is None for r in results)


async def test_a_completion_too_long_for_its_window_fails_having_sent_nothing() -> None:
    tasks = [VolleyTask(1, QUESTION, context=(2,), settings={"context_window": 1_000}),
             VolleyTask(2, QUESTION, context=(0,), settings={"context_window": 1_000})]
    results, model = await run(tasks)
    assert results[0].status == "failed" and results[0].error_kind == "context_window"
    assert "never cut" in (results[0].error or "") and results[0].calls == 0
    assert results[1].output == "1111111"
    assert [r.task for r in model.sent] == [2]
    # The prompt fits and the default cap (4,096) does not: the cap is lowered to the room
    # the prompt leaves, as servers count it in the window.
    sent = model.sent[0]
    prompt = sum(len(m["content"]) for m in sent.messages) // 4
    assert sent.max_tokens == 1_000 - prompt


def test_a_cap_that_fits_the_window_is_sent_as_it_is() -> None:
    request = CompletionRequest(messages=[{"role": "user", "content": "x" * 400}], model="m",
                                max_tokens=50)
    assert fit_window(request, 1_000) is request
    assert fit_window(request, 120).max_tokens == 20
    with pytest.raises(ContextTooLong):
        fit_window(request, 100)


async def test_a_group_past_its_cap_starts_no_more_tasks() -> None:
    prices = PriceTable({"fixture": ModelPrice(1e-3, 1e-3, 1e-3)})
    tasks = [VolleyTask(i, QUESTION, context=(0,), group="a", group_max_cost=0.001)
             for i in (1, 2, 3)] + [VolleyTask(4, QUESTION, context=(0,), group="b")]
    results, model = await run(tasks, window=1, prices=prices)
    assert [r.status for r in results] == ["succeeded", "failed", "failed", "succeeded"]
    assert results[0].cost is not None and results[0].cost > 0.001
    assert {r.error_kind for r in results[1:3]} == {"budget"}
    assert "its max cost $0.001 is spent" in (results[1].error or "")
    assert sorted(r.task for r in model.sent if r.task is not None) == [1, 4]


async def test_an_rlm_task_in_a_volley_of_completions_fails_saying_why() -> None:
    results, model = await run([VolleyTask(1, QUESTION, context=(0,), mode="rlm")])
    assert results[0].status == "failed" and "make the volley with mode rlm" in (
        results[0].error or "")
    assert model.sent == []
