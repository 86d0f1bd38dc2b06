"""Journal workers side by side, in virtual time: how much each claims, dead neighbours.

A real SQLite journal whose clock is trio's; every store call takes 10 ms of
virtual time (a transaction is never free, and a claim's measured time is what
sizes a fast worker's claims); the model is an in-process fake given to
:class:`Volley`'s constructor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from rlm import RLM
from rlm.journal import JournalStore, Owner, Recovered, open_store
from rlm.journal.records import local_host
from rlm.journal.worker import JournalWorker
from rlm.providers.base import Completion, CompletionRequest
from rlm.volley import Volley, VolleyTask

Clock = trio.abc.Clock


@pytest.fixture
def store(tmp_path: Path) -> Iterator[JournalStore]:
    opened = open_store(str(tmp_path / "j.sqlite3"), clock=trio.current_time)
    yield opened
    opened.close()


class Sleepy:
    """Answers every request after ``latency`` seconds."""

    name = "sleepy"

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.answered: set[str] = set()

    async def complete(self, request: CompletionRequest) -> Completion:
        await trio.sleep(self.latency)
        self.answered.add(request.messages[-1]["content"])
        return Completion(text="ok", model=request.model, input_tokens=10, output_tokens=2)

    async def aclose(self) -> None:
        return None


class Transactions:
    """``run_sync`` for the worker: each store call takes 10 ms; claim sizes are recorded."""

    def __init__(self) -> None:
        self.claimed: list[int] = []

    async def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        await trio.sleep(0.01)
        result = fn(*args)
        if fn.__name__ in ("claim_indices", "claim_specs") and result:
            self.claimed.append(len(result))
        return result


def _tasks(n: int) -> list[VolleyTask]:
    return [VolleyTask(i, f"t{i}") for i in range(1, n + 1)]


def _create(store: JournalStore, tasks: list[VolleyTask]) -> None:
    store.create_volley("v", {}, [task.to_dict() for task in tasks])


def _worker_volley(
    store: JournalStore, tasks: list[VolleyTask], name: str, latency: float | Sleepy, *,
    max_concurrent: int = 16, alive: Callable[[int, int | None], bool] = lambda pid, started: True,
) -> tuple[JournalWorker, Volley, Transactions]:
    """A worker as `rlm volley work` makes one: it holds what its share runs soon."""
    calls = Transactions()
    worker = JournalWorker(
        store, "v", owner=Owner(local_host(), 1, name), run_sync=calls, alive=alive
    )
    provider = latency if isinstance(latency, Sleepy) else Sleepy(latency)
    config = RLM(providers={"root": provider, "sub": provider}, model="fixture",
                 max_concurrent=max_concurrent).config
    run = Volley(config, tasks, providers={"root": provider, "sub": provider}, volley_id="v",
                 source=worker, sink=worker)
    worker.know(tasks)
    worker.capacity = lambda: run.concurrency
    return worker, run, calls


async def _work(worker: JournalWorker, run: Volley, workers: Callable[[], int]) -> None:
    """Run the volley under the worker, its share following ``workers()`` every second."""
    async with worker.running(), trio.open_nursery() as nursery:

        async def share() -> None:
            while True:
                run.share_limits(workers())
                await trio.sleep(1.0)

        nursery.start_soon(share)
        await run.run()
        nursery.cancel_scope.cancel()


async def test_workers_that_join_a_slow_volley_late_find_tasks_open(
    autojump_clock: Clock, store: JournalStore
) -> None:
    # 96 one-second tasks at a journal limit of 16: the first worker runs alone for
    # half a second, then two more join and each runs at 16 // 3.  Claiming more than
    # its share runs soon, the first one would keep the others idle and finish alone.
    tasks = _tasks(96)
    _create(store, tasks)
    live = [1]
    pool = [_worker_volley(store, tasks, name, 1.0) for name in "abc"]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_work, pool[0][0], pool[0][1], lambda: live[0])
        await trio.sleep(0.5)
        live[0] = 3
        for worker, run, _ in pool[1:]:
            nursery.start_soon(_work, worker, run, lambda: live[0])
    split = [worker.accepted for worker, _, _ in pool]
    assert sum(split) == 96 and all(r.status == "done" for r in store.tasks("v"))
    assert min(split) >= 24, split  # an even split is 32 each
    # 16 tasks in the first second, then 15 a second: the last ends in the 7th second.
    assert trio.current_time() < 8.0


async def test_a_fast_worker_still_claims_far_more_than_its_share(
    autojump_clock: Clock, store: JournalStore
) -> None:
    # Tasks that take 1 ms at a limit of 4: the share alone would be a claim (10 ms)
    # for every 6 tasks, and the volley would wait on its claims.
    tasks = _tasks(2000)
    _create(store, tasks)
    worker, run, calls = _worker_volley(store, tasks, "a", 0.001, max_concurrent=4)
    await _work(worker, run, lambda: 1)
    assert worker.accepted == 2000
    assert max(calls.claimed) >= 100, calls.claimed
    assert len(calls.claimed) <= 40, calls.claimed


async def test_a_running_worker_reopens_a_dead_neighbours_claims_without_waiting(
    autojump_clock: Clock, store: JournalStore
) -> None:
    # Another worker process of this host claims tasks and is killed -9 after this
    # worker started (so its start-up recovery did not see it).  Once nothing is
    # open, this worker finds the holder gone and takes its tasks at once, not after
    # --stale-timeout (10 min).
    tasks = _tasks(20)
    _create(store, tasks)
    dead: set[int] = set()
    worker, run, _ = _worker_volley(store, tasks, "b", 1.0, alive=lambda pid, _: pid not in dead)
    recovered: list[Recovered] = []
    worker.on_recovered = recovered.append
    victim = Owner(local_host(), 4242, "a")
    assert store.claim_indices("v", victim, 5) == [1, 2, 3, 4, 5]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_work, worker, run, lambda: 1)
        await trio.sleep(0.5)
        dead.add(4242)
    assert worker.accepted == 20
    assert sorted(found.index for found in recovered) == [1, 2, 3, 4, 5]
    assert {idx for _, _, _, idx, _ in store.log("stale_recovery")} == {1, 2, 3, 4, 5}
    assert trio.current_time() < 60  # virtual seconds: well within the stale timeout


async def test_a_worker_holds_no_more_than_its_share_and_a_lookahead(
    autojump_clock: Clock, store: JournalStore
) -> None:
    tasks = _tasks(40)
    _create(store, tasks)
    model = Sleepy(1.0)
    worker, run, _ = _worker_volley(store, tasks, "a", model, max_concurrent=8)
    held: list[int] = []  # claimed, not answered yet (a verdict may wait for its group commit)

    async def watch() -> None:
        while True:
            held.append(sum(r.status == "in_progress" and f"t{r.index}" not in model.answered
                            for r in store.tasks("v")))
            await trio.sleep(0.1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        await _work(worker, run, lambda: 1)
        nursery.cancel_scope.cancel()
    assert worker.accepted == 40
    # Its share and a lookahead of two, and what it finishes in ten claims' time at 8
    # tasks a second (about 2; 3 when a pace window catches three waves of verdicts),
    # where the runner's window alone would hold 16.
    assert 10 <= max(held) <= 13, held
