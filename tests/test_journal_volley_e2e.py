"""Volleys that survive kill -9, and worker pools that share one journal.

Real `rlm` processes against the fixture server over loopback, real SQLite and
PostgreSQL journals, real SIGKILLs.  The server counts requests per task, so
the tests see which tasks were paid for twice.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from rlm.journal import open_store
from rlm.testing.server import FixtureServer, FixtureServerOptions
from tests.journal_fixtures import pg_server, pg_url  # noqa: F401  (fixtures)

RLM = [sys.executable, "-m", "rlm"]
_TASK = re.compile(r"task-(\d{4})")


class CountingServer(FixtureServer):
    """The fixture server, counting chat requests per task tag (``task-0042``)."""

    def __init__(self, options: FixtureServerOptions) -> None:
        super().__init__(options)
        self.per_task: Counter[int] = Counter()

    async def _complete(self, chat: Any) -> Any:
        match = _TASK.search(chat.messages[-1]["content"])
        if match:
            self.per_task[int(match.group(1))] += 1
        return await super()._complete(chat)


@asynccontextmanager
async def counting_server(latency: float) -> AsyncIterator[tuple[str, CountingServer]]:
    server = CountingServer(FixtureServerOptions(sub_latency=latency))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        yield f"http://127.0.0.1:{port}/v1", server
        nursery.cancel_scope.cancel()


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}


async def rlm(*args: str) -> trio.CompletedProcess[bytes]:
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


async def _kill_and_resume(tmp_path: Path, journal: str, after: int, moment: float) -> set[int]:
    """Plain `rlm volley` killed ``moment`` s after ``after`` tasks were done, then resumed."""
    tasks = _task_file(tmp_path, 200)
    async with counting_server(0.2) as (url, server):
        proc = await trio.lowlevel.open_process(
            [*RLM, "volley", "-f", str(tasks), "--journal", journal, *_send_flags(url, 16)],
            env=_env(),
            stdout=subprocess.DEVNULL,
        )
        try:
            with trio.fail_after(60):
                # Another process writes the journal: nothing here could set an Event.
                while _done(journal) < after:
                    assert proc.returncode is None, f"the volley ended early ({proc.returncode})"
                    await trio.sleep(0.01)
            await trio.sleep(moment)
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        (volley_id,) = _volley_ids(journal)
        before = _statuses(journal, volley_id)
        done_before = {i for i, s in before.items() if s == "done"}
        resumed = await rlm("volley", "--resume", "last", "--journal", journal,
                            "--output-format", "json", *_send_flags(url, 16))
    assert resumed.returncode == 0, resumed.stderr.decode()
    out = json.loads(resumed.stdout)
    assert out["volley_id"] == volley_id
    assert [t["index"] for t in out["tasks"]] == list(range(1, 201))
    assert all(t["status"] == "succeeded" for t in out["tasks"])
    assert all(f"task-{t['index']:04d}" in t["prompt"] for t in out["tasks"])
    assert set(server.per_task) == set(range(1, 201))
    repeated = {i for i, n in server.per_task.items() if n > 1}
    assert not repeated & done_before, "a task done before the kill was sent again"
    assert set(_statuses(journal, volley_id).values()) == {"done"}
    return done_before


@pytest.mark.parametrize("after", [0, 100])
async def test_a_killed_volley_resumes_without_paying_twice(tmp_path: Path, after: int) -> None:
    done_before = await _kill_and_resume(tmp_path, str(tmp_path / "j.sqlite3"), after, 0.05)
    assert after <= len(done_before) < 200, len(done_before)  # killed mid-run


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20))
async def test_twenty_random_kill_moments(tmp_path: Path, seed: int) -> None:
    draw = random.Random(seed)
    after, moment = draw.randrange(0, 180), draw.uniform(0.0, 0.3)
    await _kill_and_resume(tmp_path, str(tmp_path / "j.sqlite3"), after, moment)


async def _pool_with_two_killed(tmp_path: Path, journal: str) -> None:
    tasks = _task_file(tmp_path, 500)
    async with counting_server(0.01) as (url, server):
        created = await rlm("volley", "create", "-f", str(tasks), "--journal", journal,
                            "--output-format", "json", *_send_flags(url, 32))
        assert created.returncode == 0, created.stderr.decode()
        volley_id = json.loads(created.stdout)["volley_id"]
        workers = [
            await trio.lowlevel.open_process(
                [*RLM, "volley", "work", volley_id, "--journal", journal,
                 "--stale-timeout", "2s", "-q"],
                env=_env(),
            )
            for _ in range(4)
        ]
        try:
            with trio.fail_after(60):
                while sum(s == "done" for s in _statuses(journal, volley_id).values()) < 60:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            for victim in workers[:2]:
                victim.send_signal(signal.SIGKILL)
            with trio.fail_after(120):
                codes = [await w.wait() for w in workers[2:]]
        finally:
            for w in workers:
                if w.returncode is None:
                    w.kill()
                    await w.wait()
        assert codes == [0, 0]
        shown = await rlm("volley", "show", volley_id, "--journal", journal,
                          "--output-format", "json")
    out = json.loads(shown.stdout)
    assert [t["index"] for t in out["tasks"]] == list(range(1, 501))
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
    assert all(server.per_task[i] >= 1 for i in range(1, 501))


async def test_four_sqlite_workers_two_killed(tmp_path: Path) -> None:
    await _pool_with_two_killed(tmp_path, str(tmp_path / "j.sqlite3"))


async def test_four_postgresql_workers_two_killed(tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    await _pool_with_two_killed(tmp_path, pg_url)
