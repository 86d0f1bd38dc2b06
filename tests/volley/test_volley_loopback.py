"""Volleys against the real fixture server on 127.0.0.1: hidden caps, rpm, Ctrl-C, the CLI."""

from __future__ import annotations

import functools
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from rlm import RLM
from rlm.testing.server import FixtureServer, FixtureServerOptions
from tests.helpers import rlm_in_process, serving

RLM_BIN = [sys.executable, "-m", "rlm"]


def tasks(n: int) -> list[str]:
    return [f"task {i}" for i in range(1, n + 1)]


class OccupancyServer(FixtureServer):
    """The fixture server, noting how many requests were in flight (itself included) as
    each one was admitted: 3 each time a client filled the hidden cap of 3."""

    def __init__(self, options: FixtureServerOptions) -> None:
        super().__init__(options)
        self.admitted_at: list[int] = []

    async def _complete(self, chat: Any) -> Any:
        self.admitted_at.append(self.stats.in_flight)
        return await super()._complete(chat)


async def test_hidden_cap_of_3_at_16_concurrent_all_succeed_with_few_429s() -> None:
    latency = 0.2  # long enough that client start-up is small beside the limit
    server = OccupancyServer(FixtureServerOptions(
        max_concurrent=3, sub_latency=latency, retry_after=latency))
    async with trio.open_nursery() as nursery:
        url = f"http://127.0.0.1:{await nursery.start(server.serve)}/v1"
        model = RLM(base_url=url, model="fixture", api_key="k", max_concurrent=16, max_retries=10)
        result = await model.avolley(tasks(100))
        nursery.cancel_scope.cancel()
    assert result.status == "succeeded" and result.summary.succeeded == 100
    assert [t.index for t in result.tasks] == list(range(1, 101))
    assert all((t.output or "").startswith(f"Done: task {t.index} (") for t in result.tasks)
    rejected = server.stats.by_status.get(429, 0)
    # 13 of them are the first wave of 16 against a cap of 3, which starting at the
    # configured cap cannot avoid; after it, a probe of 4 now and then.
    assert rejected <= 0.15 * server.stats.total_requests
    assert server.stats.max_in_flight <= 3
    assert result.summary.rate_limited == rejected
    # The cap stays busy, counted instead of timed (a loaded machine slows client and
    # server alike): the server answers in waves of one latency, and a makespan within
    # 1.3x the ideal, ceil(100/3) waves, is at most 45 waves, which takes at least
    # 100 - 2 * 45 waves that fill all 3 slots.
    waves = math.ceil(1.3 * math.ceil(100 / 3))
    assert server.admitted_at.count(3) >= 100 - 2 * waves, server.admitted_at


def cap_kept_busy(server: OccupancyServer, tasks: int) -> bool:
    """Whether the cap of 3 was kept busy enough for a makespan within 1.3x the ideal,
    counted instead of timed (see the test above): at least ``tasks - 2 * waves``
    admissions into a full cap, ``waves`` being 1.3 x ceil(tasks / 3)."""
    waves = math.ceil(1.3 * math.ceil(tasks / 3))
    return server.admitted_at.count(3) >= tasks - 2 * waves


def capped_server() -> OccupancyServer:
    # 16 configured against a hidden cap of 3; latency and Retry-After in the ratio
    # of the 0.2 s and 1 s, halved so the volley takes seconds, not tens.
    return OccupancyServer(FixtureServerOptions(max_concurrent=3, sub_latency=0.1,
                                                retry_after=0.5))


async def test_a_journaled_volley_keeps_the_cut_made_behind_a_hidden_cap(
    tmp_path: Path,
) -> None:
    # The journal counts the live workers every second and gives this one its share:
    # that share used to set the limiter's total, which put the sub lane back to 16
    # each second (67 % of the requests were 429s, 24 % of the tasks failed).
    server = capped_server()
    async with serving(server) as (url, _):
        done = await run_cli(*tasks(200), "--base-url", url, "--model", "fixture", "-q", "-y",
                             "--max-concurrent", "16", "--output-format", "json",
                             "--no-history", env={"RLM_API_KEY": "k",
                                                  "RLM_JOURNAL": str(tmp_path / "j.db")})
    report = json.loads(done.stdout)
    assert report["summary"]["succeeded"] == 200, done.stderr.decode()[-2000:]
    refused = server.stats.by_status.get(429, 0)
    assert refused <= 0.15 * server.stats.total_requests, refused
    assert server.stats.max_in_flight <= 3
    assert cap_kept_busy(server, 200), server.admitted_at


@pytest.mark.slow
async def test_two_volley_work_processes_share_a_hidden_cap(tmp_path: Path) -> None:
    journal = str(tmp_path / "j.db")
    env = {"RLM_API_KEY": "k"}
    server = capped_server()
    async with serving(server) as (url, _):
        created = await run_cli("create", *tasks(200), "--base-url", url, "--model", "fixture",
                                "--max-concurrent", "16", "--journal", journal, env=env)
        volley_id = created.stdout.decode().split()[-1]
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(functools.partial(
                    run_cli, "work", volley_id, "-q", "--base-url", url, "--journal", journal,
                    env=env))
    shown = await run_cli("show", volley_id, "--journal", journal, "--output-format", "json")
    summary = json.loads(shown.stdout)["summary"]
    assert summary["succeeded"] == 200, summary
    refused = server.stats.by_status.get(429, 0)
    assert refused <= 0.15 * server.stats.total_requests, refused
    assert server.stats.max_in_flight <= 3
    assert cap_kept_busy(server, 200), server.admitted_at


