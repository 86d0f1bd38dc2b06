"""Verdict groups whose commit failed: sent again in order, paid for once, never lost unsaid.

Virtual time: a real SQLite journal whose clock is trio's, and store calls run by an
injected ``run_sync`` that takes a second of virtual time (so a later group queues
while one is being committed) on a store whose verdict writes fail as a test says (a
PostgreSQL commit cut off by a lost connection, a disk that refuses the writes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio

from rlm.errors import JournalError
from rlm.journal import JournalStore, Owner, Spend, open_store
from rlm.journal._backends import SQLiteBackend
from rlm.journal.worker import JournalWorker
from rlm.volley.records import TaskResult, VolleyTask

_OWNER = Owner("h", 1, "w1")


R = TypeVar("R")


async def slow_run_sync(fn: Callable[..., R], /, *args: Any) -> R:
    """Run a store call after a second of virtual time (a slow journal)."""
    await trio.sleep(1.0)
    return fn(*args)


class FailingGroups(JournalStore):
    """A journal at ``path`` that fails (without committing) the verdict groups numbered
    in ``fail`` the first time each is written; ``sent``: every group number written."""

    def __init__(self, path: str, fail: set[int]) -> None:
        super().__init__(SQLiteBackend(path), clock=trio.current_time)
        self.fail = set(fail)
        self.sent: list[int] = []

    def finish_rows(
        self,
        volley_id: str,
        rows: Any,
        spend: Spend,
        group: tuple[str, int] | None = None,
    ) -> int:
        assert group is not None
        self.sent.append(group[1])
        if group[1] in self.fail:
            self.fail.discard(group[1])
            raise JournalError("journal j: database is locked")
        return super().finish_rows(volley_id, rows, spend, group)


class NoVerdicts(JournalStore):
    """A store whose verdict groups fail (a disk that refuses the writes); with
    ``leave_fails`` its end transaction fails too."""

    leave_fails = False

    def finish_rows(self, *args: Any, **kw: Any) -> int:
        raise JournalError("journal j: disk I/O error")

    def leave(self, *args: Any, **kw: Any) -> int:
        if self.leave_fails:
            raise JournalError("journal j: disk I/O error at the end")
        return super().leave(*args, **kw)


def _create(store: JournalStore, n: int) -> None:
    store.create_volley("v", {}, [VolleyTask(i, f"t{i}").to_dict() for i in range(1, n + 1)])


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "j.sqlite3")


@pytest.fixture
def store(path: str) -> Iterator[JournalStore]:
    opened = open_store(path, clock=trio.current_time)
    yield opened
    opened.close()


def _result(task: VolleyTask, cost: float) -> TaskResult:
    return TaskResult(task.index, task.prompt, "succeeded", output="x", cost=cost,
                      tokens_input=10, tokens_output=5)


async def _keep_two_groups(worker: JournalWorker, told: list[int]) -> None:
    """Claim the tasks; task 1's verdict goes alone as group 1, task 2's is queued
    while group 1 is in flight; the committer's failure ends the body."""
    first, second = await worker.claim(), await worker.claim()
    assert first is not None and second is not None
    worker.keep(_result(first, 0.25), lambda r: told.append(r.index))
    await trio.sleep(0.5)  # group 1 is in flight
    worker.keep(_result(second, 0.5), lambda r: told.append(r.index))
    await trio.sleep_forever()


async def test_a_failed_group_is_sent_again_before_any_later_one_and_paid_for_once(
    autojump_clock: trio.abc.Clock, path: str, store: JournalStore
) -> None:
    """Group 1 fails (not committed) while group 2 waits.  Group 2 must not reach the
    journal first: its number, recorded as the worker's last, would make group 1's
    retry look like a group committed before, and its spend would be dropped."""
    _create(store, 4)
    failing = FailingGroups(path, fail={1})
    try:
        worker = JournalWorker(failing, "v", owner=_OWNER, run_sync=slow_run_sync)
        worker.know([VolleyTask(i, f"t{i}") for i in range(1, 5)])
        told: list[int] = []
        with pytest.raises(BaseExceptionGroup) as caught:
            async with worker.running():
                await _keep_two_groups(worker, told)
    finally:
        failing.close()
    assert caught.value.split(JournalError)[0] is not None
    volley = store.volley("v")
    assert volley.counts["done"] == 2 and volley.counts["open"] == 2
    assert volley.spent == Spend(0.75, 2, 20, 10)  # both groups, each once
    assert told == [] and failing.sent == [1, 1, 2]  # group 1 again, before group 2


async def _end_with_no_verdicts(path: str, *, leave_fails: bool) -> str:
    """Run :func:`_keep_two_groups` with every verdict write failing, and sent again
    failing again; the error the worker ends with."""
    failing = NoVerdicts(SQLiteBackend(path), clock=trio.current_time)
    failing.leave_fails = leave_fails
    told: list[int] = []
    try:
        worker = JournalWorker(failing, "v", owner=_OWNER, run_sync=slow_run_sync)
        with pytest.raises(JournalError) as caught:
            async with worker.running():
                await _keep_two_groups(worker, told)
    finally:
        failing.close()
    assert told == []  # nothing reported
    return str(caught.value)


async def test_a_group_that_fails_again_when_sent_again_is_named_and_paid_for(
    autojump_clock: trio.abc.Clock, path: str, store: JournalStore
) -> None:
    """Every group fails, and fails again when sent again at the worker's end: nothing
    is reported, the tasks go back to open, the error says which verdicts were not
    written, and what they cost is recorded at the worker's end."""
    _create(store, 4)
    message = await _end_with_no_verdicts(path, leave_fails=False)
    assert "the verdicts of 2 task(s) (1, 2) were not written" in message, message
    assert "disk I/O error" in message and "and not reported" in message, message
    assert "given back" in message and "what they cost is recorded" in message, message
    volley = store.volley("v")
    assert volley.counts["open"] == 4 and volley.counts["done"] == 0
    assert volley.spent == Spend(0.75, 2, 20, 10)


async def test_spend_that_even_the_end_transaction_cannot_record_is_named_in_the_error(
    autojump_clock: trio.abc.Clock, path: str, store: JournalStore
) -> None:
    _create(store, 4)
    message = await _end_with_no_verdicts(path, leave_fails=True)
    assert message.startswith("journal j: disk I/O error at the end; the verdicts of 2"), message
    assert "(up to $0.7500, 2 requests, 20 input and 10 output tokens)" in message, message
    assert "is not in the journal either" in message, message
    assert store.volley("v").spent == Spend()
