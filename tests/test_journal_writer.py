"""The journal's writer process: real SQLite files, real processes, real signals.

It writes what a worker asks and answers once committed; it dies with its
parent (EOF on its stdin when the parent closes it, the parent-death signal
when the parent is killed, even mid-request); and a crash of it fails the
requests waiting on it with a JournalError, never a hang.  Timeouts here only
guard against a hang: no test asserts how long anything takes.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from rlm.errors import JournalError
from rlm.journal import JournalStore, Owner, Spend, open_store
from rlm.journal._writer import supervised, writer_process, writes_for
from rlm.journal.worker import JournalWorker
from rlm.volley.records import TaskResult, VolleyTask

_HANG = 60  # seconds: far more than anything here takes; only a hang reaches it
_OWNER = Owner("h", os.getpid(), "w1")


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[tuple[str, JournalStore]]:
    path = str(tmp_path / "j.sqlite3")
    store = open_store(path)
    store.create_volley("v", {}, [VolleyTask(i, f"t{i}").to_dict() for i in range(1, 11)])
    yield path, store
    store.close()


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie nobody reaped yet counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _wait_gone(pid: int) -> bool:
    # Half of SQLite's busy timeout (60 s): a writer stuck in it is not taken for gone.
    deadline = time.monotonic() + 30
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


async def test_it_claims_and_commits_verdicts_then_ends_when_closed(
    journal: tuple[str, JournalStore],
) -> None:
    path, store = journal
    with trio.fail_after(_HANG):
        async with writer_process(path) as writer:
            assert await writer.claim_indices("v", _OWNER, 3) == [1, 2, 3]
            specs = await writer.claim_specs("v", _OWNER, 2)
            assert [s["index"] for s in specs] == [4, 5]
            rows = [(i, "done", f"out {i}", {"retries": 0}, 0.5, None) for i in (1, 2)]
            rows.append((3, "failed", None, {}, None, "boom"))
            assert await writer.finish_rows("v", rows, Spend(1.5, 3, 10, 20)) == 3
            # The verdicts are committed: another connection sees them at once.
            tasks = {t.index: t for t in store.tasks("v")}
            assert (tasks[1].status, tasks[1].output, tasks[1].cost) == ("done", "out 1", 0.5)
            assert (tasks[3].status, tasks[3].error) == ("failed", "boom")
            assert tasks[4].status == "in_progress" and tasks[4].claimed_by == _OWNER
            assert store.spent("v") == Spend(1.5, 3, 10, 20)
            pid = writer.pid
    assert _gone(pid)  # EOF on its stdin: it exited, and was reaped
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_a_file_that_is_no_journal_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE people (name TEXT)")
    with trio.fail_after(_HANG):
        async with writer_process(str(path)) as writer:
            with pytest.raises(JournalError, match="not an rlm journal"):
                await writer.ready()
            with pytest.raises(JournalError, match="not an rlm journal"):
                await writer.claim_indices("v", _OWNER, 1)


async def test_a_killed_writer_fails_the_request_it_was_on_and_every_later_one(
    journal: tuple[str, JournalStore],
) -> None:
    path, _ = journal
    blocker = sqlite3.connect(path, isolation_level=None)
    with trio.fail_after(_HANG):
        async with writer_process(path) as writer:
            await writer.ready()
            blocker.execute("BEGIN IMMEDIATE")  # the writer's next claim waits for this lock
            async with trio.open_nursery() as nursery:
                failed: list[str] = []

                async def claim() -> None:
                    with pytest.raises(JournalError) as caught:
                        await writer.claim_indices("v", _OWNER, 2)
                    failed.append(str(caught.value))

                nursery.start_soon(claim)
                await trio.sleep(0.2)  # let the request reach the writer
                os.kill(writer.pid, signal.SIGKILL)
            assert "writer process" in failed[0] and "killed by signal 9" in failed[0]
            assert "--resume" in failed[0]
            with pytest.raises(JournalError, match="killed by signal 9"):
                await writer.finish_rows("v", [(1, "done", "x", {}, None, None)], Spend())
    blocker.execute("ROLLBACK")
    blocker.close()


async def test_a_worker_whose_writer_dies_fails_reports_nothing_and_gives_its_tasks_back(
    journal: tuple[str, JournalStore],
) -> None:
    path, store = journal
    told: list[int] = []
    with trio.fail_after(_HANG):
        async with writer_process(path) as writer:
            worker = JournalWorker(store, "v", owner=_OWNER, group_interval=0.05)
            with pytest.raises(BaseExceptionGroup) as caught:  # from the worker's nursery
                async with worker.running(writer):
                    first = await worker.claim()
                    assert first is not None
                    os.kill(writer.pid, signal.SIGKILL)
                    result = TaskResult(first.index, first.prompt, "succeeded", output="x")
                    worker.keep(result, lambda r: told.append(r.index))
                    await trio.sleep_forever()  # the committer's failure ends the body
    errors, _ = caught.value.split(JournalError)
    assert errors is not None and "writer process" in str(errors.exceptions[0])
    assert told == []  # never reported: it was not committed
    assert {t.status for t in store.tasks("v")} == {"open"}  # given back, through the store
    assert store.volley("v").counts["open"] == 10


def _impostor(code: str) -> subprocess.Popen[bytes]:
    """A process in the writer's place that does what ``code`` says instead."""
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


