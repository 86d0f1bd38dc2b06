"""Budgets, timeouts and Ctrl-C end to end: the real CLI against a loopback fixture server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from rlm import RLM, prompts
from rlm._events import Event, RunFinished
from rlm.fixtures.needle import generate_needle
from rlm.providers.base import CompletionRequest
from rlm.testing.provider import FunctionProvider
from tests.helpers import pid_alive, repl, sandbox_pids, serving

QUESTION = "What is the magic number?"
RLM_CMD = [sys.executable, "-m", "rlm", "run", QUESTION]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}


@pytest.fixture
def haystack(tmp_path: Path) -> Path:
    path = tmp_path / "haystack.txt"
    path.write_text(generate_needle(100_000, seed=4).text)
    return path


async def run_cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(60):
        return await trio.run_process(
            [*RLM_CMD, *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=clean_env(),
        )


@pytest.mark.parametrize("faults", [{}, {"fail_500": 0.3, "seed": 3}])
async def test_max_llm_calls_5_with_a_16_way_batch(
    haystack: Path, faults: dict[str, Any]
) -> None:
    async with serving(**faults) as (url, server):
        done = await run_cli(
            "--context-file",
            str(haystack),
            "--base-url",
            url,
            "--model",
            "fixture:16",
            "--max-llm-calls",
            "5",
            "--json",
        )
    assert done.returncode == 3, done.stderr.decode()
    assert server.stats.total_requests <= 5
    out = json.loads(done.stdout)
    assert out["status"] == "budget_exceeded" and out["usage"]["llm_calls"] <= 5
    assert "--max-llm-calls 5" in out["error"]


async def test_budget_exhaustion_is_visible_to_model_code() -> None:
    code = (
        "print(budget()['llm_calls'])\n"
        "try:\n    llm_query_batched(['a'] * 10)\n"
        "except BudgetExceeded as e:\n    print('refused:', e)\n"
        "answer = 'partial'"
    )
    provider = FunctionProvider.scripted([repl(code), "FINAL(done)"])
    model = RLM(providers={"root": provider, "sub": provider}, max_llm_calls=3)
    result = await model.acompletion("q", "ctx")
    fed_back = provider.root_requests()[1].messages[-1]["content"]
    assert "refused: a batch of 10 sub-queries needs 10 LLM calls, but only 2" in fed_back
    assert fed_back.splitlines()[4].strip() == "2" or "\n2\n" in fed_back
    assert result.status == "answered" and result.usage.llm_calls == 2
    refused = [e for e in result.trace if e["event"] == "budget_refused"]
    assert [(e["scope"], e["items"]) for e in refused] == [("batch", 10)]


async def test_a_run_stopped_by_the_budget_keeps_its_answer_variable() -> None:
    steps = [repl("answer = 'half-way'"), repl("print(1)"), "FINAL(x)"]
    provider = FunctionProvider.scripted(steps)
    model = RLM(providers={"root": provider, "sub": provider}, max_llm_calls=2)
    result = await model.acompletion("q", "ctx")
    assert result.status == "budget_exceeded"
    assert result.answer == "half-way"
    refused = [e for e in result.trace if e["event"] == "budget_refused"]
    assert refused and refused[0]["scope"] == "request" and refused[0]["lane"] == "root"
    assert all(not pid_alive(p) for p in sandbox_pids(result.trace))


async def test_a_final_extract_step_runs_when_the_budget_allows_one() -> None:
    big_step = repl("answer = 'x' * 10\nprint('the needle is 42')")

    def root(request: CompletionRequest) -> str:
        messages = request.messages
        if "budget is exhausted" in messages[-1]["content"]:
            return "FINAL(42 from extract)"
        return big_step

    provider = FunctionProvider.scripted(root)
    # Each regular step re-sends a growing history; the small extract request still fits.
    model = RLM(
        providers={"root": provider, "sub": provider}, max_input_tokens=3_400, max_tokens=50
    )
    result = await model.acompletion("q", "ctx")
    assert result.status == "budget_exceeded"
    assert result.answer == "42 from extract"


async def test_timeout_ends_a_slow_run_with_exit_3(haystack: Path) -> None:
    async with serving(sub_latency=10.0) as (url, _):
        started = trio.current_time()
        done = await run_cli(
            "--context-file",
            str(haystack),
            "--base-url",
            url,
            "--model",
            "fixture",
            "--timeout",
            "1",
            "--json",
        )
        elapsed = trio.current_time() - started
    assert done.returncode == 3, done.stderr.decode()
    assert json.loads(done.stdout)["status"] == "timeout"
    assert elapsed < 10  # it did not wait for the 10 s sub-queries


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
async def test_ctrl_c_during_a_slow_fan_out_exits_130_and_leaves_no_process(
    haystack: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    trace = tmp_path / "trace.jsonl"
    async with serving(sub_latency=30.0) as (url, server):
        with trio.fail_after(30):
            proc = await trio.lowlevel.open_process(
                [
                    *RLM_CMD,
                    "--context-file",
                    str(haystack),
                    "--base-url",
                    url,
                    "--model",
                    "fixture",
                    "--trace",
                    str(trace),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=clean_env(),
            )
            while server.stats.in_flight < 4:  # noqa: ASYNC110 - polling another process's effect
                await trio.sleep(0.05)
            sent_at = trio.current_time()
            proc.send_signal(sig)
            code = await proc.wait()
            waited = trio.current_time() - sent_at
    assert code == 130
    assert waited < 10  # generous guard; the figure is reported by the benchmark notes
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert events[-1]["event"] == "run_finished" and events[-1]["status"] == "interrupted"
    pids = [e["pid"] for e in events if e["event"] == "sandbox_started"]
    assert pids and not any(pid_alive(pid) for pid in pids)


async def test_interrupt_during_the_extract_step_stops_it() -> None:
    def is_extract(request: CompletionRequest) -> bool:
        return "budget is exhausted" in request.messages[-1]["content"]

    provider = FunctionProvider.scripted(
        lambda r: repl("answer = 'partial'\nprint('x' * 10)"),
        latency=lambda r: 5.0 if is_extract(r) else 0.0,
    )
    model = RLM(
        providers={"root": provider, "sub": provider},
        # Room for the first two steps (each re-sends the system prompt), not the third.
        max_input_tokens=2 * (len(prompts.load("system")) // 4) + 214,
        max_tokens=50,
    )

    async def interrupt_during_extract() -> None:
        while not any(is_extract(r) for r in provider.requests):  # noqa: ASYNC110
            await trio.sleep(0.05)
        model.interrupt()

    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(interrupt_during_extract)
        result = await model.acompletion("q", "ctx")
        nursery.cancel_scope.cancel()  # a run that never reached its extract step fails below
    assert any(is_extract(r) for r in provider.requests)
    assert trio.current_time() - started < 4.0  # did not wait for the 5 s extract reply
    assert result.status == "budget_exceeded" and result.answer == "partial"


async def test_a_cancelled_run_still_reports_what_it_sent() -> None:
    provider = FunctionProvider.scripted(
        [repl("print(1)"), repl("print(2)")],
        latency=lambda r: 0.0 if len(r.messages) < 4 else 30.0,
    )
    seen: list[Event] = []
    model = RLM(providers={"root": provider, "sub": provider}, sinks=[seen.append])
    with trio.move_on_after(2.0):
        await model.acompletion("q", "ctx")
    finished = [e for e in seen if isinstance(e, RunFinished)]
    assert len(finished) == 1
    assert finished[0].status == "interrupted" and finished[0].llm_calls == 2


def test_setup_errors_fail_at_construction_not_mid_run() -> None:
    from rlm.errors import UsageError

    with pytest.raises(UsageError, match="has no price"):
        RLM(provider="fixture", model="no-such-model", max_cost=1.0)
    with pytest.raises(UsageError, match="lone surrogate"):
        RLM(provider="fixture").completion("q", "bad \ud800 text")
