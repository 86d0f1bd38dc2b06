"""Volleys through the providers' batch services (``--batch-api``), end to end.

Real `rlm` processes against the fixture server's OpenAI Batch API and Anthropic
Message Batches over loopback, a real SQLite journal, real SIGKILLs.  The server
counts how many created batches held each task's request, so the tests see
whether a task was ever submitted twice.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from rlm.journal import open_store
from rlm.journal.batches import batches
from rlm.testing.batch_service import BatchServiceOptions
from rlm.testing.server import FixtureServer, FixtureServerOptions

RLM = [sys.executable, "-m", "rlm"]
_BLOCK = re.compile(r"^=== \[(\d+)/(\d+)\] (.) ", re.MULTILINE)


@asynccontextmanager
async def batch_server(**options: Any) -> AsyncIterator[FixtureServer]:
    server = FixtureServer(FixtureServerOptions(batch=BatchServiceOptions(**options)))
    async with trio.open_nursery() as nursery:
        server.port = await nursery.start(server.serve)  # type: ignore[attr-defined]
        yield server
        nursery.cancel_scope.cancel()


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("RLM_", "OPENAI_", "ANTHROPIC_"))}


def _flags(server: FixtureServer, dialect: str, journal: Path) -> list[str]:
    port = server.port  # type: ignore[attr-defined]
    base = f"http://127.0.0.1:{port}" + ("/v1" if dialect == "openai" else "")
    return ["--provider", dialect, "--base-url", base, "--model", "fixture",
            "--journal", str(journal)]


def _volley(tmp_path: Path, n: int, *more: str) -> list[str]:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("".join(f"Say hello to task-{i:05d}\n" for i in range(1, n + 1)))
    return ["volley", "-f", str(tasks), "--batch-api", "--batch-poll", "0.05s", "-y", *more]


async def rlm(*args: str, limit: float = 120) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(limit):
        return await trio.run_process([*RLM, *args], capture_stdout=True, capture_stderr=True,
                                      check=False, env=_env())


def _in_order(stdout: bytes, n: int) -> list[str]:
    """The marks (✓/✗) of the task blocks, checked to be tasks 1..n in order."""
    blocks = _BLOCK.findall(stdout.decode())
    assert [int(i) for i, _, _ in blocks] == list(range(1, n + 1))
    return [mark for _, _, mark in blocks]


def _journal_batches(journal: Path) -> list[Any]:
    store = open_store(str(journal))
    try:
        (volley_id,) = [row.volley_id for row in store.volleys()]
        return batches(store, volley_id)
    finally:
        store.close()


def _submitted_once(server: FixtureServer, n: int) -> None:
    counts = server.batches.stats.submitted
    assert sorted(int(cid.rpartition("-t")[2]) for cid in counts) == list(range(1, n + 1))
    assert set(counts.values()) == {1}, "a task was submitted twice"


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_a_batch_volley_is_split_and_every_result_comes_in_order(
    tmp_path: Path, dialect: str
) -> None:
    journal = tmp_path / "j.sqlite3"
    async with batch_server(delay=0.3, error_rate=0.05) as server:
        done = await rlm(*_volley(tmp_path, 150, "--batch-size", "64"),
                         *_flags(server, dialect, journal))
        _submitted_once(server, 150)
        assert server.batches.stats.created == 3  # 64 + 64 + 22
        marks = _in_order(done.stdout, 150)
        failed = marks.count("✗")
        assert 0 < failed < 30 and done.returncode == (1 if failed else 0)
        text = done.stdout.decode()
        assert "(at batch prices)" in text and "batches: 3 at " + dialect in text
        assert "provider batch" in text  # a failed task says which batch and why
        err = done.stderr.decode()
        assert "batch 3: sent: 22 tasks" in err and "succeeded" in err
        shown = await rlm("volley", "show", "last", "--journal", str(journal),
                          "--output-format", "json")
        data = json.loads(shown.stdout)
        assert [b["tasks"] for b in data["batches"]] == [64, 64, 22]
        assert all(b["stage"] == "collected" for b in data["batches"])
        assert sum(b["succeeded"] for b in data["batches"]) == 150 - failed
        assert data["summary"]["batch_tasks"] == 150


#: Where the volley is killed: the first upload or create held (before it took effect at
#: the provider, or after), or while the batches run.
_STAGES = [
    ("openai", "upload", False), ("openai", "upload", True),
    ("openai", "create", False), ("openai", "create", True), ("openai", "waiting", None),
    ("anthropic", "create", False), ("anthropic", "create", True),
    ("anthropic", "waiting", None),
]


@pytest.mark.parametrize(("dialect", "hold", "kept"), _STAGES)
async def test_killed_at_each_stage_and_resumed_no_task_is_sent_twice_or_lost(
    tmp_path: Path, dialect: str, hold: str, kept: bool | None
) -> None:
    journal = tmp_path / "j.sqlite3"
    n = 40
    options: dict[str, Any] = {"delay": 30.0 if hold == "waiting" else 0.2}
    if hold != "waiting":
        options.update(hold=hold, hold_kept=kept)
    async with batch_server(**options) as server:
        args = [*_volley(tmp_path, n, "--batch-size", "16"), *_flags(server, dialect, journal)]
        proc = await trio.lowlevel.open_process([*RLM, *args], env=_env(),
                                                stdout=subprocess.DEVNULL,
                                                stderr=subprocess.PIPE)
        try:
            if hold == "waiting":
                await _until(proc, lambda: server.batches.stats.polls >= 3, "the first polls")
            else:
                await _until(proc, server.batches.holding.is_set, f"the held {hold}")
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        stages = [b.stage for b in _journal_batches(journal)]
        assert stages[0] in ("planned", "uploaded", "creating", "submitted"), stages
        if hold == "waiting":  # the rest may run at once now
            server.batches.options.delay = 0.2
        resumed = await rlm("volley", "--resume", "last", "--batch-poll", "0.05s",
                            *_flags(server, dialect, journal)[:-2], "--journal", str(journal))
        assert resumed.returncode == 0, resumed.stderr.decode()
        assert _in_order(resumed.stdout, n) == ["✓"] * n
        _submitted_once(server, n)
        assert server.batches.stats.created == 3
        if kept and hold == "create":
            assert b"found at the provider" in resumed.stderr


async def _until(proc: trio.Process, ready: Callable[[], bool], what: str) -> None:
    with trio.move_on_after(60):
        while not ready():
            if proc.poll() is not None:
                pytest.fail(f"rlm exited with {proc.returncode} before {what}")
            await trio.sleep(0.02)
        return
    pytest.fail(f"{what} did not happen within 60 s")


async def test_ctrl_c_leaves_the_batch_running_then_cancel_keeps_what_was_answered(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "j.sqlite3"
    # The batch's 300 requests are answered evenly over 30 s: whenever the cancel comes
    # (a few process starts later), part of them are answered and the rest not.
    async with batch_server(delay=30.0) as server:
        args = [*_volley(tmp_path, 300), *_flags(server, "openai", journal)]
        proc = await trio.lowlevel.open_process([*RLM, *args], env=_env(),
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        await _until(proc, lambda: server.batches.stats.polls >= 2, "the first polls")
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(30):
            await proc.wait()
        assert proc.stderr is not None
        err = (await proc.stderr.receive_some(1 << 20)).decode()
        assert proc.returncode == 130
        assert "keep running at the provider" in err and "rlm volley --resume" in err
        assert "rlm volley cancel" in err
        assert server.batches.stats.cancels == 0
        shown = await rlm("volley", "show", "last", "--journal", str(journal))
        assert b"batch 1 batch_" in shown.stdout and b"in_progress" in shown.stdout
        cancelled = await rlm("volley", "cancel", "last", "--journal", str(journal))
        assert cancelled.returncode == 0, cancelled.stderr
        assert server.batches.stats.cancels == 1
        text = cancelled.stdout.decode()
        kept = int(re.search(r"tasks: (\d+) succeeded, (\d+) failed", text).group(1))  # type: ignore[union-attr]
        assert 0 < kept < 300 and "cancelled" in text
        again = await rlm("volley", "cancel", "last", "--journal", str(journal))
        assert again.returncode == 0 and server.batches.stats.cancels == 1  # nothing left


async def test_expired_tasks_fail_with_the_reason_and_retry_live_runs_just_those(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "j.sqlite3"
    async with batch_server(delay=1.0, expire_after=0.5) as server:
        done = await rlm(*_volley(tmp_path, 20, "--retry-live"),
                         *_flags(server, "anthropic", journal))
        assert done.returncode == 0, done.stderr
        assert _in_order(done.stdout, 20) == ["✓"] * 20
        err = done.stderr.decode()
        assert "expired: the batch's 24 h window ended" in err
        live = server.stats.sub_requests  # the chat endpoint: live requests
        assert re.search(rf"batches failed {live} task\(s\); running them again", err)
        assert 0 < live < 20
        assert "tasks at batch prices, the rest at live prices" in done.stdout.decode()


async def test_max_cost_holds_at_batch_prices(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite3"
    prices = tmp_path / "prices.json"
    # Live, 2 cents a request (estimated); at batch prices, 1 cent: $0.105 buys 10.
    prices.write_text('{"fixture": {"input": 0.0, "output": 1e-5, '
                      '"batch_input": 0.0, "batch_output": 5e-6}}')
    async with batch_server(delay=0.1) as server:
        done = await rlm(*_volley(tmp_path, 30, "--max-cost", "0.105", "--max-tokens", "2000",
                                  "--prices", str(prices)),
                         *_flags(server, "openai", journal))
        assert done.returncode == 3, done.stderr
        assert sum(server.batches.stats.submitted.values()) == 10
        assert b"max-cost" in done.stderr and b"at batch prices" in done.stdout
        estimate = await rlm(*_volley(tmp_path, 30, "--estimate", "--max-tokens", "2000",
                                      "--prices", str(prices)),
                             *_flags(server, "openai", tmp_path / "other.sqlite3"))
        assert b"cost:   $0.3000 at batch prices (live: $0.6000)" in estimate.stdout


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_ten_thousand_tasks_killed_while_waiting_and_resumed_come_in_order_once(
    tmp_path: Path, dialect: str
) -> None:
    journal = tmp_path / "j.sqlite3"
    n = 10_000
    async with batch_server(delay=30.0) as server:
        args = [*_volley(tmp_path, n, "-q", "--batch-size", "4000"),
                *_flags(server, dialect, journal)]
        proc = await trio.lowlevel.open_process([*RLM, *args], env=_env(),
                                                stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL)
        try:
            await _until(proc, lambda: server.batches.stats.polls >= 3, "the first polls")
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        assert server.batches.stats.created == 3  # 4000 + 4000 + 2000, all sent
        server.batches.options.delay = 0.5
        done = await rlm("volley", "--resume", "last", "--batch-poll", "0.05s", "-q",
                         *_flags(server, dialect, journal)[:-2], "--journal", str(journal),
                         limit=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert _in_order(done.stdout, n) == ["✓"] * n
        _submitted_once(server, n)
        assert server.batches.stats.created == 3


async def test_from_python_a_batch_volley_runs_and_resumes(tmp_path: Path) -> None:
    from rlm import RLM

    journal = str(tmp_path / "j.sqlite3")
    async with batch_server(delay=0.2) as server:
        port = server.port  # type: ignore[attr-defined]
        model = RLM(provider="anthropic", base_url=f"http://127.0.0.1:{port}", model="fixture",
                    api_key="k")
        kept: list[int] = []
        result = await model.avolley([f"Say hello to task-{i}" for i in range(1, 6)],
                                     batch_api=True, batch_poll=0.05, journal=journal,
                                     on_result=lambda r: kept.append(r.index))
        assert result.status == "succeeded" and sorted(kept) == [1, 2, 3, 4, 5]
        assert result.summary.batch_tasks == 5 and result.batches[0]["stage"] == "collected"
        _submitted_once(server, 5)


def test_rlm_tasks_and_the_fixture_model_are_refused_before_anything_is_stored(
    tmp_path: Path,
) -> None:
    from rlm import RLM
    from rlm.errors import SettingError
    from tests.helpers import rlm_in_process

    journal = tmp_path / "j.sqlite3"
    done = rlm_in_process("volley", "q", "--batch-api", "--rlm", "--provider", "openai",
                          "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                          "--journal", str(journal), "--no-estimate")
    assert done.returncode == 2
    assert "--batch-api cannot send RLM tasks (--rlm)" in done.stderr
    fixture = rlm_in_process("volley", "q", "--batch-api", "--provider", "fixture",
                             "--journal", str(journal), "--no-estimate")
    assert fixture.returncode == 2 and "`rlm fixture-server`" in fixture.stderr
    store = open_store(str(journal))
    try:
        assert store.volleys() == []  # nothing to resume
    finally:
        store.close()
    with pytest.raises(SettingError, match="cannot send RLM tasks"):
        RLM(provider="fixture").volley(["q"], batch_api=True, mode="rlm",
                                       journal=str(journal))
    with pytest.raises(SettingError, match="has no batch service"):
        RLM(provider="fixture").volley(["q"], batch_api=True, journal=str(journal))
