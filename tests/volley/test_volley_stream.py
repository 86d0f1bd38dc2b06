"""Streamed volleys: every task's text as it arrives, attributed to its task.

``avolley_stream`` against the loopback fixture server (real sockets, normal
clock): eight tasks whose streams arrive at different rates, merged as they
come; and ``rlm volley --stream`` on the built-in fixture model.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from collections import defaultdict

import trio

from rlm import RLM
from rlm._events import Event, StreamDiscarded, TextDelta
from rlm.cli._volley_stream import TaskLines
from rlm.streaming import StreamMerger
from rlm.volley.events import TaskFinished
from tests.cli.test_cli import RLM as RLM_COMMAND
from tests.cli.test_cli import rlm
from tests.helpers import serving

FAST = "fixture-fast"
SLOW = [f"fixture-slow{i}" for i in range(7)]
CONTEXT = "the magic number is 4711. " * 20


def tasks() -> list[dict[str, object]]:
    """Eight tasks; task 1 runs on a fast stream, the others on slower ones."""
    return [
        {"prompt": f"Summarise part {i} of the notes in plain words, please", "model": model}
        for i, model in enumerate([FAST, *SLOW], start=1)
    ]


async def test_eight_tasks_stream_at_their_own_rates_attributed_by_task() -> None:
    delays = {FAST: 0.001, **{m: 0.02 + 0.005 * i for i, m in enumerate(SLOW)}}
    seen: list[tuple[float, Event]] = []
    async with serving(chunk_chars=4, model_chunk_delay=delays) as (url, server):
        model = RLM(base_url=url, model="fixture", max_concurrent=8)
        async with model.avolley_stream(tasks(), CONTEXT, cache_warm=False) as events:
            async for event in events:
                seen.append((trio.current_time(), event))
    assert server.stats.streams == 8
    deltas: dict[int, list[tuple[float, TextDelta]]] = defaultdict(list)
    for at, event in seen:
        if isinstance(event, TextDelta):
            assert event.task is not None and event.call_id == f"t{event.task}"
            assert event.task_title == tasks()[event.task - 1]["prompt"]
            deltas[event.task].append((at, event))
    finished = {e.index: e for _, e in seen if isinstance(e, TaskFinished)}
    assert set(deltas) == set(finished) == set(range(1, 9))
    for task, pieces in deltas.items():
        assert len(pieces) > 10
        assert "".join(e.text for _, e in pieces) == finished[task].output
        assert finished[task].status == "succeeded"
    fast_last = deltas[1][-1][0]
    assert all(fast_last < deltas[task][-1][0] for task in range(2, 9))
    # Not round-robin: task 1's whole text came while the slowest task had sent
    # fewer than half of its pieces.
    before = [at for at, _ in deltas[8] if at <= fast_last]
    assert len(before) < len(deltas[8]) // 2, (len(before), len(deltas[8]))


async def test_leaving_avolley_stream_early_cancels_it_and_closes_connections() -> None:
    async with serving(chunk_chars=2, chunk_delay=0.05) as (url, server):
        model = RLM(base_url=url, model="fixture", max_concurrent=8)
        async with model.avolley_stream(tasks(), CONTEXT, cache_warm=False) as events:
            async for event in events:
                if isinstance(event, TextDelta):
                    assert server.stats.open_connections >= 1
                    break
        with trio.fail_after(5):
            while server.stats.open_connections:  # noqa: ASYNC110 (the server's own counter)
                await trio.sleep(0.01)


async def test_rlm_volley_stream_prints_task_lines_and_jsonl_events() -> None:
    prompts = ["What is the magic number?", "Summarise it"]
    common = ["volley", *prompts, "--context", CONTEXT, "--provider", "fixture", "--stream"]
    text = await rlm(*common)
    assert text.returncode == 0, text.stderr
    err = text.stderr.decode()
    assert "[1/2 What is the magic number?] 4711" in err
    assert "[2/2 Summarise it] Done: Summarise it" in err
    assert "=== [1/2] ✓ What is the magic number? ===\n4711" in text.stdout.decode()
    lines = await rlm(*common, "--output-format", "jsonl")
    assert lines.returncode == 0, lines.stderr
    events = [json.loads(line) for line in lines.stdout.decode().splitlines()]
    assert events[0]["event"] == "volley_started" and events[-1]["event"] == "volley_finished"
    assert all("task" in e and "event" in e and "call_id" in e for e in events)
    done = {e["task"]: e for e in events if e["event"] == "task_finished"}
    assert done[1]["status"] == "succeeded" and done[1]["output"] == "4711"
    for task in (1, 2):
        streamed = "".join(
            e["text"] for e in events if e["event"] == "text_delta" and e["task"] == task
        )
        assert streamed == done[task]["output"]


async def test_on_one_terminal_a_task_s_streamed_lines_come_before_its_final_block() -> None:
    """stdout and stderr into one pipe, as on a terminal that shows both."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    prompts = ["What is the magic number?", "Summarise it"]
    with trio.fail_after(60):
        done = await trio.run_process(
            [*RLM_COMMAND, "volley", *prompts, "--context", CONTEXT, "--provider", "fixture",
             "--stream"],
            capture_stdout=True, stderr=subprocess.STDOUT, check=False, env=env,
        )
    out = done.stdout.decode()
    assert done.returncode == 0, out
    for index, prompt in enumerate(prompts, start=1):
        streamed = out.index(f"[{index}/2 {prompt}] ")
        assert streamed < out.index(f"=== [{index}/2] ✓ {prompt} ==="), out


