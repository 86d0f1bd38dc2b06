"""What a person sees: progress lines, terminal safety, spinner, colour (issues 10 and 11).

The progress printer runs in-process on a real run (scripted provider, real
sandbox); terminal behaviour runs the real CLI under a pseudo-terminal.
"""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from rlm import RLM
from rlm._events import CodeExecuted, TextDelta
from rlm._traffic.budget import Budget, BudgetLimits
from rlm.cli._live import LiveDisplay
from rlm.cli._progress import ProgressPrinter, format_cost, stderr_console
from rlm.cli._terminal import _strip, safe_text
from rlm.errors import BudgetExceeded, ProviderStatusError
from rlm.testing.provider import FunctionProvider
from tests.helpers import repl, serving

RLM_CMD = [sys.executable, "-m", "rlm"]
# FINAL("\x1b]0;x\x07") of issue 10, after visible text; a clipboard write (OSC 52) and a
# clear screen (CSI, which click.echo strips off a pipe by itself) of issue 27.
ESCAPE_ANSWER = "42\x1b]0;x\x07\x1b]52;c;aGk=\x07\x1b[2J"
SGR = re.compile(rb"\x1b\[[0-9;]*m")


def _printer(width: int = 40) -> tuple[ProgressPrinter, io.StringIO]:
    console = stderr_console()
    out = io.StringIO()
    console.file = out
    console.width = width
    return ProgressPrinter(console, spinner=False), out


async def _progress_of(root: list[str], **settings: Any) -> str:
    printer, out = _printer()
    provider = FunctionProvider.scripted(root)
    model = RLM(providers={"root": provider, "sub": provider}, sinks=[printer], **settings)
    await model.acompletion("q", "some context")
    return out.getvalue()


def test_safe_text_strips_sequences_and_controls_but_keeps_lines() -> None:
    hostile = "a\x1b]0;PWNED\x07b\x1b[2Jc\x1b[31md\x9b1;1He\rf\u202eg\x00h\tI\nJ"
    assert safe_text(hostile) == "abcdefgh\tI\nJ"
    assert "\x1b" not in safe_text("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x1bP1$r\x1b\\")


# Text made of what the patterns look at: escapes, C0/C1 controls, bidirectional
# overrides, line ends, and ordinary and non-ASCII printable characters.
_TERMINAL_TEXT = st.text(
    st.sampled_from(["\x1b", "\x9b", "\x9d", "\x07", "\r", "\n", "\t", "\x00", "\x7f",
                     "\u202e", "\u2066", "\u00a0", "\u2028", "[", "]", "\\", "0", ";", "m",
                     "a", " ", "\u2192", "\u00b7", "\U0001f600"])
    | st.characters(),
    max_size=40,
)


@given(_TERMINAL_TEXT)
def test_safe_text_returns_printable_text_as_is_and_strips_the_rest_as_before(text: str) -> None:
    """The shortcut for printable text (no pattern compiled) changes no result."""
    assert safe_text(text) == _strip(text)


async def test_model_text_in_progress_lines_is_terminal_safe() -> None:
    code = "raise ValueError('boom \\x1b[2J\\x1b]0;PWNED\\x07 done')"
    shown = await _progress_of([repl(code), "FINAL(ok)"])
    assert "code error" in shown and "boom" in shown and "done" in shown
    assert "\x1b" not in shown and "\x07" not in shown


async def test_long_progress_lines_are_not_hard_wrapped() -> None:
    code = "raise ValueError('" + "long words " * 8 + "end')"
    shown = await _progress_of([repl(code), "FINAL(ok)"])
    error_lines = [line for line in shown.splitlines() if "code error" in line]
    assert len(error_lines) == 1 and "end" in error_lines[0] and len(error_lines[0]) > 40


async def test_forced_final_step_is_numbered_once_and_plurals_read_right() -> None:
    shown = await _progress_of([repl("x = 1")], max_iterations=2)
    assert shown.count("step 1 →") == 1 and shown.count("step 2 →") == 1
    assert "final-answer step" in shown
    assert "1 code block" in shown and "(s)" not in shown and "1 LLM calls" not in shown


async def test_a_batch_none_of_whose_items_was_answered_is_not_called_answered() -> None:
    # Every sub-query failed (a run cut off by its --timeout or Ctrl-C reads the same):
    # it said "llm_query_batched × 3 answered in 0.00s, 3 failed".
    printer, out = _printer(width=100)
    provider = FunctionProvider.scripted(
        [repl("print(llm_query_batched(['a', 'b', 'c']))"), "FINAL(done)"],
        fail=lambda r: None if r.lane == "root" else ProviderStatusError(
            "bad request", url="fixture:", status=400),
    )
    model = RLM(providers={"root": provider, "sub": provider}, sinks=[printer])
    await model.acompletion("q", "some context")
    shown = out.getvalue()
    # Real time: the duration printed is whatever it took (never asserted).
    assert re.search(r"llm_query_batched × 3 in \d+\.\d\ds: all 3 failed", shown), shown
    assert "× 3 answered" not in shown


