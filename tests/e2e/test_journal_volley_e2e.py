"""Volleys that survive kill -9, and worker pools that share one journal.

Real `rlm` processes against the fixture server over loopback, real SQLite and
PostgreSQL journals, real SIGKILLs.  The server counts requests per task, so
the tests see which tasks were paid for twice.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import random
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from rlm.journal import open_store
from rlm.testing.server import FixtureServer, FixtureServerOptions
from tests.helpers import rlm_in_process

RLM = [sys.executable, "-m", "rlm"]
_TASK = re.compile(r"task-(\d{4})")


class CountingServer(FixtureServer):
    """The fixture server, counting chat requests per task tag (``task-0042``).

    With ``answer_first=N`` it answers only the first N task requests; later ones
    are held (sent, counted, never answered) until ``release`` is set, so a test
    can kill a client mid-volley at a known point however fast or slow the
    machine is.  ``holding`` is set when the first request is held.
    """

    def __init__(self, options: FixtureServerOptions, answer_first: int | None = None) -> None:
        super().__init__(options)
        self.per_task: Counter[int] = Counter()
        self.answer_first = answer_first
        self.holding = trio.Event()
        self.release = trio.Event()

    async def _complete(self, chat: Any) -> Any:
        match = _TASK.search(chat.messages[-1]["content"])
        if match:
            self.per_task[int(match.group(1))] += 1
            if self.answer_first is not None and self.per_task.total() > self.answer_first:
                self.holding.set()
                await self.release.wait()
        return await super()._complete(chat)


@asynccontextmanager
async def counting_server(
    latency: float, answer_first: int | None = None
) -> AsyncIterator[tuple[str, CountingServer]]:
    server = CountingServer(FixtureServerOptions(sub_latency=latency), answer_first)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        yield f"http://127.0.0.1:{port}/v1", server
        nursery.cancel_scope.cancel()


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}


async def rlm(*args: str) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(120):
        return await trio.run_process(
            [*RLM, *args], capture_stdout=True, capture_stderr=True, check=False, env=_env()
        )


def _task_file(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "tasks.txt"
    path.write_text("".join(f"Say hello to task-{i:04d}\n" for i in range(1, n + 1)))
    return path


def _send_flags(url: str, concurrency: int) -> list[str]:
    return ["--base-url", url, "--model", "fixture", "--max-concurrent", str(concurrency),
            "--no-estimate", "-q"]


def _statuses(journal: str, volley_id: str) -> dict[int, str]:
    store = open_store(journal)
    try:
        return {row.index: row.status for row in store.tasks(volley_id)}
    finally:
        store.close()


def _done(journal: str) -> int:
    ids = _volley_ids(journal)
    return sum(s == "done" for s in _statuses(journal, ids[0]).values()) if ids else -1


def _volley_ids(journal: str) -> list[str]:
    if not os.path.exists(journal):
        return []
    store = open_store(journal)
    try:
        return [row.volley_id for row in store.volleys()]
    finally:
        store.close()


async def _until(
    procs: list[trio.Process], ready: Callable[[], bool], what: str, limit_s: float = 60,
    seen: Callable[[], str] = str,
) -> None:
    """Wait (bounded) until ``ready()``; fail at once, saying so, if a process exits first.

    Another process writes the journal, so nothing here could set an Event: this polls.
    """
    with trio.move_on_after(limit_s):
        while not ready():
            for proc in procs:
                if proc.poll() is not None:
                    pytest.fail(f"rlm (pid {proc.pid}) exited with code {proc.returncode} before"
                                f" {what} (its stderr is under 'Captured stderr')")
            await trio.sleep(0.02)
        return
    pytest.fail(f"{what} did not happen within {limit_s:.0f} s {seen()}")


async def _kill_and_resume(
    tmp_path: Path, journal: str, after: int, moment: float | None, n: int = 200
) -> set[int]:
    """Plain `rlm volley` of ``n`` tasks killed -9 once ``after`` were done, then resumed.

    With ``moment=None`` the server answers exactly ``after`` tasks and holds the rest, so
    the kill lands mid-volley with exactly ``after`` done on any machine; otherwise the
    kill comes ``moment`` s after ``after`` tasks were done, wherever the volley then is.
    """
    tasks = _task_file(tmp_path, n)
    hold = moment is None
    async with counting_server(0.01 if hold else 0.2, after if hold else None) as (url, server):
        proc = await trio.lowlevel.open_process(
            [*RLM, "volley", "-f", str(tasks), "--journal", journal, *_send_flags(url, 16)],
            env=_env(),
            stdout=subprocess.DEVNULL,
        )
        try:
            if hold:
                await _until([proc], server.holding.is_set, f"task {after + 1} was sent")
            await _until([proc], lambda: _done(journal) >= after, f"{after} tasks were done")
            await trio.sleep(moment or 0)
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            server.release.set()
        (volley_id,) = _volley_ids(journal)
        before = _statuses(journal, volley_id)
        done_before = {i for i, s in before.items() if s == "done"}
        resumed = await rlm("volley", "--resume", "last", "--journal", journal,
                            "--output-format", "json", *_send_flags(url, 16))
    assert resumed.returncode == 0, resumed.stderr.decode()
    out = json.loads(resumed.stdout)
    assert out["volley_id"] == volley_id
    assert [t["index"] for t in out["tasks"]] == list(range(1, n + 1))
    assert all(t["status"] == "succeeded" for t in out["tasks"])
    assert all(f"task-{t['index']:04d}" in t["prompt"] for t in out["tasks"])
    assert set(server.per_task) == set(range(1, n + 1))
    repeated = {i for i, sent in server.per_task.items() if sent > 1}
    assert not repeated & done_before, "a task done before the kill was sent again"
    assert set(_statuses(journal, volley_id).values()) == {"done"}
    return done_before


@pytest.mark.parametrize("after", [0, 40])
async def test_a_killed_volley_resumes_without_paying_twice(tmp_path: Path, after: int) -> None:
    # 80 tasks at C=16: the kill finds 16 in flight and the rest never sent (the 200-task
    # runs with random kill moments are the slow test below).
    done_before = await _kill_and_resume(tmp_path, str(tmp_path / "j.sqlite3"), after, None, 80)
    assert len(done_before) == after  # killed mid-run, with exactly the answered tasks done


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20))
async def test_twenty_random_kill_moments(tmp_path: Path, seed: int) -> None:
    draw = random.Random(seed)
    after, moment = draw.randrange(0, 180), draw.uniform(0.0, 0.3)
    await _kill_and_resume(tmp_path, str(tmp_path / "j.sqlite3"), after, moment)


def _holders(journal: str, volley_id: str) -> set[int]:
    """The pids of the workers holding claims on tasks of the volley."""
    store = open_store(journal)
    try:
        return {r.claimed_by.pid for r in store.tasks(volley_id)
                if r.status == "in_progress" and r.claimed_by is not None}
    finally:
        store.close()


async def _pool_with_two_killed(tmp_path: Path, journal: str) -> None:
    """Four `volley work` processes; two killed -9 while each holds claims, the others finish.

    The server answers the first 60 tasks and holds the rest until the kill, so every
    worker is known to hold claims (requests in flight) when two of them die, however
    fast or slow the machine is.  At C=8 a worker holds at most 8 in flight and a claim
    batch of 16, so the 140 unanswered tasks leave open ones for the last worker to start.
    """
    tasks = _task_file(tmp_path, 200)
    async with counting_server(0.01, answer_first=60) as (url, server):
        # create and show start nothing: the CLI entry in a thread of this process.
        created = await trio.to_thread.run_sync(functools.partial(
            rlm_in_process, "volley", "create", "-f", str(tasks), "--journal", journal,
            "--output-format", "json", *_send_flags(url, 8)))
        assert created.returncode == 0, created.stderr
        volley_id = json.loads(created.stdout)["volley_id"]
        workers = [
            await trio.lowlevel.open_process(
                [*RLM, "volley", "work", volley_id, "--journal", journal,
                 "--stale-timeout", "2s", "-q"],
                env=_env(),
            )
            for _ in range(4)
        ]
        pids = {w.pid for w in workers}
        try:
            await _until(workers, lambda: _holders(journal, volley_id) == pids
                         and Counter(_statuses(journal, volley_id).values())["done"] >= 60,
                         "60 tasks were done and all four workers held claims",
                         seen=lambda: f"(tasks: {Counter(_statuses(journal, volley_id).values())},"
                         f" holders {_holders(journal, volley_id)} of {pids})")
            for victim in workers[:2]:
                victim.send_signal(signal.SIGKILL)
            server.release.set()
            with trio.move_on_after(120):
                codes = [await w.wait() for w in workers[2:]]
            if any(w.returncode is None for w in workers[2:]):
                pytest.fail("the surviving workers did not finish the volley within 120 s")
        finally:
            server.release.set()
            for w in workers:
                if w.returncode is None:
                    w.kill()
                    await w.wait()
        assert codes == [0, 0]
        shown = await trio.to_thread.run_sync(functools.partial(
            rlm_in_process, "volley", "show", volley_id, "--journal", journal,
            "--output-format", "json"))
    out = json.loads(shown.stdout)
    assert [t["index"] for t in out["tasks"]] == list(range(1, 201))
    assert all(t["status"] == "succeeded" for t in out["tasks"]), out["summary"]
    store = open_store(journal)
    try:
        recovered = {idx for _, _, _, idx, _ in store.log("stale_recovery")}
        rows = store.tasks(volley_id)
    finally:
        store.close()
    assert recovered, "the killed workers' claims were never recovered"
    assert all(r.status == "done" for r in rows)
    # Only tasks the killed workers held were sent twice; no live worker repeated one.
    repeated = {i for i, n in server.per_task.items() if n > 1}
    assert repeated <= recovered
    assert all(server.per_task[i] >= 1 for i in range(1, 201))


async def test_four_sqlite_workers_two_killed(tmp_path: Path) -> None:
    await _pool_with_two_killed(tmp_path, str(tmp_path / "j.sqlite3"))


async def test_four_postgresql_workers_two_killed(tmp_path: Path, pg_url: str) -> None:
    await _pool_with_two_killed(tmp_path, pg_url)


async def test_a_survivor_takes_a_killed_neighbours_tasks_without_the_stale_timeout(
    tmp_path: Path,
) -> None:
    # Two `volley work` processes on one host at the default --stale-timeout (10 min);
    # one is killed -9 while it holds claims.  The survivor, finding nothing open,
    # sees the holder's process gone and takes its tasks at once.
    journal = str(tmp_path / "j.sqlite3")
    tasks = _task_file(tmp_path, 40)
    async with counting_server(0.01, answer_first=10) as (url, server):
        created = await trio.to_thread.run_sync(functools.partial(
            rlm_in_process, "volley", "create", "-f", str(tasks), "--journal", journal,
            "--output-format", "json", *_send_flags(url, 4)))
        assert created.returncode == 0, created.stderr
        volley_id = json.loads(created.stdout)["volley_id"]
        workers = [
            await trio.lowlevel.open_process(
                [*RLM, "volley", "work", volley_id, "--journal", journal, "-q"], env=_env(),
                stderr=subprocess.PIPE if i else None,
            )
            for i in range(2)
        ]
        pids = {w.pid for w in workers}
        victim, survivor = workers
        try:
            await _until(workers, lambda: _holders(journal, volley_id) == pids,
                         "both workers held claims")
            victim.send_signal(signal.SIGKILL)
            await victim.wait()
            server.release.set()
            with trio.move_on_after(60):  # the stale timeout is 10 minutes
                await survivor.wait()
            if survivor.returncode is None:
                pytest.fail("the survivor did not take the killed worker's tasks within 60 s")
        finally:
            server.release.set()
            for w in workers:
                if w.returncode is None:
                    w.kill()
                    await w.wait()
        assert survivor.stderr is not None
        said = b""
        while chunk := await survivor.stderr.receive_some():
            said += chunk
    assert survivor.returncode == 0, said
    assert b"stale_recovery: volley" in said and b"process on this host is gone" in said, said
    assert set(_statuses(journal, volley_id).values()) == {"done"}
    store = open_store(journal)
    try:
        recovered = {idx for _, _, _, idx, _ in store.log("stale_recovery")}
    finally:
        store.close()
    assert recovered, "the killed worker's claims were never reopened"
    assert {i for i, n in server.per_task.items() if n > 1} <= recovered


async def _stream_text(stream: Any) -> str:
    said = b""
    while chunk := await stream.receive_some():
        said += chunk
    return said.decode()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_worker_paused_past_the_stale_timeout_sends_none_of_the_tasks_it_lost(
    tmp_path: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    """`volley work` P is stopped (SIGSTOP) with requests in flight, more tasks waiting
    for a permit and some buffered; worker Q reopens P's claims after --stale-timeout
    and finishes the volley; then P goes on (SIGCONT).  P talks to server A and Q to
    server B, so whatever A receives after the pause was sent by P: nothing may be.
    The only tasks sent twice are the ones P had in flight when it was stopped."""
    journal = (str(tmp_path / "j.sqlite3") if backend == "sqlite"
               else str(request.getfixturevalue("pg_url")))
    tasks = _task_file(tmp_path, 40)
    async with counting_server(0.01, answer_first=0) as (url_a, a), \
            counting_server(0.01) as (url_b, b):
        created = await trio.to_thread.run_sync(functools.partial(
            rlm_in_process, "volley", "create", "-f", str(tasks), "--journal", journal,
            "--output-format", "json", *_send_flags(url_a, 4)))
        assert created.returncode == 0, created.stderr
        volley_id = json.loads(created.stdout)["volley_id"]
        work = [*RLM, "volley", "work", volley_id, "--journal", journal, "--stale-timeout", "2s"]
        paused = await trio.lowlevel.open_process(
            [*work, "--base-url", url_a], env=_env(), stderr=subprocess.PIPE)
        other: trio.Process | None = None
        try:
            await _until([paused], lambda: a.per_task.total() == 4
                         and _holders(journal, volley_id) == {paused.pid},
                         "the first worker had 4 requests in flight")
            await trio.sleep(0.2)  # its window fills: tasks wait for a permit
            paused.send_signal(signal.SIGSTOP)
            in_flight = set(a.per_task)
            other = await trio.lowlevel.open_process(
                [*work, "--base-url", url_b, "-q"], env=_env(), stderr=subprocess.PIPE)
            with trio.fail_after(60):
                said_other = await _stream_text(other.stderr)
                assert await other.wait() == 0, said_other
            a.release.set()  # the answers to what it had in flight wait for it
            paused.send_signal(signal.SIGCONT)
            with trio.fail_after(60):
                said = await _stream_text(paused.stderr)
                code = await paused.wait()
        finally:
            a.release.set()
            for proc in (paused, other):
                if proc is not None and proc.returncode is None:
                    proc.kill()
                    await proc.wait()
    assert code == 0, said
    assert a.per_task.total() == 4 and set(a.per_task) == in_flight, "sent after the pause"
    assert set(b.per_task) == set(range(1, 41)) and b.per_task.total() == 40
    assert "worker finished: 0 task(s) here" in said, said
    assert "claims were reopened for other workers" in said, said
    assert set(_statuses(journal, volley_id).values()) == {"done"}


@contextmanager
def small_disk(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` (a real filesystem that fills up); the
    test skips where mounting one is not allowed (not root, no CAP_SYS_ADMIN)."""
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def fill_up(disk: Path) -> Path:
    """Write zeros to a file on ``disk`` until no space is left; the file."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)  # unbuffered: nothing left to flush
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


async def test_a_volley_whose_disk_fills_up_says_so_and_resumes_once_there_is_room(
    tmp_path: Path,
) -> None:
    """A real full filesystem mid-volley: `rlm volley` stops with one error naming the
    journal and the full disk (not SQLite's 'cannot rollback'), keeps every result it
    committed, and once there is room again `--resume` finishes without sending any
    committed task again."""
    with small_disk(tmp_path / "disk", "8m") as disk:
        journal = str(disk / "j.sqlite3")
        tasks = _task_file(tmp_path, 80)
        async with counting_server(0.01, answer_first=20) as (url, server):
            proc = await trio.lowlevel.open_process(
                [*RLM, "volley", "-f", str(tasks), "--journal", journal, *_send_flags(url, 8)],
                env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )
            try:
                await _until([proc], lambda: server.holding.is_set() and _done(journal) >= 20,
                             "20 tasks were done")
                filler = fill_up(disk)
                server.release.set()
                with trio.fail_after(60):
                    said = await _stream_text(proc.stderr)
                    code = await proc.wait()
            finally:
                server.release.set()
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            (volley_id,) = _volley_ids(journal)
            done_before = {i for i, s in _statuses(journal, volley_id).items() if s == "done"}
            filler.unlink()
            resumed = await rlm("volley", "--resume", "last", "--journal", journal,
                                "--output-format", "json", *_send_flags(url, 8))
    assert code == 1, said
    assert f"Error: journal {journal}: the disk is full (database or disk is full)" in said, said
    assert "nothing the journal had committed before it is lost" in said, said
    assert "Traceback" not in said and "no transaction is active" not in said, said
    assert len(done_before) >= 20
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert all(t["status"] == "succeeded" for t in json.loads(resumed.stdout)["tasks"])
    assert all(server.per_task[i] == 1 for i in done_before), "a committed task was sent again"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
async def test_a_hangup_stops_a_volley_as_sigterm_does_and_gives_its_claims_back(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """A closed terminal or a dropped ssh connection (SIGHUP) ends `rlm volley` as SIGTERM
    does: exit 130, its unfinished claims given back at once (none left in progress until
    the stale timeout), every committed result kept; a resume sends none of those again.
    Left to its default, SIGHUP killed it as kill -9 does."""
    journal = str(tmp_path / "j.sqlite3")
    tasks = _task_file(tmp_path, 40)
    async with counting_server(0.01, answer_first=10) as (url, server):
        proc = await trio.lowlevel.open_process(
            [*RLM, "volley", "-f", str(tasks), "--journal", journal, *_send_flags(url, 8)],
            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        try:
            await _until([proc], lambda: server.holding.is_set() and _done(journal) >= 10,
                         "10 tasks were done")
            proc.send_signal(sig)
            with trio.fail_after(60):
                said = await _stream_text(proc.stderr)
                code = await proc.wait()
        finally:
            server.release.set()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        (volley_id,) = _volley_ids(journal)
        statuses = _statuses(journal, volley_id)
        resumed = await rlm("volley", "--resume", "last", "--journal", journal,
                            "--output-format", "json", *_send_flags(url, 8))
    assert code == 130, said
    assert "interrupted: 10 completed" in said, said
    assert "in_progress" not in statuses.values()
    done_before = {i for i, status in statuses.items() if status == "done"}
    assert len(done_before) == 10
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert all(t["status"] == "succeeded" for t in json.loads(resumed.stdout)["tasks"])
    assert all(server.per_task[i] == 1 for i in done_before), "a committed task was sent again"


async def test_a_closed_terminal_stops_a_volley_as_sigterm_does(tmp_path: Path) -> None:
    """The terminal a volley runs in goes away (its pty closed, as an ssh drop does: the
    kernel sends SIGHUP, and a shell sends its jobs one more).  The volley gives its
    claims back, keeps its results and exits 130; writing to the dead terminal (EIO)
    neither fails it nor keeps it from ending."""
    journal = str(tmp_path / "j.sqlite3")
    tasks = _task_file(tmp_path, 200)
    master, slave = os.openpty()
    try:
        # setsid -c: a session of its own whose controlling terminal is the pty.
        proc = await trio.lowlevel.open_process(
            ["setsid", "-c", *RLM, "volley", "-f", str(tasks), "--journal", journal,
             "--provider", "fixture", "--fixture-latency", "0.5s", "--max-concurrent", "8",
             "--no-estimate"],
            stdin=slave, stdout=slave, stderr=slave, env=_env(),
        )
    finally:
        os.close(slave)
    terminal = trio.lowlevel.FdStream(master)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, terminal)  # a terminal shows what it is sent
            await _until([proc], lambda: _done(journal) >= 8, "8 tasks were done")
            nursery.cancel_scope.cancel()
        await terminal.aclose()  # the terminal goes away
        proc.send_signal(signal.SIGHUP)  # and the shell passes the hang-up on
        with trio.fail_after(60):
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    (volley_id,) = _volley_ids(journal)
    statuses = _statuses(journal, volley_id)
    assert code == 130
    assert "in_progress" not in statuses.values()
    assert 8 <= list(statuses.values()).count("done") < 200


async def _drain(stream: trio.lowlevel.FdStream) -> None:
    with contextlib.suppress(OSError, trio.ClosedResourceError):
        while await stream.receive_some():
            pass
