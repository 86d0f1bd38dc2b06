"""``rlm chat``'s session settings: history size and the whole chat's budget, as flags."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rlm._config import DEFAULT_MAX_HISTORY_CHARS, SessionOptions
from rlm.fixtures import generate_needle
from tests.helpers import rlm_in_process

NEEDLE = generate_needle(chars=60_000, seed=3)
RLM_BIN = str(Path(sys.executable).with_name("rlm"))


def test_chat_flags_for_the_history_and_the_total_budget_reach_the_session(
    tmp_path: Path,
) -> None:
    context = tmp_path / "big.txt"
    context.write_text(NEEDLE.text)
    chunks = "How many chunks did you search?"
    done = subprocess.run(
        [RLM_BIN, "chat", "--context-file", str(context), "--provider", "fixture", "--json",
         "--max-history-chars", "1000", "--max-total-llm-calls", "20"],
        input=f"What is the magic number?\n{chunks}\n{chunks}\n",
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    first, second, third = (json.loads(line) for line in done.stdout.splitlines())
    assert (first["answer"], first["usage"]["llm_calls"]) == (NEEDLE.answer, 17)
    # The history passed 1,000 chars: one summary request, then the two steps of a follow-up.
    assert (second["answer"], second["usage"]["llm_calls"]) == ("16", 3)
    assert third.get("answer") is None and third["status"] != "answered"  # 20 spent: none left
    assert "--max-total-llm-calls 20 reached" in third["error"]  # the chat's flag, not the query's
    assert "--max-llm-calls" not in third["error"]


def test_chat_session_flags_show_in_help_with_their_defaults_and_bad_values_name_the_flag(
    tmp_path: Path,
) -> None:
    # One default, in the settings table: the flag shows it and the API uses it.
    assert SessionOptions().max_history_chars == DEFAULT_MAX_HISTORY_CHARS
    shown = rlm_in_process("chat", "--help").stdout
    for flag in ("--max-history-chars N|none", "--max-total-llm-calls N|none",
                 "--max-total-cost USD|none"):
        assert flag in shown
    assert f"[default: {DEFAULT_MAX_HISTORY_CHARS}]" in shown
    context = tmp_path / "small.txt"
    context.write_text("small")
    for extra, message in [
        (["--max-history-chars", "10"], "--max-history-chars must be at least 1,000"),
        (["--max-total-llm-calls", "0"], "--max-total-llm-calls must be a positive integer"),
        (["--max-total-cost", "-1"], "--max-total-cost must be a positive amount of USD"),
    ]:
        done = rlm_in_process("chat", "--context-file", str(context), "--provider", "fixture",
                              *extra, stdin="What is the magic number?\n")
        assert done.returncode == 2, (extra, done.stderr)
        assert done.stderr.startswith(f"Error: {message}"), done.stderr
        assert done.stdout == ""


def test_chat_trace_writes_one_trace_per_question_and_a_bad_path_stops_before_asking(
    tmp_path: Path,
) -> None:
    context = tmp_path / "big.txt"
    context.write_text(NEEDLE.text)
    questions = ["What is the magic number?", "How many chunks did you search?"]
    done = subprocess.run(
        [RLM_BIN, "chat", "--context-file", str(context), "--provider", "fixture", "--json",
         "--trace", str(tmp_path / "chat.jsonl")],
        input="\n".join(questions) + "\n", capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    for number, question in enumerate(questions, 1):
        events = [json.loads(line)
                  for line in (tmp_path / f"chat.{number}.jsonl").read_text().splitlines()]
        assert events[0]["event"] == "trace_started"
        assert events[1]["event"] == "run_started" and events[1]["query"] == question
        assert events[-1]["event"] == "run_finished"
    assert not (tmp_path / "chat.jsonl").exists()
    refused = subprocess.run(
        [RLM_BIN, "chat", "--context-file", str(context), "--provider", "fixture", "--json",
         "--trace", str(tmp_path / "no" / "chat.jsonl")],
        input=questions[0] + "\n", capture_output=True, text=True, timeout=60,
    )
    assert refused.returncode == 2  # with --json the error is the one JSON line, nothing asked
    (line,) = refused.stdout.splitlines()
    assert json.loads(line)["status"] == "usage_error" and "does not exist" in line
    assert "Traceback" not in refused.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_ends_a_chat_as_end_of_input_does_and_keeps_the_save(
    tmp_path: Path, sig: signal.Signals
) -> None:
    # `rlm run` and `rlm volley` end on SIGTERM as on Ctrl-C; a chat was killed outright,
    # and --save, written at the end, never was.  SIGHUP (the terminal closed) is the same.
    context = tmp_path / "big.txt"
    context.write_text(generate_needle(20_000, seed=1).text, encoding="utf-8")
    saved = tmp_path / "s.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    chat = subprocess.Popen(
        [sys.executable, "-m", "rlm", "chat", "--context-file", str(context), "--provider",
         "fixture", "--save", str(saved)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**env, "XDG_STATE_HOME": str(tmp_path / "state")},
    )
    # A chat that hangs is killed (its stdout then ends), so the readline cannot block forever.
    watchdog = threading.Timer(60, chat.kill)
    watchdog.start()
    try:
        assert chat.stdin is not None and chat.stdout is not None
        chat.stdin.write("What is the magic number?\n")
        chat.stdin.flush()
        answer = chat.stdout.readline().strip()  # the question is answered: the chat waits
        chat.send_signal(sig)
        _, err = chat.communicate(timeout=60)
    finally:
        watchdog.cancel()
        chat.kill()
    assert answer.isdigit(), err
    assert chat.returncode == 130, err
    assert "Error: terminated" in err and f"session saved to {saved}" in err
    assert json.loads(saved.read_text(encoding="utf-8"))["queries"] == 1


def test_a_cache_that_cannot_be_opened_stops_the_chat_before_it_starts(tmp_path: Path) -> None:
    # Each question failed alone with the same error, and the chat exited 0.
    context = tmp_path / "c.txt"
    context.write_text("The magic number is 4.", encoding="utf-8")
    (tmp_path / "bad.db").write_text("not a database")
    done = rlm_in_process("chat", "--context-file", str(context), "--provider", "fixture",
                          "--cache", str(tmp_path / "bad.db"), stdin="q\nq2\n")
    assert done.returncode == 1
    assert done.stderr == (f"Error: cannot open journal {tmp_path / 'bad.db'}: file is not a "
                           "database (is it an rlm journal?)\n")
