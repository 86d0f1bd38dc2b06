"""A volley worker among others, in virtual time: its share of the limits, a claim handed twice.

Providers and task sources are in-process fakes given to :class:`Volley`'s
constructor; trio's autojump clock makes every latency exact.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from rlm import RLM
from rlm.errors import RateLimitError
from rlm.journal import JournalStore, Owner, open_store
from rlm.journal.records import local_host
from rlm.journal.worker import JournalWorker
from rlm.providers.base import Completion, CompletionRequest
from rlm.volley import MemoryStore, TaskResult, Volley, VolleyResult, VolleyTask, number_tasks

Clock = trio.abc.Clock


class Counting:
    """Answers after ``latency`` seconds and records the most requests in flight at once."""

    name = "counting"

    def __init__(self, latency: float = 1.0) -> None:
        self.latency = latency
        self.in_flight = 0
        self.peak = 0
        self.prompts: list[str] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        self.prompts.append(request.messages[-1]["content"])
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await trio.sleep(self.latency)
        finally:
            self.in_flight -= 1
        return Completion(text="ok", model=request.model, input_tokens=10, output_tokens=2)

    async def aclose(self) -> None:
        return None


def _volley(provider: Counting, tasks: list[VolleyTask], **kwargs: object) -> Volley:
    config = RLM(providers={"root": provider, "sub": provider}, model="fixture",
                 max_concurrent=8).config
    return Volley(config, tasks, providers={"root": provider, "sub": provider},
                  **kwargs)  # type: ignore[arg-type]


async def test_a_share_given_before_the_run_holds_from_the_first_request(
    autojump_clock: Clock,
) -> None:
    # A worker learns how many workers share the journal's --max-concurrent when
    # it registers, before its gate exists; the share must not wait for the gate.
    provider = Counting()
    run = _volley(provider, number_tasks([f"task {i}" for i in range(16)]))
    run.share_limits(2)
    result = await run.run()
    assert result.summary.succeeded == 16
    assert provider.peak == 4  # 8 for the journal, two workers


async def test_a_task_claimed_again_while_it_runs_is_not_run_twice(autojump_clock: Clock) -> None:
    # A worker paused past --stale-timeout has its claims reopened; it may then
    # claim a task it is still running.  That claim must not start a second run
    # (nor crash the worker: two runs of one task share one bookkeeping slot).
    tasks = number_tasks(["a", "b"])

    class Reclaimed(MemoryStore):
        """Hands "a", then "a" again half-way through its run (reopened), then "b"."""

        def __init__(self) -> None:
            super().__init__(tasks)
            self.script = [(0.0, tasks[0]), (0.5, tasks[0]), (0.0, tasks[1])]
            self.lock = trio.Lock()
            self.handed: list[int] = []

        async def claim(self) -> VolleyTask | None:
            async with self.lock:
                if not self.script:
                    return None
                delay, task = self.script.pop(0)
                await trio.sleep(delay)
                self.handed.append(task.index)
                return task

    store = Reclaimed()
    kept: list[int] = []
    keep: Callable[[TaskResult], None] = lambda r: kept.append(r.index)  # noqa: E731
    provider = Counting(latency=1.0)
    result = await _volley(provider, tasks, source=store, sink=store, on_result=keep).run()
    assert store.handed.count(1) == 2
    assert provider.prompts.count("a") == 1
    assert sorted(kept) == [1, 2]
    assert [t.status for t in result.tasks] == ["succeeded", "succeeded"]


async def test_an_interrupt_ends_a_claim_waiting_for_other_workers(autojump_clock: Clock) -> None:
    # Nothing is open but other workers hold tasks: the claim waits for them (up to
    # --stale-timeout).  Ctrl-C must end that wait, not the other workers' tasks.
    tasks = number_tasks(["a", "b", "c"])

    class HeldElsewhere(MemoryStore):
        """Hands "a"; "b" and "c" are held by another worker that never finishes."""

        def __init__(self) -> None:
            super().__init__(tasks[:1])
            self.forever = trio.Event()

        async def claim(self) -> VolleyTask | None:
            task = await super().claim()
            if task is None:
                await self.forever.wait()
            return task

    store = HeldElsewhere()
    run = _volley(Counting(latency=1.0), tasks, source=store, sink=store)
    with trio.fail_after(600):  # virtual seconds: a wait that never ends fails the test
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run.run)
            await trio.sleep(5.0)
            run.interrupt()
    assert store.results[1].status == "succeeded"
    assert trio.current_time() < 10


# -- a hidden concurrency cap behind the journal's shared limits ------------------------


class HiddenCap(Counting):
    """Serves ``cap`` requests at once and refuses more on arrival (429 with
    ``retry-after``), as the fixture server's ``--max-concurrent`` does."""

    name = "hidden-cap"

    def __init__(self, cap: int, latency: float, retry_after: float = 1.0) -> None:
        super().__init__(latency)
        self.cap, self.retry_after = cap, retry_after
        self.requests = self.refused = 0
        self.last_answer = 0.0  # when the last request was answered

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests += 1
        if self.in_flight >= self.cap:
            self.refused += 1
            raise RateLimitError(f"more than {self.cap} requests in flight", status=429,
                                 retryable=True, retry_after=self.retry_after)
        completion = await super().complete(request)
        self.last_answer = trio.current_time()
        return completion


