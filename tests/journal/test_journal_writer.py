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
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from rlm.errors import JournalError
from rlm.journal import JournalStore, Owner, Spend, open_store
from rlm.journal._verdicts import FlatVerdict
from rlm.journal._writer import WriterProcess, supervised, writer_process, writes_for
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


def _flat(
    index: int,
    status: str,
    output: str | None,
    *,
    cost: float | None = None,
    error: str | None = None,
    tokens: int = 0,
) -> FlatVerdict:
    """A verdict as a worker sends it (see rlm.journal._verdicts)."""
    return (index, status, output, 0.0, tokens, 0, 0, 0, cost, error)


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
            rows = [_flat(i, "succeeded", f"out {i}", cost=0.5) for i in (1, 2)]
            rows.append(_flat(3, "failed", None, error="boom"))
            assert await writer.finish_flat("v", rows, Spend(1.5, 3, 10, 20)) == 3
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
                await writer.finish_flat("v", [_flat(1, "succeeded", "x")], Spend())
    blocker.execute("ROLLBACK")
    blocker.close()


async def test_a_request_waiting_to_be_sent_when_the_writer_dies_fails_never_hangs(
    journal: tuple[str, JournalStore],
) -> None:
    """A request that found the writer alive, then waited for the send lock while the
    writer died and the reader failed every request queued, is failed too: it must not
    be queued after that (its wait is shielded: nothing else would ever end it)."""
    path, _ = journal
    outcome: list[str] = []
    ended = trio.Event()

    async def claim(writer: WriterProcess) -> None:
        try:
            outcome.append(f"answered {await writer.claim_indices('v', _OWNER, 1)}")
        except JournalError as exc:
            outcome.append(str(exc))
        ended.set()

    with trio.fail_after(_HANG):
        async with writer_process(path) as writer, trio.open_nursery() as nursery:
            await writer.ready()
            # Held here as a request being sent holds it (a dead writer cannot be made
            # to keep a pipe full: its end closes with it).
            async with writer._sending:
                nursery.start_soon(claim, writer)
                await trio.testing.wait_all_tasks_blocked()  # the claim waits for the lock
                os.kill(writer.pid, signal.SIGKILL)
                await writer._exited.wait()
                await trio.testing.wait_all_tasks_blocked()  # the reader has ended
                assert writer._gone is not None  # it failed what was queued
            with trio.move_on_after(10):
                await ended.wait()
            if not outcome:  # it hangs, shielded: end it so the test fails, not hangs
                while writer._waiting:
                    writer._waiting.popleft().settle(False, "hung after the writer died")
                await trio.testing.wait_all_tasks_blocked()
    assert "writer process" in outcome[0] and "killed by signal 9" in outcome[0]


async def test_a_request_cut_off_mid_send_by_the_writer_dying_fails(
    journal: tuple[str, JournalStore],
) -> None:
    path, _ = journal
    blocker = sqlite3.connect(path, isolation_level=None)
    failed: list[str] = []

    async def ask(request: Callable[[], Awaitable[object]]) -> None:
        with pytest.raises(JournalError) as caught:
            await request()
        failed.append(str(caught.value))

    big = [_flat(1, "succeeded", "x" * (4 << 20))]  # far more than a pipe holds
    with trio.fail_after(_HANG):
        async with writer_process(path) as writer:
            await writer.ready()
            blocker.execute("BEGIN IMMEDIATE")  # the writer waits for it: it reads no more
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask, lambda: writer.claim_indices("v", _OWNER, 1))
                await trio.sleep(0.2)  # let the claim reach the writer
                nursery.start_soon(ask, lambda: writer.finish_flat("v", big, Spend()))
                await trio.sleep(0.2)  # its send fills the pipe and waits
                os.kill(writer.pid, signal.SIGKILL)
            with pytest.raises(JournalError, match="killed by signal 9"):
                await writer.claim_indices("v", _OWNER, 1)
    blocker.execute("ROLLBACK")
    blocker.close()
    assert len(failed) == 2 and all("writer process" in f for f in failed)


async def test_a_verdict_that_cannot_be_encoded_is_refused_and_later_answers_stay_in_order(
    journal: tuple[str, JournalStore],
) -> None:
    path, store = journal
    with trio.fail_after(_HANG):
        async with writer_process(path) as writer:
            assert await writer.claim_indices("v", _OWNER, 2) == [1, 2]
            bad = [_flat(1, "succeeded", "ok"), _flat(2, "failed", None, tokens=1 << 70)]
            with pytest.raises(JournalError, match="the tokens_input of task 2's verdict"):
                await writer.finish_flat("v", bad, Spend())
            # Nothing of it was sent or queued: each later request gets its own answer.
            with trio.move_on_after(10) as waited:
                assert await writer.claim_indices("v", _OWNER, 1) == [3]
                ok = [_flat(2, "succeeded", "fine")]
                assert await writer.finish_flat("v", ok, Spend()) == 1
            if waited.cancelled_caught:  # hung, shielded: end it so the test fails
                os.kill(writer.pid, signal.SIGKILL)
    assert not waited.cancelled_caught, "a later request got no answer"
    tasks = {t.index: t for t in store.tasks("v")}
    assert (tasks[1].status, tasks[2].status, tasks[2].output) == ("in_progress", "done", "fine")