async def test_a_refused_batch_says_refused() -> None:
    code = "try:\n    llm_query_batched(['a'] * 16)\nexcept Exception as e:\n    print(e)"
    shown = await _progress_of([repl(code), "FINAL(done)"], max_llm_calls=5)
    assert "refused" in shown
    assert "answered in" not in shown.split("refused")[0].splitlines()[-1]
    assert "16 failed" not in shown


def test_cost_is_shown_or_called_unpriced() -> None:
    assert format_cost({"cost": 0.01234, "unpriced_calls": 0}, 3) == "$0.0123"
    assert format_cost({"cost": 0.0, "unpriced_calls": 3}, 3).startswith("cost unpriced")
    assert format_cost({"cost": 2.5, "unpriced_calls": 1}, 3) == "$2.50 + 1 unpriced call"


async def test_summary_line_shows_cost() -> None:
    shown = await _progress_of(["FINAL(ok)"])
    summary = [line for line in shown.splitlines() if "run answered" in line]
    assert summary and ("$" in summary[0] or "unpriced" in summary[0])


async def test_a_retry_after_past_the_timeout_is_said_once_without_a_contradiction() -> None:
    """The Error line says the run stopped rather than wait past its --timeout; the lines
    around it called the same run a "timeout after 0.05s", beside "the 30 s left" (item 5)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    async with serving(rpm=1, retry_after=200) as (url, _):
        with trio.fail_after(60):
            done = await trio.run_process(
                [*RLM_CMD, "run", "q", "--context", "x", "--timeout", "30s", "--no-history",
                 "--provider", "openai", "--base-url", url, "--model", "fixture"],
                capture_stdout=True, capture_stderr=True, check=False,
                env={**env, "RLM_API_KEY": "x"},
            )
    err = done.stderr.decode()
    assert done.returncode == 3, err
    errors = [line for line in err.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, err
    assert ("asked to wait 3 min before retrying, past the 30 s left of the run's --timeout, "
            "so the run stopped without waiting") in errors[0]
    assert "timeout after" not in err and "run timeout" not in err, err
    assert err.splitlines()[-1].startswith("stopped after "), err


def _run_in_pty(
    args: list[str], *, tty: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[int, bytes, bytes]:
    """Run the CLI with ``tty`` ("stdout" or "stderr") on a pseudo-terminal, the other on a pipe.

    Returns (exit code, what the terminal showed, what the pipe got).
    """
    master, slave = pty.openpty()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    full_env.pop("NO_COLOR", None)
    full_env.update({"TERM": "xterm-256color", "COLUMNS": "100", **(env or {})})
    stdout, stderr = (slave, subprocess.PIPE) if tty == "stdout" else (subprocess.PIPE, slave)
    with subprocess.Popen(
        [*RLM_CMD, *args], stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, env=full_env,
        cwd=cwd,
    ) as process:
        os.close(slave)
        shown = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        pipe = process.stderr if tty == "stdout" else process.stdout
        assert pipe is not None
        piped = pipe.read()
        code = process.wait(timeout=60)
    os.close(master)
    return code, shown, piped


def _escape_context(tmp_path: Path) -> Path:
    path = tmp_path / "hostile.txt"
    path.write_text("filler. " * 200 + f"The magic number is {ESCAPE_ANSWER}. " + "more. " * 50)
    return path


def test_escape_answer_is_stripped_on_a_pipe_and_a_terminal_and_exact_with_raw_or_json(
    tmp_path: Path,
) -> None:
    # An answer piped to a file or a pager reaches a terminal too (`cat`, `less -R`): it
    # is stripped there as well; --raw prints it exact, --json escapes it.
    context = _escape_context(tmp_path)
    args = ["run", "What is the magic number?", "--context-file", str(context)]
    args += ["--provider", "fixture"]
    on_pipe = subprocess.run([*RLM_CMD, *args], capture_output=True, timeout=60, check=False)
    assert on_pipe.returncode == 0, on_pipe.stderr
    assert on_pipe.stdout == b"42\n"
    assert b"\x1b" not in on_pipe.stderr and b"\x07" not in on_pipe.stderr
    raw = subprocess.run([*RLM_CMD, *args, "--raw"], capture_output=True, timeout=60,
                         check=False)
    assert raw.stdout == (ESCAPE_ANSWER + "\n").encode()
    as_json = subprocess.run(
        [*RLM_CMD, *args, "--json"], capture_output=True, timeout=60, check=False
    )
    assert b"\x1b" not in as_json.stdout
    assert json.loads(as_json.stdout)["answer"] == ESCAPE_ANSWER
    code, shown, stderr = _run_in_pty(args, tty="stdout")
    assert code == 0
    assert b"\x1b" not in shown and b"\x07" not in shown and shown.strip() == b"42"
    assert b"\x1b" not in stderr


def test_a_volleys_text_output_is_stripped_and_exact_with_raw(tmp_path: Path) -> None:
    context = _escape_context(tmp_path)
    args = ["volley", "What is the magic number?", "--context-file", str(context),
            "--provider", "fixture", "--journal", str(tmp_path / "j.sqlite3"), "-q"]
    shown = subprocess.run([*RLM_CMD, *args], capture_output=True, timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    assert b"42" in shown.stdout and b"\x1b" not in shown.stdout and b"\x07" not in shown.stdout
    raw = subprocess.run([*RLM_CMD, *args, "--raw"], capture_output=True, timeout=60,
                         check=False)
    assert ESCAPE_ANSWER.encode() in raw.stdout
    volley_id = re.search(rb"=== volley (\S+):", raw.stdout)
    assert volley_id is not None, raw.stdout
    show = [*RLM_CMD, "volley", "show", volley_id[1].decode(), "--journal",
            str(tmp_path / "j.sqlite3")]
    stored = subprocess.run(show, capture_output=True, timeout=60, check=False)
    assert b"42" in stored.stdout and b"\x1b" not in stored.stdout
    stored_raw = subprocess.run([*show, "--raw"], capture_output=True, timeout=60, check=False)
    assert ESCAPE_ANSWER.encode() in stored_raw.stdout


def test_a_chats_answer_is_stripped_and_exact_with_raw(tmp_path: Path) -> None:
    chat = [*RLM_CMD, "chat", "--context-file", str(_escape_context(tmp_path)),
            "--provider", "fixture"]
    asked = {"input": b"What is the magic number?\n", "capture_output": True, "timeout": 60}
    shown = subprocess.run(chat, check=False, **asked)  # type: ignore[call-overload]
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == b"42\n"
    raw = subprocess.run([*chat, "--raw"], check=False, **asked)  # type: ignore[call-overload]
    assert raw.stdout == (ESCAPE_ANSWER + "\n").encode()


async def test_a_terminal_sees_a_spinner_while_the_first_step_is_generated(
    tmp_path: Path,
) -> None:
    context = tmp_path / "n.txt"
    context.write_text("The magic number is 7. " + "filler. " * 100)
    async with serving(root_latency=1.5) as (url, _):
        args = ["run", "What is the magic number?", "--context-file", str(context)]
        args += ["--base-url", url, "--model", "fixture"]
        code, shown, stdout = await trio.to_thread.run_sync(
            lambda: _run_in_pty(args, tty="stderr")
        )
    assert code == 0 and stdout == b"7\n"
    assert b"waiting for the model's step 1" in shown
    assert re.search(rb"step 1 \xc2\xb7 1\.\ds", shown)  # "· 1.2s": the elapsed time moved on


def test_no_color_means_no_colour_on_a_terminal(tmp_path: Path) -> None:
    context = tmp_path / "n.txt"
    context.write_text("The magic number is 7. " + "filler. " * 100)
    args = ["run", "What is the magic number?", "--context-file", str(context)]
    args += ["--provider", "fixture"]
    _, coloured, _ = _run_in_pty(args, tty="stderr")
    assert SGR.search(coloured)  # the check below can fail
    code, plain, _ = _run_in_pty(args, tty="stderr", env={"NO_COLOR": "1"})
    assert code == 0 and b"run answered" in plain and not SGR.search(plain)


def test_the_live_stream_display_strips_model_escapes_but_keeps_its_own_colour() -> None:
    out = io.StringIO()
    display = LiveDisplay(out, tty=True)
    for piece in ("Looking \x1b]0;PW", "NED\x07now\x1b[2J ```repl\nprint(1)\n```"):
        display(TextDelta(call_id="root", lane="root", request_id=1, attempt=1, text=piece))
    display(
        CodeExecuted(
            call_id="root", iteration=1, block=1, ok=False, output="a\x1b[1Ab\n", output_chars=6,
            error="ValueError: x\x1b]0;t\x07y", final=False, duration_s=0.1,
        )
    )
    shown = out.getvalue()
    assert "\x1b[36m" in shown  # our own colour is still there on a terminal
    assert "\x1b]" not in shown and "\x07" not in shown and "\x1b[2J" not in shown
    assert "\x1b[1A" not in shown and "Looking" in shown and "xy" in shown


def test_a_refused_query_reads_in_the_singular_or_plural() -> None:
    budget = Budget(limits=BudgetLimits(max_llm_calls=1))
    with pytest.raises(BudgetExceeded, match="a batch of 2 sub-queries needs 2 LLM calls"):
        budget.check_batch(2)
    budget.spent.calls = 1  # the one call the limit allows has been sent
    with pytest.raises(BudgetExceeded, match="a batch of 1 sub-query needs 1 LLM call,"):
        budget.check_batch(1)


def test_a_fixture_run_that_gave_no_answer_is_not_said_to_be_answered(tmp_path: Path) -> None:
    context = tmp_path / "c.txt"
    context.write_text("filler. " * 2000 + "The magic number is 5.", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    done = subprocess.run(
        [*RLM_CMD, "run", "What is the magic number?", "--context-file", str(context),
         "--provider", "fixture", "--max-llm-calls", "1", "--no-history"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )
    assert done.returncode == 3 and "no answer candidate" in done.stderr, done.stderr
    assert "note: run on the built-in fixture model (scripted" in done.stderr
    assert "answered by the built-in fixture model" not in done.stderr