def transaction(fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
    """A store call for the worker that takes 10 ms of virtual time (never free)."""

    async def run() -> Any:
        await trio.sleep(0.01)
        return fn(*args)

    return run()


async def work_on_journal(store: JournalStore, tasks: list[VolleyTask], provider: HiddenCap,
                          name: str) -> VolleyResult:
    """One worker as ``rlm volley work`` runs it: the journal's claims and verdicts, its
    share of the journal's limits counted before the first claim and every second."""
    worker = JournalWorker(store, "v", owner=Owner(local_host(), 1, name), run_sync=transaction,
                           alive=lambda pid, started: True)
    config = RLM(providers={"root": provider, "sub": provider}, model="fixture",
                 max_concurrent=16).config
    run = Volley(config, tasks, providers={"root": provider, "sub": provider}, volley_id="v",
                 source=worker, sink=worker)
    worker.know(tasks)
    worker.on_workers = run.share_limits
    worker.capacity = lambda: run.concurrency

    def count_live() -> None:
        run.share_limits(store.live_workers("v", worker.stale_timeout))

    async def share_every_second() -> None:
        while True:
            await trio.sleep(1.0)
            count_live()

    async with worker.running(), trio.open_nursery() as nursery:
        count_live()
        nursery.start_soon(share_every_second)
        result = await run.run()
        nursery.cancel_scope.cancel()
    return result


@pytest.mark.parametrize("workers", [1, 2])
async def test_the_journal_share_never_undoes_a_cut_behind_a_hidden_cap(
    autojump_clock: Clock, tmp_path: Path, workers: int
) -> None:
    # 16 configured, 3 taken: the adaptive cut must hold while the journal recounts
    # the live workers every second (each recount used to put the limit back to 16).
    tasks = number_tasks([f"task {i}" for i in range(200)])
    provider = HiddenCap(cap=3, latency=0.2)
    store = open_store(str(tmp_path / "j.sqlite3"), clock=trio.current_time)
    store.create_volley("v", {}, [task.to_dict() for task in tasks])
    results: list[VolleyResult] = []

    async def work(name: str) -> None:
        results.append(await work_on_journal(store, tasks, provider, name))

    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        for name in "ab"[:workers]:
            # Two processes started together still register one after the other: the
            # first counts itself alone and sends its whole 16 before the second's 8.
            nursery.start_soon(work, name)
            await trio.sleep(0.05)
    # Until the last answer: a worker that runs out of tasks before the other then
    # waits (polling the journal) for the other's to end, which the provider never sees.
    makespan = provider.last_answer - started
    rows = store.tasks("v")
    store.close()
    assert [r.status for r in rows] == ["done"] * 200  # every task succeeded
    assert provider.peak == 3
    assert provider.refused <= 0.15 * provider.requests, (provider.refused, provider.requests)
    assert makespan <= 1.3 * 200 * 0.2 / 3, makespan
