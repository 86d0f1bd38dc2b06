"""A worker paused past --stale-timeout sends nothing whose claim it lost (invariant 13).

Virtual time, on SQLite and PostgreSQL: the journal's clock is trio's and store
calls run inline.  A pause is the clock jumping with none of the worker's tasks
running (no checkpoint), while another worker's sweep reopens its claims and that
worker takes and finishes them through the store; then the paused one goes on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from rlm._config import RunConfig
from rlm.errors import ClaimLost
from rlm.journal import JournalStore, Owner, Verdict, open_store
from rlm.journal._threads import inline_run_sync
from rlm.journal.worker import JournalWorker
from rlm.providers.base import CompletionRequest
from rlm.testing.provider import FunctionProvider
from rlm.volley.engine import Volley
from rlm.volley.records import TaskResult, VolleyTask

STALE = 10.0
P, Q = Owner("host-p", 1, "p"), Owner("host-q", 2, "q")


@asynccontextmanager
async def journal(spec: str, n: int) -> AsyncIterator[JournalStore]:
    """A journal on trio's clock holding volley ``v`` of ``n`` tasks."""
    store = open_store(spec, clock=trio.current_time)
    try:
        store.create_volley("v", {}, [VolleyTask(i, f"t{i}").to_dict() for i in range(1, n + 1)])
        yield store
    finally:
        store.close()


def paused_past_the_stale_timeout(clock: trio.testing.MockClock, store: JournalStore) -> None:
    """Another worker reopens every stale claim, then takes and finishes every task it
    can (no checkpoint: the paused worker's tasks do not run meanwhile)."""
    clock.jump(STALE * 2.5)
    assert store.recover_stale("v", STALE)
    taken = store.claim_indices("v", Q, 1000)
    store.finish("v", [Verdict(i, "done", output=f"q{i}") for i in taken])


def request(task: VolleyTask, child: str = "") -> CompletionRequest:
    return CompletionRequest(
        messages=[{"role": "user", "content": task.prompt}], model="m",
        call_id=f"t{task.index}{child}",
    )


def worker(store: JournalStore, lost: list[list[int]], **kw: Any) -> JournalWorker:
    return JournalWorker(
        store, "v", owner=P, run_sync=inline_run_sync, stale_timeout=STALE,
        on_lost=lambda indices, late: lost.append(indices), **kw,
    )


async def test_a_paused_worker_drops_the_claims_it_lost_and_sends_none_of_them(
    autojump_clock: trio.testing.MockClock, journal_spec: str
) -> None:
    async with journal(journal_spec, 10) as store:
        lost: list[list[int]] = []
        p = worker(store, lost, claim_batch=6)
        async with p.running():
            first = await p.claim()  # claims tasks 1-6, hands out 1
            assert first is not None and first.index == 1
            await p.before_send(request(first))  # on time: its claim holds
            paused_past_the_stale_timeout(autojump_clock, store)
            with pytest.raises(ClaimLost, match="task 1: not sent"):
                await p.before_send(request(first))
            with pytest.raises(ClaimLost):  # a child call of the task: refused too
                await p.before_send(request(first, ".2"))
            assert lost == [[1, 2, 3, 4, 5, 6]]
            # Its buffer held tasks 2-6: none is handed out; nothing is open any more.
            assert await p.claim() is None
            # A verdict that was in flight when it paused lands only if nobody's did.
            await p.accept(TaskResult(1, "t1", "succeeded", output="p1"))
        assert p.accepted == 0  # "finished N tasks here" counts what it committed
        rows = store.tasks("v")
    assert [(r.status, r.output) for r in rows] == [("done", f"q{i}") for i in range(1, 11)]


async def test_claims_taken_again_after_the_pause_are_sent(
    autojump_clock: trio.testing.MockClock, journal_spec: str
) -> None:
    """The other worker finished only what it took; the reopened rest is open again,
    and the paused worker claims and sends it anew."""
    async with journal(journal_spec, 6) as store:
        lost: list[list[int]] = []
        p = worker(store, lost, claim_batch=4)
        async with p.running():
            first = await p.claim()  # claims 1-4
            assert first is not None
            autojump_clock.jump(STALE * 2.5)
            assert len(store.recover_stale("v", STALE)) == 4
            store.finish("v", [Verdict(i, "done") for i in store.claim_indices("v", Q, 2)])
            taken = []
            while (task := await p.claim()) is not None:
                await p.before_send(request(task))  # each claimed anew: held
                taken.append(task.index)
                await p.accept(TaskResult(task.index, task.prompt, "succeeded", output="p"))
        assert lost == [[1, 2, 3, 4]] and taken == [3, 4, 5, 6] and p.accepted == 4


async def test_while_the_heartbeat_is_on_time_a_send_reads_nothing(
    autojump_clock: trio.testing.MockClock, journal_spec: str
) -> None:
    async with journal(journal_spec, 4) as store:
        calls: list[str] = []

        async def counted(fn: Callable[..., Any], /, *args: Any) -> Any:
            calls.append(fn.__name__)
            return await inline_run_sync(fn, *args)

        p = JournalWorker(store, "v", owner=P, run_sync=counted, stale_timeout=STALE)
        async with p.running():
            task = await p.claim()
            assert task is not None
            for _ in range(20):  # 38 s: the heartbeat comes every 2.5 s
                await trio.sleep(1.9)
                before = len(calls)
                await p.before_send(request(task))
                assert calls[before:] == []
            assert calls.count("heartbeat") == 15


async def test_a_paused_volley_sends_nothing_whose_claim_it_lost(
    autojump_clock: trio.testing.MockClock, journal_spec: str
) -> None:
    """A volley at C=2 pauses with two requests in flight and two tasks waiting for a
    permit.  After the pause the two in flight come back (sent before: their verdicts
    are dropped, the other worker's came first) and nothing more is sent: the tasks
    waiting at the gate and the ones buffered were reopened and finished elsewhere."""
    async with journal(journal_spec, 8) as store:
        lost: list[list[int]] = []
        answer = trio.Event()

        async def reply(req: CompletionRequest) -> str:
            await answer.wait()
            return "p"

        provider = FunctionProvider(reply)
        tasks = [VolleyTask(i, f"t{i}") for i in range(1, 9)]
        p = worker(store, lost)
        p.know(tasks)
        config = RunConfig(provider="fixture", model="m", max_concurrent=2, root_permits=0,
                           adaptive=False)
        run = Volley(config, tasks, volley_id="v", source=p, sink=p, before_send=p.before_send,
                     providers={"root": provider, "sub": provider})
        p.capacity = lambda: run.concurrency
        p.follow_ledger(run.ledger)
        async with p.running(), trio.open_nursery() as nursery:
            nursery.start_soon(run.run)
            await trio.testing.wait_all_tasks_blocked()
            assert [r.call_id for r in provider.requests] == ["t1", "t2"]
            paused_past_the_stale_timeout(autojump_clock, store)
            answer.set()
        assert [r.call_id for r in provider.requests] == ["t1", "t2"]
        assert p.accepted == 0 and run.ledger.spent.calls == 2
        assert lost and {3, 4} <= set(lost[0]) <= {1, 2, 3, 4}
        rows = store.tasks("v")
    assert [(r.status, r.output) for r in rows] == [("done", f"q{i}") for i in range(1, 9)]