async def test_a_writer_that_exits_says_how_and_its_last_words() -> None:
    code = "import sys; sys.stderr.write('cannot go on: disk on fire\\n'); sys.exit(3)"
    with trio.fail_after(_HANG):
        async with supervised(_impostor(code), "j.sqlite3") as writer:
            with pytest.raises(JournalError) as caught:
                await writer.ready()
    message = str(caught.value)
    assert "exited with code 3" in message and "disk on fire" in message


async def test_garbage_on_the_writers_stdout_kills_it_and_fails_what_waits() -> None:
    # 0xc1 is never used in msgpack; the impostor then waits on its stdin for ever.
    code = "import os, sys; os.write(1, b'\\xc1 garbage'); sys.stdin.read()"
    popen = _impostor(code)
    with trio.fail_after(_HANG):
        async with supervised(popen, "j.sqlite3") as writer:
            with pytest.raises(JournalError, match="not an answer"):
                await writer.claim_indices("v", _OWNER, 1)
    assert popen.returncode == -signal.SIGKILL


_PARENT = textwrap.dedent(
    """
    import sys, trio
    from rlm.journal import Owner
    from rlm.journal._writer import writer_process

    async def main(path):
        async with writer_process(path) as writer, trio.open_nursery() as nursery:
            await writer.ready()
            print(writer.pid, flush=True)
            if sys.stdin.readline().strip() == "claim":  # the test holds the lock now
                nursery.start_soon(writer.claim_indices, "v", Owner("h", 1, "w"), 1)
                await trio.sleep(0.2)
            print("go", flush=True)
            await trio.sleep_forever()

    trio.run(main, sys.argv[1])
    """
)


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "mid-request"])
def test_the_writer_dies_with_a_parent_killed_with_sigkill(
    journal: tuple[str, JournalStore], busy: bool
) -> None:
    path, _ = journal
    blocker = sqlite3.connect(path, isolation_level=None)
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdin is not None and parent.stdout is not None
        writer_pid = int(parent.stdout.readline())
        if busy:  # the writer then sits in SQLite's busy wait, not reading its stdin
            blocker.execute("BEGIN IMMEDIATE")
        parent.stdin.write("claim\n" if busy else "idle\n")
        parent.stdin.flush()
        assert parent.stdout.readline() == "go\n"
        assert not _gone(writer_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(_HANG)
        # Idle, EOF on its stdin ends it; mid-request (not reading), the parent-death
        # signal does, long before SQLite's 60 s busy timeout would let it read again.
        assert _wait_gone(writer_pid)
    finally:
        parent.kill()
        parent.wait()
        if blocker.in_transaction:
            blocker.execute("ROLLBACK")
        blocker.close()


async def test_postgresql_journals_keep_their_writes_in_a_thread(pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        async with writes_for(store) as writes:
            assert writes is None
    finally:
        store.close()