async def test_a_strict_120_rpm_server_sees_no_429_with_rpm_120() -> None:
    # A strict token bucket, no burst: a request that arrives late (a loaded machine)
    # charges the bucket from its arrival, and so does the pacer, from when it went.
    # One refusal is tolerated: on a loaded 2-core machine the server may read one
    # request later than the pacing margin, so that the next arrives early by its
    # bucket; that refusal slows the pacer, and there is no second.
    strict: dict[str, Any] = {"rpm": 120, "rpm_strict": True, "sub_latency": 0.01,
                              "retry_after": 0.2}
    async with serving(**strict) as (url, server):
        model = RLM(base_url=url, model="fixture", api_key="k", max_concurrent=16, rpm=120)
        result = await model.avolley(tasks(6))
    assert result.status == "succeeded"
    refused = server.stats.by_status.get(429, 0)
    assert refused <= 1 and server.stats.total_requests == 6 + refused
    # The same volley without --rpm is refused: the server does enforce the limit.
    async with serving(**strict) as (url, server):
        model = RLM(base_url=url, model="fixture", api_key="k", max_concurrent=16, max_retries=0)
        unpaced = await model.avolley(tasks(6))
    assert server.stats.by_status.get(429, 0) >= 4 and unpaced.status == "failed"


async def run_cli(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [*RLM_BIN, "volley", *args],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


async def test_refused_credentials_exit_4_and_stop_sending() -> None:
    async with serving(api_key="right", sub_latency=0.05) as (url, server):
        done = await run_cli(*tasks(30), "--base-url", url, "--model", "fixture", "-y",
                             "--max-concurrent", "4", env={"RLM_API_KEY": "wrong"})
    assert done.returncode == 4
    assert b"refused the key" in done.stderr or b"refused the credentials" in done.stderr
    assert server.stats.total_requests <= 4  # the first wave, nothing after the 401


async def test_sigint_prints_what_completed_in_order_then_exits_130(tmp_path: Path) -> None:
    task_file = tmp_path / "tasks.txt"
    task_file.write_text("\n".join(tasks(40)))
    async with serving(sub_latency=0.2) as (url, server), trio.open_nursery() as nursery:
        command = [*RLM_BIN, "volley", "-f", str(task_file), "--base-url", url, "--model",
                   "fixture", "--max-concurrent", "2", "--output-format", "jsonl", "-y", "-q"]
        proc = await nursery.start(functools.partial(
            trio.run_process, command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, check=False,
        ))
        out = b""
        while out.count(b"\n") < 3:
            out += await proc.stdout.receive_some(65536)
        proc.send_signal(signal.SIGINT)
        async for chunk in proc.stdout:
            out += chunk
        err = b"".join([chunk async for chunk in proc.stderr])
        await proc.wait()
    assert proc.returncode == 130
    lines = [json.loads(line) for line in out.decode().splitlines()]
    *done, summary = lines
    assert [d["index"] for d in done] == list(range(1, len(done) + 1))
    assert all(d["status"] == "succeeded" for d in done) and len(done) >= 3
    assert summary["status"] == "interrupted"
    assert summary["summary"]["succeeded"] == len(done) < 40
    assert b"completed" in err and b"not started" in err
    assert server.stats.total_requests < 40


async def test_estimate_prints_and_sends_nothing() -> None:
    async with serving() as (url, server):
        done = await run_cli(*tasks(12), "--base-url", url, "--model", "gpt-4.1-mini",
                             "--context", "x" * 40_000, "--estimate", "--max-tokens", "100")
    assert done.returncode == 0 and server.stats.total_requests == 0
    text = done.stdout.decode()
    assert "12 tasks" in text and "cost:   $" in text and "cached rate" in text


async def test_without_a_tty_a_large_volley_shows_the_estimate_and_never_asks(
    tmp_path: Path,
) -> None:
    # stdin stays open and silent: a question would hang the process.
    env = {**os.environ, "RLM_API_KEY": "k", "RLM_JOURNAL": str(tmp_path / "j.db")}
    async with serving() as (url, _):
        command = [*RLM_BIN, "volley", *tasks(20), "--base-url", url, "--model", "unpriced-model",
                   "--no-history"]
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                proc = await nursery.start(functools.partial(
                    trio.run_process, command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, check=False, env=env,
                ))
                out = b"".join([chunk async for chunk in proc.stdout])
                err = b"".join([chunk async for chunk in proc.stderr])
    assert proc.returncode == 0, err
    assert b"estimate: 20 tasks" in err and b"Continue?" not in err
    assert out.count(b"=== [") == 20


def test_a_volley_without_a_model_says_which_flag_to_give(tmp_path: Path) -> None:
    done = rlm_in_process("volley", "summarise x", "--journal", str(tmp_path / "j.sqlite"),
                          env={"RLM_MODEL": "", "RLM_PROVIDER": ""}, stdin="")
    assert done.returncode == 2
    assert done.stderr.startswith("Error: no model: pass --model M")
    assert "TypeError" not in done.stderr
