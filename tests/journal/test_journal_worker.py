"""Journal workers in virtual time: claims, heartbeats, stale recovery, spend.

A real SQLite journal whose clock is trio's (so heartbeats and timeouts are
exact under the autojump clock); store calls run inline, never in threads.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from rlm.journal import JournalStore, Owner, Recovered, Spend, open_store
from rlm.journal._threads import inline_run_sync
from rlm.journal._verdicts import flat_verdict, verdict_row
from rlm.journal.records import local_host
from rlm.journal.worker import JournalWorker
from rlm.volley.records import TaskResult, VolleyTask


@pytest.fixture
def store(tmp_path: Path) -> Iterator[JournalStore]:
    opened = open_store(str(tmp_path / "j.sqlite3"), clock=trio.current_time)
    yield opened
    opened.close()


def _create(store: JournalStore, n: int) -> None:
    store.create_volley("v", {}, [VolleyTask(i, f"t{i}").to_dict() for i in range(1, n + 1)])


def _worker(store: JournalStore, name: str, **kw: Any) -> JournalWorker:
    return JournalWorker(
        store,
        "v",
        owner=Owner("h", 1, name),
        run_sync=inline_run_sync,
        **kw,
    )


def _ok(task: VolleyTask, **kw: Any) -> TaskResult:
    return TaskResult(
        index=task.index, prompt=task.prompt, status="succeeded", output=f"out {task.index}", **kw
    )


async def _work(worker: JournalWorker, seconds: float, done: list[int]) -> None:
    async with worker.running():
        while (task := await worker.claim()) is not None:
            await trio.sleep(seconds)
            await worker.accept(_ok(task))
            done.append(task.index)


async def test_one_worker_runs_every_task_once_in_order(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    _create(store, 40)
    done: list[int] = []
    await _work(_worker(store, "a", claim_batch=7), 1.0, done)
    assert done == list(range(1, 41))
    rows = store.tasks("v")
    assert all(r.status == "done" and r.attempts == 1 for r in rows)
    assert rows[4].output == "out 5" and rows[4].usage["retries"] == 0


async def test_a_slow_but_alive_task_is_never_reclaimed(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    _create(store, 2)
    recovered: list[Recovered] = []
    slow: list[int] = []
    other: list[int] = []
    async with trio.open_nursery() as nursery:
        # a: one task that takes 100 s, with a 2 s stale timeout; b sweeps all along.
        nursery.start_soon(
            _work, _worker(store, "a", stale_timeout=2.0, claim_batch=1), 100.0, slow
        )
        await trio.sleep(0.5)
        nursery.start_soon(
            _work,
            _worker(store, "b", stale_timeout=2.0, on_recovered=recovered.append),
            0.1,
            other,
        )
    assert slow == [1] and other == [2] and recovered == []
    assert [r.attempts for r in store.tasks("v")] == [1, 1]


async def test_a_dead_workers_tasks_are_taken_over_after_the_stale_timeout(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    _create(store, 10)
    dead = Owner("other-host", 99, "dead")
    store.claim("v", dead, 3)  # claimed, then the process vanished: no heartbeat ever
    recovered: list[Recovered] = []
    done: list[int] = []
    started = trio.current_time()
    await _work(_worker(store, "b", stale_timeout=2.0, on_recovered=recovered.append), 0.1, done)
    assert sorted(done) == list(range(1, 11)) and len(done) == 10
    assert sorted(r.index for r in recovered) == [1, 2, 3]
    assert all(r.owner == dead and r.idle_s > 2.0 for r in recovered)
    assert trio.current_time() - started < 5.0  # waited about one timeout, not forever
    assert [r.attempts for r in store.tasks("v")][:3] == [2, 2, 2]
    assert len(store.log("stale_recovery")) == 3


async def test_leaving_releases_unfinished_claims_and_records_spend(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    _create(store, 10)
    ledger = Spend()
    worker = _worker(store, "a", claim_batch=5, spent=lambda: ledger)
    async with worker.running():
        first = await worker.claim()
        second = await worker.claim()
        assert first is not None and second is not None
        ledger = Spend(0.25, 3, 90, 10)
        await worker.accept(_ok(first, cost=0.25))
        ledger = Spend(0.5, 5, 160, 20)  # the second attempt spent, then was interrupted
    rows = store.tasks("v")
    assert [r.status for r in rows[:3]] == ["done", "open", "open"]
    assert all(r.claimed_by is None for r in rows[1:])
    assert store.spent("v") == Spend(0.5, 5, 160, 20)


async def test_live_workers_are_counted(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    _create(store, 4)
    seen: list[int] = []
    async with trio.open_nursery() as nursery:
        for name in "abc":
            nursery.start_soon(
                _work,
                _worker(store, name, stale_timeout=2.0, claim_batch=1, on_workers=seen.append),
                3.0,
                [],
            )
    assert 3 in seen
    assert store.live_workers("v", 2.0) == 1  # all retired: at least one is assumed


async def test_a_killed_sibling_on_this_host_stops_counting_at_the_next_heartbeat(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    """Its share goes back to the survivor now, not once its heartbeat is stale."""
    _create(store, 1)
    here = local_host()
    killed = Owner(here, 101, "killed")  # a pool sibling, kill -9'd: its row stays
    store.register_worker("v", killed)
    seen: list[int] = []
    worker = JournalWorker(
        store, "v", owner=Owner(here, 102, "survivor"), run_sync=inline_run_sync,
        stale_timeout=60.0, on_workers=seen.append, alive=lambda pid, started: pid != 101,
    )
    async with worker.running():
        await trio.sleep(16.0)  # one heartbeat (every stale_timeout / 4), far from stale
    assert seen == [1]


async def test_concurrent_claimers_share_one_transaction_per_batch(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    _create(store, 40)
    calls: list[str] = []

    async def counting_run_sync(fn, *args):  # type: ignore[no-untyped-def]
        calls.append(fn.__name__)
        await trio.sleep(0.01)  # a transaction takes time: claimers pile up meanwhile
        return fn(*args)

    worker = JournalWorker(
        store, "v", owner=Owner("h", 1, "a"), claim_batch=10, run_sync=counting_run_sync
    )
    taken: list[int] = []

    async def claimer() -> None:
        while (task := await worker.claim()) is not None:
            taken.append(task.index)
            await trio.sleep(0.001)
            await worker.accept(_ok(task))

    async with worker.running(), trio.open_nursery() as nursery:
        for _ in range(16):
            nursery.start_soon(claimer)
    assert sorted(taken) == list(range(1, 41))  # each task handed out once
    # A batch of 10, then (tasks go faster than claims) bigger ones, claimed ahead,
    # then the one finding none: 4 transactions for 40 tasks and 16 claimers.
    assert calls.count("claim_specs") == 4
    assert calls.count("held_elsewhere") == 1  # the other 15 claimers saw the volley drained
    assert all(r.status == "done" and r.attempts == 1 for r in store.tasks("v"))


async def test_a_fast_worker_claims_the_next_batch_before_its_buffer_runs_dry(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    """Tasks taken faster than a claim takes: once the pace is known (the second claim),
    no task waits for a claim (a slow worker never claims ahead: see the slow-but-alive
    test above)."""
    _create(store, 40)

    async def slow_run_sync(fn, *args):  # type: ignore[no-untyped-def]
        await trio.sleep(0.01)  # every transaction takes 10 ms
        return fn(*args)

    worker = JournalWorker(
        store, "v", owner=Owner("h", 1, "a"), claim_batch=10, run_sync=slow_run_sync
    )
    waited: list[int] = []
    async with worker.running():
        while True:
            started = trio.current_time()
            task = await worker.claim()
            if task is None:
                break
            if trio.current_time() > started:
                waited.append(task.index)
            await trio.sleep(0.002)  # a task every 2 ms: a batch lasts 20 ms
            worker.keep(_ok(task), lambda result: None)
    assert waited == [1, 11]
    assert [r.status for r in store.tasks("v")] == ["done"] * 40
    assert all(r.attempts == 1 for r in store.tasks("v"))


async def test_a_worker_that_knows_the_tasks_claims_only_their_indices(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    _create(store, 5)
    tasks = [VolleyTask(i, f"t{i}") for i in range(1, 6)]
    calls: list[str] = []

    async def counting_run_sync(fn, *args):  # type: ignore[no-untyped-def]
        calls.append(fn.__name__)
        await trio.lowlevel.checkpoint()
        return fn(*args)

    worker = JournalWorker(
        store, "v", owner=Owner("h", 1, "a"), claim_batch=2, run_sync=counting_run_sync
    )
    worker.know(tasks)
    got: list[VolleyTask] = []
    async with worker.running():
        while (task := await worker.claim()) is not None:
            got.append(task)
            await worker.accept(_ok(task))
    assert got == tasks
    assert "claim_specs" not in calls and calls.count("claim_indices") == 4  # 2+2+1, none
    assert [r.status for r in store.tasks("v")] == ["done"] * 5


async def test_a_groups_verdicts_are_reported_only_once_its_commit_has_returned(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    """keep() returns at once; each verdict's ``kept`` comes only after the group's
    transaction committed (the row is done when it is called), never before."""
    _create(store, 6)
    commits: list[tuple[float, float]] = []  # (when asked, when committed)

    async def slow_run_sync(fn, *args):  # type: ignore[no-untyped-def]
        if fn.__name__ != "_finish_flat":
            return fn(*args)
        asked = trio.current_time()
        await trio.sleep(1.0)  # a group's transaction takes a second
        result = fn(*args)
        commits.append((asked, trio.current_time()))
        return result

    worker = JournalWorker(
        store, "v", owner=Owner("h", 1, "a"), run_sync=slow_run_sync, group_interval=0.1
    )
    reported: list[tuple[int, float, str]] = []
    all_reported = trio.Event()

    def kept(result: TaskResult) -> None:
        row = next(r for r in store.tasks("v") if r.index == result.index)
        reported.append((result.index, trio.current_time(), row.status))
        if len(reported) == 6:
            all_reported.set()

    async with worker.running():
        while (task := await worker.claim()) is not None:
            await trio.sleep(0.05)
            worker.keep(_ok(task), kept)
            assert all(index != task.index for index, _, _ in reported)  # not yet
        await all_reported.wait()  # as the runner does: it waits for every report
    assert sorted(index for index, _, _ in reported) == [1, 2, 3, 4, 5, 6]
    assert all(status == "done" for _, _, status in reported)
    committed = [done for _, done in commits]
    assert all(when in committed for _, when, _ in reported)  # told as its group committed
    assert len(commits) < 6  # in groups, not one transaction per verdict


async def test_a_verdict_is_committed_within_a_commit_and_the_pacing_of_being_kept(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    """What a kill -9 can lose of an answered task is its verdict before its commit: a
    verdict kept while no commit is under way is committed at once; one kept during a
    commit waits for that one, and the next starts when it ends (and no sooner than
    group_interval after it began).  Commits here take 50 ms; the default pacing."""
    _create(store, 6)
    commit_s = 0.05
    commits: list[float] = []  # when each began

    async def slow_run_sync(fn, *args):  # type: ignore[no-untyped-def]
        if fn.__name__ == "_finish_flat":
            commits.append(trio.current_time())
            await trio.sleep(commit_s)
        return fn(*args)

    worker = JournalWorker(store, "v", owner=Owner("h", 1, "a"), run_sync=slow_run_sync)
    windows: dict[int, float] = {}

    def keep(task: VolleyTask) -> None:
        asked = trio.current_time()
        worker.keep(_ok(task), lambda r: windows.__setitem__(r.index, trio.current_time() - asked))

    async with worker.running():
        claimed = [await worker.claim() for _ in range(6)]
        tasks = [task for task in claimed if task is not None]
        assert len(tasks) == 6
        keep(tasks[0])  # alone: committed at once
        await trio.sleep(1.0)
        keep(tasks[1])  # starts a commit; the next two are kept while it runs
        await trio.sleep(0.01)
        keep(tasks[2])
        keep(tasks[3])
        await trio.sleep(1.0)
        for task in tasks[4:]:
            worker.keep(_ok(task), lambda r: None)
    assert windows[1] == pytest.approx(commit_s)
    assert windows[2] == pytest.approx(commit_s)
    # Kept 10 ms into task 2's commit: its end (40 ms on), then their own commit.
    assert windows[3] == windows[4] == pytest.approx(commit_s - 0.01 + commit_s)
    assert len(commits) == 4  # 1 | 2 | 3 and 4 together | 5 and 6 (at the end)


def test_a_flat_verdict_becomes_the_row_the_store_writes() -> None:
    """The loop sends TaskResult fields as they are; the row (status word, usage object,
    text that UTF-8 cannot encode cleaned) is built where the store runs."""
    ok = TaskResult(3, "p", "succeeded", 1.23456789, 10, 5, 2, 0.5, 1, "a\ud800b", calls=2,
                    trace="/runs/t.jsonl", request_sec=0.9876543)
    failed = TaskResult(4, "p", "failed", cost=None, error="e\udfff", error_kind="provider")
    assert verdict_row(flat_verdict(ok)) == (
        3, "done", "a?b",
        {"duration_sec": 1.234568, "tokens_input": 10, "tokens_output": 5,
         "tokens_cached": 2, "retries": 1, "calls": 2, "request_sec": 0.987654,
         "trace": "/runs/t.jsonl"},
        0.5, None,
    )
    row = verdict_row(flat_verdict(failed))
    assert (row[0], row[1], row[2], row[4], row[5]) == (4, "failed", None, None, "e?")
    assert row[3]["error_kind"] == "provider" and "trace" not in row[3]


async def test_text_that_cannot_be_encoded_reaches_the_journal_cleaned(tmp_path: Path) -> None:
    """Model code's answer or an error may hold lone surrogates: a verdict is still kept
    (the store's calls in real threads, as a volley runs them)."""
    store = open_store(str(tmp_path / "j.sqlite3"))
    try:
        _create(store, 2)
        worker = JournalWorker(store, "v", owner=Owner("h", 1, "a"), group_interval=0.05)
        with trio.fail_after(60):  # only a hang reaches it
            async with worker.running():
                first, second = await worker.claim(), await worker.claim()
                assert first is not None and second is not None
                await worker.accept(
                    TaskResult(first.index, first.prompt, "succeeded", output="a\ud800b")
                )
                await worker.accept(
                    TaskResult(second.index, second.prompt, "failed", error="e\udfff")
                )
        tasks = {t.index: t for t in store.tasks("v")}
    finally:
        store.close()
    assert (tasks[first.index].status, tasks[first.index].output) == ("done", "a?b")
    assert (tasks[second.index].status, tasks[second.index].error) == ("failed", "e?")
