"""`rlm volley work --pool N`: no sibling outlives the pool's first worker, however it dies.

Real `rlm` processes, a real SQLite journal, real SIGKILLs; the fixture server
over loopback counts requests per task, so the test sees which were paid twice.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import trio

from rlm.cli._pool_link import PARENT_ENV
from rlm.journal import open_store
from tests.e2e.test_journal_volley_e2e import (
    RLM,
    _env,
    _holders,
    _send_flags,
    _statuses,
    _task_file,
    _until,
    counting_server,
    rlm,
)
from tests.helpers import pid_alive, rlm_in_process


def _registered(journal: str, volley_id: str) -> set[int]:
    """The pids of the workers registered on the volley (holding claims or not)."""
    with contextlib.closing(sqlite3.connect(journal)) as db:
        rows = db.execute("SELECT pid FROM workers WHERE volley_id = ?", (volley_id,))
        return {int(pid) for (pid,) in rows}


async def _gone(pids: set[int], limit_s: float) -> set[int]:
    """The pids of ``pids`` still alive after waiting (bounded) for them all to end."""
    with trio.move_on_after(limit_s):
        while any(pid_alive(pid) for pid in pids):  # noqa: ASYNC110 (not our children)
            await trio.sleep(0.05)
    return {pid for pid in pids if pid_alive(pid)}


async def test_a_pool_whose_first_worker_is_killed_leaves_no_worker_and_resumes_once(
    tmp_path: Path,
) -> None:
    journal = str(tmp_path / "j.sqlite3")
    tasks = _task_file(tmp_path, 60)
    # The server answers 12 tasks, then holds every request: the workers that hold
    # claims are blocked on requests in flight when the first one is killed. (A sibling
    # that joins after the others filled the volley's --max-concurrent holds none; it
    # must die with the first worker all the same.)
    async with counting_server(0.01, answer_first=12) as (url, server):
        created = await trio.to_thread.run_sync(
            functools.partial(
                rlm_in_process,
                "volley",
                "create",
                "-f",
                str(tasks),
                "--journal",
                journal,
                "--output-format",
                "json",
                *_send_flags(url, 6),
            )
        )
        assert created.returncode == 0, created.stderr
        volley_id = json.loads(created.stdout)["volley_id"]
        pool = await trio.lowlevel.open_process(
            [*RLM, "volley", "work", volley_id, "--journal", journal, "--pool", "3", "-q"],
            env=_env(),
        )
        siblings: set[int] = set()
        try:
            await _until(
                [pool],
                lambda: (
                    len(_registered(journal, volley_id)) == 3
                    and Counter(_statuses(journal, volley_id).values())["done"] >= 12
                ),
                "12 tasks were done and all three workers had started",
                seen=lambda: (
                    f"(workers {_registered(journal, volley_id)}, "
                    f"holders {_holders(journal, volley_id)})"
                ),
            )
            siblings = _registered(journal, volley_id) - {pool.pid}
            assert len(siblings) == 2
            done_before = {i for i, s in _statuses(journal, volley_id).items() if s == "done"}
            pool.send_signal(signal.SIGKILL)
            await pool.wait()
            left = await _gone(siblings, 30)
            assert not left, f"pool workers {left} outlived the pool's first worker"
        finally:
            server.release.set()
            if pool.returncode is None:
                pool.kill()
                await pool.wait()
            for pid in siblings:
                if pid_alive(pid):
                    os.kill(pid, signal.SIGKILL)
        # What the killed workers held is taken up by the next worker, at once.
        resumed = await rlm("volley", "work", volley_id, "--journal", journal, "-q")
        assert resumed.returncode == 0, resumed.stderr.decode()
    shown = await trio.to_thread.run_sync(
        functools.partial(
            rlm_in_process,
            "volley",
            "show",
            volley_id,
            "--journal",
            journal,
            "--output-format",
            "json",
        )
    )
    out = json.loads(shown.stdout)
    assert [t["index"] for t in out["tasks"]] == list(range(1, 61))
    assert all(t["status"] == "succeeded" for t in out["tasks"]), out["summary"]
    assert set(server.per_task) == set(range(1, 61))
    repeated = {i for i, sent in server.per_task.items() if sent > 1}
    assert not repeated & done_before, "a task done before the kill was sent again"


def _worker_linked_to_this_process(
    journal: Path, volley_id: str, parent: int, read_end: int, ref: str | None = None
) -> subprocess.Popen[bytes]:
    """`rlm volley work` started as a pool sibling whose "first worker" is ``parent``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    env[PARENT_ENV] = f"{parent}:{read_end}:{volley_id}"
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlm",
            "volley",
            "work",
            ref or volley_id,
            "--journal",
            str(journal),
            "-q",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        pass_fds=(read_end,),
    )


