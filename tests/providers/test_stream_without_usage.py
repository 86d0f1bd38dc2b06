"""A server whose streams carry no usage (llama.cpp's, whatever ``stream_options`` asks):
the tokens are estimated, and the summary, ``--json`` and the trace say they are
(issue 31, item 4).  Before, such a run reported 0 tokens in and out, and token budgets
counted nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import trio

from rlm import RLM
from rlm._traffic.usage import usage_or_estimate
from rlm.providers.base import Completion, CompletionRequest
from tests.helpers import serving

NEEDLE = "filler. " * 300 + "The magic number is 6174. " + "more. " * 50


async def test_streams_without_usage_are_counted_at_an_estimate_and_say_so(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "trace.jsonl"
    async with serving(stream_usage=False) as (url, _):
        model = RLM(base_url=url, model="fixture:4", stream=True, trace_path=str(trace))
        result = await model.acompletion("What is the magic number?", NEEDLE)
    assert result.answer == "6174"
    assert result.usage.input_tokens > 1_000 and result.usage.output_tokens > 0
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    # The root's steps stream (sub-queries, answered whole, carry their usage).
    streamed = [r for r in records if r["event"] == "llm_response" and r["status"] == "ok"
                and r["metadata"].get("streamed")]
    assert streamed and all(r["metadata"]["usage"] == "estimated" for r in streamed)
    assert all(r["input_tokens"] > 1_000 and r["output_tokens"] > 0 for r in streamed)
    assert result.usage_detail["estimated_calls"] == len(streamed)
    finished = next(r for r in records if r["event"] == "run_finished")
    assert finished["usage_detail"]["estimated_calls"] == len(streamed)


async def test_streams_with_usage_are_counted_exactly() -> None:
    async with serving() as (url, _):
        model = RLM(base_url=url, model="fixture:4", stream=True)
        result = await model.acompletion("What is the magic number?", NEEDLE)
    assert result.usage_detail["estimated_calls"] == 0 and result.usage.output_tokens > 0


def test_the_estimate_is_characters_over_four() -> None:
    request = CompletionRequest(messages=[{"role": "user", "content": "x" * 400}], model="m")
    missing = Completion(text="y" * 10, model="m", metadata={"usage": "missing"})
    estimated = usage_or_estimate(request, missing)
    assert (estimated.input_tokens, estimated.output_tokens) == (100, 3)
    assert estimated.metadata == {"usage": "estimated"}
    counted = Completion(text="y", model="m", input_tokens=7, output_tokens=1)
    assert usage_or_estimate(request, counted) is counted


async def test_a_volley_summary_says_its_tokens_are_approximate(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    async with serving(stream_usage=False) as (url, _):
        with trio.fail_after(120):
            done = await trio.run_process(
                [sys.executable, "-m", "rlm", "volley", "first task", "second task",
                 "--base-url", url, "--model", "fixture", "--stream",
                 "--journal", str(tmp_path / "j.sqlite3")],
                capture_stdout=True, capture_stderr=True, check=False,
                stdin=subprocess.DEVNULL, env=env,
            )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr
    assert "tokens: ~" in out and "out (estimated: the server sent no usage for 2 answers" in out
    assert "0 in (0 cached), 0 out" not in out


def test_the_run_summary_marks_estimated_tokens() -> None:
    from rlm._events import RunFinished
    from rlm.cli._progress import _summary

    finished = RunFinished(
        call_id="root", parent_id=None, depth=0, status="answered", answer="x", error=None,
        duration_s=1.0, llm_calls=3, input_tokens=1200, output_tokens=80,
        usage_detail={"cost": 0.0, "unpriced_calls": 3, "estimated_calls": 2},
    )
    line = _summary(finished)
    assert "~1,200 in / 80 out tokens (estimated: for 2 answers, the server sent no usage, " \
        "so token budgets are approximate)" in line
