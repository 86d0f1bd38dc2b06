"""A volley's provider batches in the journal: taking tasks into a batch, the stages,
results written once, and one process at a time (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from rlm.errors import JournalError
from rlm.journal._open import open_store
from rlm.journal.batches import (
    BATCH_HOST,
    advance,
    batches,
    fail_unanswered,
    held_specs,
    open_specs,
    plan_batch,
    record_results,
    take_volley,
)
from rlm.journal.records import Owner, Spend, VerdictRow, local_host
from rlm.journal.store import JournalStore
from tests.journal_store_fixtures import A, FakeClock, task_specs


def _verdict(index: int, status: str = "done") -> VerdictRow:
    usage = {"duration_sec": 1.0, "tokens_input": 10, "tokens_output": 2, "tokens_cached": 0,
             "retries": 0}
    return (index, status, f"answer {index}", usage, 0.5, None)  # type: ignore[return-value]


def test_a_batch_takes_only_open_tasks_and_no_task_is_in_two(store: JournalStore) -> None:
    store.create_volley("v", {}, task_specs(10))
    first = plan_batch(store, "v", "openai", [1, 2, 3, 4], size=400)
    assert first is not None and first.number == 1 and first.tasks == (1, 2, 3, 4)
    assert first.label == "rlm-v-b1" and first.stage == "planned"
    second = plan_batch(store, "v", "openai", [3, 4, 5, 6], size=400)  # 3 and 4 are taken
    assert second is not None and second.number == 2 and second.tasks == (5, 6)
    assert plan_batch(store, "v", "openai", [1, 2], size=10) is None
    assert [spec["index"] for spec in open_specs(store, "v", 0, 100)] == [7, 8, 9, 10]
    assert [spec["index"] for spec in open_specs(store, "v", 8, 100)] == [9, 10]
    assert [spec["index"] for spec in held_specs(store, "v", 1, 1, 2)] == [2, 3]
    held = store.tasks("v")[0]
    assert held.status == "in_progress" and held.claimed_by is not None
    assert held.claimed_by.host == BATCH_HOST and held.heartbeat_at is None
    assert [b.tasks for b in batches(store, "v")] == [(1, 2, 3, 4), (5, 6)]


def test_the_stages_are_recorded_with_what_the_provider_said(store: JournalStore) -> None:
    store.create_volley("v", {}, task_specs(3))
    plan_batch(store, "v", "anthropic", [1, 2, 3], size=90)
    advance(store, "v", 1, "creating", creating_at=123.5)
    advance(store, "v", 1, "submitted", batch_id="msgbatch_1", provider_status="in_progress",
            counts={"total": 3, "succeeded": 1, "failed": 0, "processing": 2})
    (row,) = batches(store, "v")
    assert row.stage == "submitted" and row.batch_id == "msgbatch_1" and row.creating_at == 123.5
    assert row.counts["succeeded"] == 1 and row.provider == "anthropic" and row.size == 90
    advance(store, "v", 1, "ended", output={"results_url": "http://x/results"})
    assert batches(store, "v")[0].output == {"results_url": "http://x/results"}
    with pytest.raises(ValueError, match="not a batch field"):
        advance(store, "v", 1, "ended", api_key="sk-nope")


def test_results_read_again_are_written_and_paid_for_once(store: JournalStore) -> None:
    store.create_volley("v", {}, task_specs(4))
    plan_batch(store, "v", "openai", [1, 2, 3], size=30)
    spend = Spend(0.5, 1, 10, 2)
    assert record_results(store, "v", 1, [_verdict(2), _verdict(1)], [spend, spend]) == [1, 2]
    # After a stop the results are read from the start again: 1 and 2 are not written again.
    rows = [_verdict(1), _verdict(2), _verdict(3, "failed")]
    assert record_results(store, "v", 1, rows, [spend] * 3) == [3]
    assert store.spent("v") == Spend(1.5, 3, 30, 6)
    tasks = store.tasks("v")
    assert [t.status for t in tasks] == ["done", "done", "failed", "open"]
    assert tasks[0].output == "answer 1" and tasks[0].usage["tokens_input"] == 10
    # A result for a task this batch does not hold (4 is open) writes nothing.
    assert record_results(store, "v", 1, [_verdict(4)], [spend]) == []
    assert store.tasks("v")[3].status == "open"


def test_tasks_without_a_result_fail_with_the_reason(store: JournalStore) -> None:
    store.create_volley("v", {}, task_specs(3))
    plan_batch(store, "v", "openai", [1, 2, 3], size=30)
    record_results(store, "v", 1, [_verdict(2)], [Spend()])
    assert fail_unanswered(store, "v", 1, "the batch expired") == [1, 3]
    assert [t.error for t in store.tasks("v")] == ["the batch expired", None, "the batch expired"]


def test_no_sweep_reopens_a_task_a_batch_holds(store: JournalStore, clock: FakeClock) -> None:
    store.create_volley("v", {}, task_specs(2))
    plan_batch(store, "v", "openai", [1, 2], size=20)
    clock.now += 10 * 86_400
    assert store.recover_stale("v", 60) == []
    assert store.recover_dead_local("v", lambda pid, started: False) == []
    assert store.join("v", A, lambda pid, started: False, 60) == []
    assert store.held_elsewhere("v", A) == 2  # a live worker waits for the batch


def test_one_process_at_a_time_works_on_a_batch_volley(
    store: JournalStore, clock: FakeClock
) -> None:
    store.create_volley("v", {}, task_specs(1))
    here = local_host()
    first = Owner(here, os.getpid(), "first")
    take_volley(store, first, "v", 60)
    with pytest.raises(JournalError, match=f"process {os.getpid()} on {here}"):
        take_volley(store, Owner(here, os.getpid(), "second"), "v", 60)
    # A worker of this host whose process is gone does not count (it was killed -9).
    take_volley(store, Owner(here, os.getpid(), "second"), "v", 60,
                alive=lambda pid, started: False)
    store.retire_worker(Owner(here, os.getpid(), "second"))
    take_volley(store, Owner("elsewhere", 7, "far"), "v", 60)
    with pytest.raises(JournalError, match="process 7 on elsewhere"):
        take_volley(store, Owner(here, os.getpid(), "third"), "v", 60)
    clock.now += 61  # its heartbeat is stale now
    take_volley(store, Owner(here, os.getpid(), "fourth"), "v", 60)


def test_two_processes_planning_at_once_never_share_a_task(tmp_path: Path) -> None:
    path = str(tmp_path / "j.sqlite3")
    setup = open_store(path)
    setup.create_volley("v", {}, task_specs(400))
    setup.close()
    start = threading.Barrier(4)
    taken: list[tuple[int, ...]] = []

    def planner() -> None:
        store = open_store(path)
        start.wait()
        try:
            while specs := open_specs(store, "v", 0, 7):
                row = plan_batch(store, "v", "openai", [s["index"] for s in specs], size=1)
                if row is not None:
                    taken.append(row.tasks)
        finally:
            store.close()

    threads = [threading.Thread(target=planner) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    flat = [index for tasks in taken for index in tasks]
    assert sorted(flat) == list(range(1, 401))
    check = open_store(path)
    try:
        assert [b.number for b in batches(check, "v")] == list(range(1, len(taken) + 1))
    finally:
        check.close()
