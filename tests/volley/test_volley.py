"""Volleys in virtual time: order, shared prefix, warm-up, cached tokens, stops and failures.

Providers are in-process fakes handed to ``RLM(providers=...)``; trio's
autojump clock makes every latency exact.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from rlm import RLM
from rlm.errors import AuthenticationError, ProviderError, ProviderStatusError
from rlm.providers.base import Completion, CompletionRequest
from rlm.providers.fixture import PrefixCache
from rlm.volley import TaskResult, VolleyResult

Clock = trio.abc.Clock
BIG = "the magic number is 7. " * 400  # ~9,200 chars: long enough to be cached


class VolleyFake:
    """Answers ``answer: <task>`` after ``latency(task)``; ``fail(task, attempt)`` may raise."""

    name = "fake"

    def __init__(
        self,
        latency: Callable[[str], float] = lambda task: 1.0,
        fail: Callable[[str, int], ProviderError | None] = lambda task, n: None,
    ) -> None:
        self.latency = latency
        self.fail = fail
        self.cache = PrefixCache()
        self.requests: list[tuple[float, CompletionRequest]] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        task = request.messages[-1]["content"]
        self.requests.append((trio.current_time(), request))
        attempt = sum(1 for _, r in self.requests if r.messages[-1]["content"] == task)
        error = self.fail(task, attempt)
        if error is not None:
            raise error
        cached = self.cache.lookup(request.messages)
        await trio.sleep(self.latency(task))
        self.cache.write(request.messages)
        chars = sum(len(m["content"]) for m in request.messages)
        return Completion(
            text=f"answer: {task}",
            model=request.model,
            input_tokens=chars // 4,
            output_tokens=5,
            metadata={"cached_tokens": cached} if cached else {},
        )

    async def aclose(self) -> None:
        return None

    def start_times(self) -> dict[str, float]:
        return {r.messages[-1]["content"]: t for t, r in self.requests}


def model(fake: VolleyFake, **settings: Any) -> RLM:
    settings.setdefault("model", "fixture")
    return RLM(providers={"root": fake, "sub": fake}, **settings)


def outputs(result: VolleyResult) -> list[str | None]:
    return [t.output for t in result.tasks]


async def test_results_come_in_task_order_whatever_order_tasks_finish(
    autojump_clock: Clock,
) -> None:
    latencies = {"a": 3.0, "b": 1.0, "c": 2.0, "d": 0.5}
    fake = VolleyFake(latency=latencies.__getitem__)
    seen: list[int] = []
    result = await model(fake, max_concurrent=4).avolley(
        list(latencies), on_result=lambda r: seen.append(r.index)
    )
    assert outputs(result) == ["answer: a", "answer: b", "answer: c", "answer: d"]
    assert [t.index for t in result.tasks] == [1, 2, 3, 4]
    assert seen == [4, 2, 3, 1]  # completion order
    assert result.status == "succeeded" and result.exit_code == 0
    assert result.summary.duration_sec == pytest.approx(3.0)
    assert result.summary.max_concurrent_used == 4


async def test_iter_volley_yields_results_in_completion_order(autojump_clock: Clock) -> None:
    fake = VolleyFake(latency={"slow": 2.0, "fast": 1.0}.__getitem__)
    got: list[tuple[str, float]] = []
    async with model(fake).iter_volley(["slow", "fast"]) as results:
        async for item in results:
            got.append((item.prompt, trio.current_time()))
    assert [prompt for prompt, _ in got] == ["fast", "slow"]
    assert [at for _, at in got] == pytest.approx([1.0, 2.0])
    assert results.result is not None and outputs(results.result)[0] == "answer: slow"


async def test_every_request_starts_with_the_same_shared_prefix(autojump_clock: Clock) -> None:
    fake = VolleyFake()
    await model(fake, max_concurrent=8).avolley(["one", "two", "three"], ["doc A", "doc B"])
    requests = [r for _, r in fake.requests]
    prefixes = {repr(r.messages[:-1]) for r in requests}
    assert len(prefixes) == 1  # byte-identical shared part
    first = requests[0].messages
    assert first[0]["role"] == "system" and "one task of a volley" in first[0]["content"]
    assert first[1]["content"].index("doc A") < first[1]["content"].index("doc B")
    # Requests granted permits at the same instant go out in any order.
    assert sorted(r.messages[-1]["content"] for r in requests) == ["one", "three", "two"]
    assert all(r.messages[-1]["role"] == "user" for r in requests)


async def test_warm_up_sends_the_first_task_alone_then_fans_out(autojump_clock: Clock) -> None:
    fake = VolleyFake(latency=lambda task: 2.0)
    tasks = [f"task {i}" for i in range(1, 7)]
    result = await model(fake, max_concurrent=8).avolley(tasks, BIG)
    starts = fake.start_times()
    assert starts["task 1"] == pytest.approx(0.0)
    assert all(starts[t] == pytest.approx(2.0) for t in tasks[1:])  # after the first response
    prefix_tokens = len(BIG) // 4
    cached = [t.tokens_cached for t in result.tasks]
    assert cached[0] == 0 and all(c >= prefix_tokens for c in cached[1:])
    assert result.summary.tokens_cached == sum(cached)
    assert result.summary.duration_sec == pytest.approx(4.0)


async def test_without_warm_up_the_first_wave_misses_the_cache(autojump_clock: Clock) -> None:
    fake = VolleyFake(latency=lambda task: 2.0)
    tasks = [f"task {i}" for i in range(1, 7)]
    result = await model(fake, max_concurrent=8).avolley(tasks, BIG, cache_warm=False)
    assert set(fake.start_times().values()) == {0.0}
    assert result.summary.tokens_cached == 0
    assert result.summary.duration_sec == pytest.approx(2.0)


async def test_small_contexts_are_not_warmed(autojump_clock: Clock) -> None:
    fake = VolleyFake(latency=lambda task: 1.0)
    await model(fake).avolley(["a", "b", "c"], "short context")
    assert set(fake.start_times().values()) == {0.0}


async def test_cached_tokens_are_priced_at_the_cached_rate(
    autojump_clock: Clock, tmp_path: Path
) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text('{"m": {"input": 1e-6, "output": 2e-6, "cached_input": 1e-7}}')
    fake = VolleyFake()
    result = await model(fake, model="m", prices_path=str(prices)).avolley(["x", "y"], BIG)
    first, second = result.tasks
    assert first.tokens_cached == 0 and second.tokens_cached > 0
    assert first.cost == pytest.approx(first.tokens_input * 1e-6 + 5 * 2e-6)
    uncached = second.tokens_input - second.tokens_cached
    assert second.cost == pytest.approx(uncached * 1e-6 + second.tokens_cached * 1e-7 + 5 * 2e-6)
    assert first.cost is not None and second.cost is not None  # priced
    assert result.summary.total_cost == pytest.approx(first.cost + second.cost)


async def test_refused_credentials_stop_everything_at_once(autojump_clock: Clock) -> None:
    def fail(task: str, attempt: int) -> ProviderError | None:
        if task == "task 3":
            return AuthenticationError("401", status=401)
        return None

    fake = VolleyFake(latency=lambda task: 5.0, fail=fail)
    tasks = [f"task {i}" for i in range(1, 11)]
    result = await model(fake, max_concurrent=3).avolley(tasks)
    assert result.status == "credentials_refused" and result.exit_code == 4
    # Only the first wave (tasks 1-3 hold the permits) can have been sent, and nothing
    # after the 401: tasks 1 and 2 were cancelled in flight, or before they were sent.
    sent = [r.messages[-1]["content"] for _, r in fake.requests]
    assert sent[-1] == "task 3" and set(sent) <= {"task 1", "task 2", "task 3"}
    assert result.summary.duration_sec == pytest.approx(0.0)  # in-flight ones were cancelled
    statuses = [t.status for t in result.tasks]
    assert statuses[2] == "failed" and statuses.count("cancelled") == 9
    assert {t.error for t in result.tasks[3:]} == {"not started"}


async def test_a_permanently_failing_task_fails_alone(autojump_clock: Clock) -> None:
    def fail(task: str, attempt: int) -> ProviderError | None:
        if task == "bad":
            return ProviderStatusError("500 boom", status=500, retryable=True)
        return None

    fake = VolleyFake(fail=fail)
    result = await model(fake, max_retries=2, retry_delay=0.5).avolley(["ok 1", "bad", "ok 2"])
    assert [t.status for t in result.tasks] == ["succeeded", "failed", "succeeded"]
    bad = result.tasks[1]
    assert bad.retries == 2 and "500 boom" in (bad.error or "")
    assert sum(1 for _, r in fake.requests if r.messages[-1]["content"] == "bad") == 3
    assert result.status == "failed" and result.exit_code == 1
    assert result.summary.total_retries == 2


async def test_a_budget_wall_stops_new_tasks_and_keeps_what_completed(
    autojump_clock: Clock,
) -> None:
    fake = VolleyFake()
    tasks = [f"task {i}" for i in range(1, 11)]
    result = await model(fake, max_concurrent=2, max_llm_calls=5).avolley(tasks)
    assert len(fake.requests) == 5  # the wall is exact
    assert result.status == "budget_exceeded" and result.exit_code == 3
    # Tasks granted permits at the same instant may reserve in either order: which
    # task gets the last call is not fixed, that exactly 5 ran and 5 never started is.
    statuses = [t.status for t in result.tasks]
    assert statuses[:4] == ["succeeded"] * 4 and statuses.count("succeeded") == 5
    assert {t.error for t in result.tasks if t.status == "cancelled"} == {"not started"}
    assert "max_llm_calls=5" in (result.error or "")
    assert result.summary.succeeded == 5 and result.summary.cancelled == 5


async def test_a_task_timeout_fails_that_task_only(autojump_clock: Clock) -> None:
    fake = VolleyFake(latency={"slow": 60.0, "quick": 1.0}.__getitem__)
    tasks: list[str | dict[str, object]] = [{"prompt": "slow", "timeout": "5s"}, "quick"]
    result = await model(fake).avolley(tasks, timeout=30)
    slow, quick = result.tasks
    assert slow.status == "failed" and slow.error == "timed out after 5s"
    assert slow.duration_sec == pytest.approx(5.0)
    assert quick.status == "succeeded"


async def test_interrupt_keeps_completed_results_and_cancels_the_rest(
    autojump_clock: Clock,
) -> None:
    fake = VolleyFake(latency=lambda task: 1.0)
    rlm = model(fake, max_concurrent=2)
    result: list[VolleyResult] = []

    async def run() -> None:
        result.append(await rlm.avolley([f"task {i}" for i in range(1, 9)]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.sleep(2.5)
        rlm.interrupt()
    (got,) = result
    assert got.status == "interrupted" and got.exit_code == 130
    assert [t.status for t in got.tasks[:4]] == ["succeeded"] * 4
    assert [t.error for t in got.tasks[4:6]] == ["cancelled while running"] * 2
    assert [t.error for t in got.tasks[6:]] == ["not started"] * 2
    assert got.summary.duration_sec == pytest.approx(2.5)


async def test_results_are_reported_only_after_the_sink_accepted_them(
    autojump_clock: Clock,
) -> None:
    from rlm.volley import MemoryStore, Volley, VolleyTask, number_tasks

    tasks = number_tasks(["a", "b", "c"])

    class SlowSink(MemoryStore):
        nursery: trio.Nursery

        def keep(self, result: TaskResult, kept: Callable[[TaskResult], None]) -> None:
            async def later() -> None:
                await trio.sleep(10.0)  # a slow durable write
                MemoryStore.keep(self, result, kept)

            self.nursery.start_soon(later)

    store = SlowSink(tasks)
    reported: list[tuple[int, bool]] = []
    fake = VolleyFake(latency=lambda task: 1.0)
    rlm = model(fake)
    run = Volley(
        rlm.config,
        tasks,
        providers={"root": fake, "sub": fake},
        source=store,
        sink=store,
        on_result=lambda r: reported.append((r.index, r.index in store.results)),
    )
    async with trio.open_nursery() as nursery:
        store.nursery = nursery
        result = await run.run()
    assert sorted(reported) == [(1, True), (2, True), (3, True)]
    assert store.unclaimed() == [] and isinstance(tasks[0], VolleyTask)
    assert result.summary.duration_sec == pytest.approx(11.0)


@pytest.mark.parametrize("tasks", [[], ["", "  \n"]])
def test_a_python_volley_without_tasks_says_so_in_python_terms(tasks: list[str]) -> None:
    # It used to give the command line's advice (arguments, -f FILE, --stdin).
    from rlm.errors import UsageError

    with pytest.raises(UsageError) as raised:
        RLM(provider="fixture").volley(tasks)
    assert str(raised.value).startswith("no tasks: give a list of at least one prompt")
    assert "--stdin" not in str(raised.value)


async def test_the_window_is_never_larger_than_the_tasks(autojump_clock: Clock) -> None:
    # --max-concurrent 4096 for three tasks: a worker coroutine per slot (8,192 of them,
    # each claiming) would cost memory and time for nothing; three are enough.
    from rlm.volley import MemoryStore, Volley, number_tasks

    class CountedClaims(MemoryStore):
        claims = 0

        async def claim(self):  # type: ignore[no-untyped-def]
            self.claims += 1
            return await super().claim()

    tasks = number_tasks(["a", "b", "c"])
    store = CountedClaims(tasks)
    fake = VolleyFake(latency=lambda task: 1.0)
    run = Volley(model(fake, max_concurrent=4096).config, tasks,
                 providers={"root": fake, "sub": fake}, source=store, sink=store)
    result = await run.run()
    assert outputs(result) == ["answer: a", "answer: b", "answer: c"]
    assert store.claims <= 2 * len(tasks), store.claims  # each task, and one None per worker
    assert result.summary.duration_sec == pytest.approx(1.0)  # still all at once