def _create(journal: Path, *args: str) -> str:
    done = rlm_in_process("volley", "create", "--journal", str(journal), *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _counts(journal: Path, volley_id: str) -> dict[str, int]:
    store = open_store(str(journal))
    try:
        return {state: n for state, n in store.volley(volley_id).counts.items()}
    finally:
        store.close()


def test_a_sibling_stops_when_its_parents_pipe_closes(tmp_path: Path) -> None:
    # The portable link alone: this process is the sibling's parent and stays alive
    # (no parent-death signal fires); closing the pipe's write end is its end.
    journal = tmp_path / "j.sqlite3"
    volley_id = _create(
        journal,
        *[f"task {i}" for i in range(20)],
        "--provider",
        "fixture",
        "--fixture-latency",
        "1s",
        "--max-concurrent",
        "2",
    )
    read_end, write_end = os.pipe()
    worker = _worker_linked_to_this_process(journal, volley_id, os.getpid(), read_end)
    os.close(read_end)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _counts(journal, volley_id)["in_progress"]:
            assert worker.poll() is None, worker.communicate()[1]
            time.sleep(0.05)
        os.close(write_end)
        write_end = -1
        _, err = worker.communicate(timeout=30)
        assert worker.returncode == 130, err
        assert b"the pool's first worker (pid" in err and b"is gone" in err
        counts = _counts(journal, volley_id)
        assert counts["in_progress"] == 0 and counts["open"] > 0  # given back, not held
    finally:
        if write_end >= 0:
            os.close(write_end)
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_a_sibling_whose_parent_died_before_it_linked_takes_no_task(tmp_path: Path) -> None:
    # The parent died between fork and the parent-death signal: the sibling's parent is
    # then another process (here: this one, not the pid named), and it must not work alone.
    journal = tmp_path / "j.sqlite3"
    volley_id = _create(journal, "a", "b", "--provider", "fixture")
    read_end, write_end = os.pipe()
    try:
        ghost = subprocess.Popen([sys.executable, "-c", "pass"])
        ghost.wait()  # a pid that was a process and is gone
        worker = _worker_linked_to_this_process(journal, volley_id, ghost.pid, read_end)
        _, err = worker.communicate(timeout=60)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert worker.returncode == 130, err
    assert err.decode().startswith(f"Error: the pool's first worker (pid {ghost.pid}) is gone")
    assert _counts(journal, volley_id) == {"open": 2, "in_progress": 0, "done": 0, "failed": 0}


def test_a_sibling_works_on_the_pools_volley_not_on_what_last_names_by_now(
    tmp_path: Path,
) -> None:
    # `rlm volley work last --pool 2` while someone creates another volley: the sibling
    # starts a second later, and "last" must not send it to the new volley.
    journal = tmp_path / "j.sqlite3"
    pools = _create(journal, "a", "b", "--provider", "fixture")
    newer = _create(journal, "c", "--provider", "fixture")
    read_end, write_end = os.pipe()
    try:
        worker = _worker_linked_to_this_process(journal, pools, os.getpid(), read_end, "last")
        _, err = worker.communicate(timeout=60)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert worker.returncode == 0, err
    assert _counts(journal, pools)["done"] == 2
    assert _counts(journal, newer)["open"] == 1
