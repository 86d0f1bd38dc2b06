"""``rlm run --stream``: the real CLI, live text on stderr or JSON events on stdout."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rlm._events import CodeExecuted, LLMResponse, StreamDiscarded, TextDelta
from rlm.cli._live import LiveDisplay
from rlm.fixtures.needle import generate_needle
from tests.cli.test_cli import QUESTION, rlm
from tests.helpers import rlm_in_process, serving


def needle(tmp_path: Path) -> tuple[Path, str]:
    fixture = generate_needle(100_000, seed=11)
    path = tmp_path / "haystack.txt"
    path.write_text(fixture.text, encoding="utf-8")
    return path, fixture.answer


async def test_stream_shows_the_root_reply_live_and_the_answer_on_stdout(tmp_path: Path) -> None:
    path, answer = needle(tmp_path)
    done = await rlm(
        "run", QUESTION, "--context-file", str(path), "--provider", "fixture", "--stream"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == answer
    err = done.stderr.decode()
    assert "The context is too long to read at once" in err
    assert "[code]```repl" in err and "```[/code]" in err  # code marked (not a terminal)
    assert "── output of block 1" in err and "sub-queries:" in err


async def test_stream_json_writes_attributed_events_one_per_line(tmp_path: Path) -> None:
    path, answer = needle(tmp_path)
    # The first streamed reply (the root's first step) is cut half-way and retried.
    async with serving(chunk_chars=24, cut_streams=1) as (url, server):
        done = await rlm(
            "run",
            QUESTION,
            "--context-file",
            str(path),
            "--base-url",
            url,
            "--model",
            "fixture:4",
            "--stream",
            "--json",
        )
    assert done.returncode == 0, done.stderr
    assert server.stats.cut_streams == 1
    events = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert events[0]["event"] == "run_started" and events[-1]["event"] == "run_finished"
    assert events[-1]["answer"] == answer
    assert all({"event", "t", "call_id", "parent_id", "depth"} <= set(e) for e in events)
    deltas = [e for e in events if e["event"] == "text_delta"]
    cut = [e for e in events if e["event"] == "stream_discarded"]
    assert len(cut) == 1 and cut[0]["lane"] == "root" and cut[0]["attempt"] == 1
    first = [e["text"] for e in deltas if e["request_id"] == cut[0]["request_id"]]
    retried = [
        e["text"] for e in deltas if e["request_id"] == cut[0]["request_id"] and e["attempt"] == 2
    ]
    assert sum(map(len, first)) - sum(map(len, retried)) == cut[0]["chars"]
    step = next(e for e in events if e["event"] == "step_completed")
    assert step["reply_chars"] == sum(map(len, retried))  # the cut text is in no reply
    assert "".join(retried).startswith("The context is too long")
    subs = {e["request_id"] for e in deltas if e["lane"] == "sub"}
    assert len(subs) == 4 and {e["depth"] for e in deltas if e["lane"] == "sub"} == {1}


async def test_output_format_jsonl_streams_events_and_json_keeps_one_object(
    tmp_path: Path,
) -> None:
    path, answer = needle(tmp_path)
    common = ["run", QUESTION, "--context-file", str(path), "--provider", "fixture", "--stream"]
    lines = await rlm(*common, "--output-format", "jsonl")
    assert lines.returncode == 0, lines.stderr
    events = [json.loads(line) for line in lines.stdout.decode().splitlines()]
    assert events[-1]["event"] == "run_finished" and events[-1]["answer"] == answer
    assert events[0]["config"]["stream"] is True  # the run streamed: its settings say so
    assert all({"event", "call_id", "parent_id", "depth"} <= set(e) for e in events)
    root = "".join(e["text"] for e in events if e["event"] == "text_delta" and e["lane"] == "root")
    assert root.startswith("The context is too long")
    whole = await rlm(*common, "--output-format", "json")
    assert whole.returncode == 0, whole.stderr
    assert json.loads(whole.stdout)["answer"] == answer  # one object on stdout
    assert "[code]```repl" in whole.stderr.decode()  # the live reply on stderr


def test_json_and_another_output_format_is_a_usage_error(tmp_path: Path) -> None:
    path, _ = needle(tmp_path)
    done = rlm_in_process("run", QUESTION, "--context-file", str(path), "--provider",
                          "fixture", "--json", "--output-format", "jsonl")
    assert done.returncode == 2
    assert "--json is --output-format json; give --output-format jsonl alone" in done.stderr
    assert "Traceback" not in done.stderr


def test_live_display_marks_code_split_across_pieces_on_a_terminal() -> None:
    out = io.StringIO()
    display = LiveDisplay(out, tty=True)
    for piece in ["Plan.\n``", "`repl\nprint(1)\n`", "``\nafter"]:
        display(TextDelta(call_id="root", text=piece, lane="root", request_id=1, attempt=1))
    display(
        CodeExecuted(
            call_id="root",
            iteration=1,
            block=1,
            ok=True,
            output="1\n",
            output_chars=2,
            error=None,
            final=False,
            duration_s=0.1,
        )
    )
    text = out.getvalue()
    assert "Plan.\n```\x1b[36mrepl\nprint(1)\n\x1b[0m" in text  # code cyan, prose plain
    assert "\x1b[36m```\x1b[0m\nafter" in text
    assert text.index("after") < text.index("output of block 1")


def test_live_display_marks_where_a_pipelined_reply_goes_on_after_an_output() -> None:
    out = io.StringIO()
    display = LiveDisplay(out, tty=False)

    def root(text: str, request_id: int = 1) -> TextDelta:
        return TextDelta(call_id="root", text=text, lane="root", request_id=request_id, attempt=1)

    display(root("```repl\nprint(2)\n```\nThe code prints how many chunks had a"))
    display(CodeExecuted(call_id="root", iteration=1, block=1, ok=True, output="2\n",
                         output_chars=2, error=None, final=False, duration_s=0.1))
    display(root(" value."))
    display(root("FINAL(2)", request_id=2))
    assert out.getvalue().split("[/code]\n")[1].splitlines() == [
        "The code prints how many chunks had a",
        "── output of block 1 (0.10s) ──",
        "2",
        "── root step (request 1) goes on ──",
        " value.",
        "── root step (request 2) ──",
        "FINAL(2)",
    ]


def test_live_display_status_for_subs_and_a_note_for_a_cut_root_stream() -> None:
    out = io.StringIO()
    display = LiveDisplay(out, tty=False)
    display(TextDelta(call_id="root", depth=1, text="abc", lane="sub", request_id=2, attempt=1))
    display(
        LLMResponse(
            call_id="root",
            depth=1,
            request_id=2,
            lane="sub",
            model="m",
            provider="p",
            status="ok",
            http_status=200,
            latency_s=0.1,
            input_tokens=1,
            output_tokens=1,
        )
    )
    display(TextDelta(call_id="root", text="half a rep", lane="root", request_id=1, attempt=1))
    display(
        StreamDiscarded(
            call_id="root", lane="root", request_id=1, attempt=1, chars=10, reason="cut"
        )
    )
    text = out.getvalue()
    assert "abc" not in text  # sub-query text never interleaves with the root's
    # No retry is promised: the retry, if one comes, says so itself.
    assert "half a rep\n[stream cut after 10 chars (cut): the text above is void]" in text
    assert "retrying" not in text