def test_take_nowait_empties_the_buffer_in_order_and_frees_room() -> None:
    merger = StreamMerger(capacity=2)
    for text in "ab":
        merger.put_nowait(TextDelta(text=text, lane="sub", request_id=1, attempt=1))
    taken = merger.take_nowait()
    assert [e.text for e in taken if isinstance(e, TextDelta)] == ["a", "b"]
    assert len(merger) == 0 and merger.take_nowait() == []


def test_task_lines_hold_partial_lines_and_drop_a_cut_attempt() -> None:
    out = io.StringIO()
    lines = TaskLines(50, out)

    def piece(task: int, text: str, attempt: int = 1) -> TextDelta:
        return TextDelta(
            call_id=f"t{task}",
            text=text,
            lane="sub",
            request_id=task,
            attempt=attempt,
            task=task,
            task_title="api.go",
        )

    lines(piece(3, "first \x1b]0;PWNED\x07li"))
    lines(piece(3, "ne\nsecond half-"))
    lines(
        StreamDiscarded(
            call_id="t3", lane="sub", request_id=3, attempt=1, chars=22, reason="cut", task=3
        )
    )
    lines(piece(3, "again\nlast", attempt=2))
    lines(
        TaskFinished(
            call_id="t3",
            index=3,
            status="succeeded",
            duration_s=1.0,
            input_tokens=1,
            output_tokens=1,
            cached_tokens=0,
            cost=None,
            retries=1,
            error=None,
            output="again\nlast",
        )
    )
    assert out.getvalue().splitlines() == [
        "[3/50 api.go] first line",
        "[3/50 api.go] [stream cut after 22 chars (cut): the lines above are void]",
        "[3/50 api.go] again",
        "[3/50 api.go] last",
    ]


def test_task_lines_title_rlm_tasks_and_start_each_step_on_its_own_line() -> None:
    out = io.StringIO()
    lines = TaskLines(2, out, title_of={1: "What is the magic number?", 2: "What is the key?"}.get)

    def root_piece(task: int, request_id: int, text: str) -> TextDelta:
        # An --rlm task's root step: no task field, the task is in the call id.
        return TextDelta(call_id=f"t{task}", text=text, lane="root", request_id=request_id,
                         attempt=1)

    lines(root_piece(2, 1, "Split it.\nThe code prints the hits."))
    lines(root_piece(2, 5, "The search found nothing.\n"))
    lines(root_piece(1, 2, "FINAL(4711)"))
    lines(TextDelta(call_id="t1", depth=1, parent_id="t1", text="4711\n", lane="sub",
                    request_id=3, attempt=1))  # a sub-query's text: not a task line
    lines(TaskFinished(call_id="t1", index=1, status="succeeded", duration_s=1.0,
                       input_tokens=1, output_tokens=1, cached_tokens=0, cost=None, retries=0,
                       error=None, output="4711"))
    assert out.getvalue().splitlines() == [
        "[2/2 What is the key?] Split it.",
        "[2/2 What is the key?] The code prints the hits.",
        "[2/2 What is the key?] The search found nothing.",
        "[1/2 What is the magic number?] FINAL(4711)",
    ]