async def test_a_worker_whose_writer_dies_commits_its_queued_verdicts_and_gives_the_rest_back(
    journal: tuple[str, JournalStore],
) -> None:
    path, store = journal
    told: list[int] = []
    with trio.fail_after(_HANG):
        async with writer_process(path) as writer:
            worker = JournalWorker(store, "v", owner=_OWNER, group_interval=0.05)
            with pytest.raises(BaseExceptionGroup) as caught:  # from the worker's nursery
                async with worker.running(writer):
                    first, second = await worker.claim(), await worker.claim()
                    assert first is not None and second is not None
                    kept = {first.index, second.index}
                    os.kill(writer.pid, signal.SIGKILL)
                    for task in (first, second):
                        result = TaskResult(task.index, task.prompt, "succeeded", output="x")
                        worker.keep(result, lambda r: told.append(r.index))
                    await trio.sleep_forever()  # the committer's failure ends the body
    errors, _ = caught.value.split(JournalError)
    assert errors is not None and "writer process" in str(errors.exceptions[0])
    assert told == []  # never reported: the runner that waited for them has ended
    # Finished and paid for: committed through the worker's own connection, not reopened.
    tasks = {t.index: t for t in store.tasks("v")}
    assert {i for i, t in tasks.items() if t.status == "done"} == kept
    assert all(tasks[i].output == "x" for i in kept)
    assert store.volley("v").counts["open"] == 8  # the rest given back
    # A resume runs only the others.
    resumed = JournalWorker(store, "v", owner=Owner("h", os.getpid(), "w2"))
    async with resumed.running():
        claimed = []
        while (more := await resumed.claim()) is not None:
            claimed.append(more.index)
    assert sorted(claimed) == [i for i in range(1, 11) if i not in kept]


#: A writer that commits a verdict group and is killed before it answers (claims it
#: answers as the real one does).
_COMMITS_THEN_DIES = textwrap.dedent(
    """
    import os, signal, msgpack
    from rlm.journal._backends import SQLiteBackend
    from rlm.journal._writer_main import _methods
    from rlm.journal.store import JournalStore

    methods = _methods(JournalStore(SQLiteBackend(JOURNAL)))
    os.write(1, msgpack.packb([True, None]))
    requests = msgpack.Unpacker(raw=False)
    while chunk := os.read(0, 1 << 16):
        requests.feed(chunk)
        for method, args in requests:
            result = methods[method](*args)
            if method == "finish_flat":
                os.kill(os.getpid(), signal.SIGKILL)  # committed, never answered
            os.write(1, msgpack.packb([True, result]))
    """
)


async def test_a_group_committed_by_a_writer_killed_before_answering_is_paid_for_once(
    journal: tuple[str, JournalStore],
) -> None:
    """The worker sends the group again through its own connection: no row changes
    (the tasks are done), and the group's spend is not added a second time."""
    path, store = journal
    popen = _impostor(_COMMITS_THEN_DIES.replace("JOURNAL", repr(path)))
    with trio.fail_after(_HANG):
        async with supervised(popen, path) as writer:
            worker = JournalWorker(store, "v", owner=_OWNER, group_interval=0.05)
            with pytest.raises(BaseExceptionGroup) as caught:
                async with worker.running(writer):
                    first, second = await worker.claim(), await worker.claim()
                    assert first is not None and second is not None
                    for task in (first, second):
                        result = TaskResult(
                            task.index, task.prompt, "succeeded", output="x", cost=0.25,
                            tokens_input=10, tokens_output=5,
                        )
                        worker.keep(result, lambda r: None)
                    await trio.sleep_forever()  # the committer's failure ends the body
    assert caught.value.split(JournalError)[0] is not None
    assert popen.returncode == -signal.SIGKILL
    volley = store.volley("v")
    assert volley.counts["done"] == 2 and volley.counts["open"] == 8
    assert volley.spent == Spend(0.5, 2, 20, 10)  # once, not twice


async def test_text_that_cannot_be_encoded_reaches_the_journal_cleaned(
    journal: tuple[str, JournalStore],
) -> None:
    """Model code's answer or an error may hold lone surrogates: a verdict is still kept."""
    path, store = journal
    with trio.fail_after(_HANG):
        async with writer_process(path) as writer:
            worker = JournalWorker(store, "v", owner=_OWNER, group_interval=0.05)
            async with worker.running(writer):
                first, second = await worker.claim(), await worker.claim()
                assert first is not None and second is not None
                await worker.accept(
                    TaskResult(first.index, first.prompt, "succeeded", output="a\ud800b")
                )
                await worker.accept(
                    TaskResult(second.index, second.prompt, "failed", error="e\udfff")
                )
    tasks = {t.index: t for t in store.tasks("v")}
    assert (tasks[first.index].status, tasks[first.index].output) == ("done", "a?b")
    assert (tasks[second.index].status, tasks[second.index].error) == ("failed", "e?")


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
