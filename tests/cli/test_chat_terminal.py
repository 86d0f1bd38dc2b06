"""`rlm chat` in a real terminal (tmux) and from a pipe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from rlm.fixtures import generate_needle
from tests.helpers import rlm_in_process

NEEDLE = generate_needle(chars=60_000, seed=5)
RLM_BIN = str(Path(sys.executable).with_name("rlm"))


def _screen(name: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", name], capture_output=True, text=True, check=True
    ).stdout


def _wait_for(name: str, text: str, seconds: float = 30) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        screen = _screen(name)
        if text in screen:
            return screen
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared; the screen:\n{_screen(name)}")


@pytest.mark.skipif(
    shutil.which("tmux") is None,
    reason="tmux is not installed (.ci/run installs it: apt-get install tmux)",
)
def test_chat_at_a_terminal_prompt(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text(NEEDLE.text)
    started = tmp_path / "tool-started"
    (tmp_path / "v16tools_tty.py").write_text(
        TOOLS_MODULE + f"\n\ndef stuck() -> str:\n    open({str(started)!r}, 'w').close()\n"
        "    time.sleep(3600)\n    return 'never'\n"
    )
    name = f"rlm-chat-{uuid.uuid4().hex[:8]}"
    chat = f"{RLM_BIN} chat --context-file big.txt --provider fixture --tools v16tools_tty:stuck"
    chat += " --tools v16tools_tty:lookup"
    command = f"{chat}; echo EXITED $?; sleep 60"  # the pane stays to be read
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", name, "-x", "160", "-y", "40", "-c", str(tmp_path),
         command],
        check=True,
    )
    try:
        _wait_for(name, "rlm>")
        # Line editing (readline): a typo fixed with the arrow keys before Enter.
        subprocess.run(["tmux", "send-keys", "-t", name, "What is the magic numer?",
                        "Left", "Left", "Left", "b", "Enter"], check=True)
        _wait_for(name, "rlm> What is the magic number?\n")
        screen = _wait_for(name, f"\n{NEEDLE.answer}\nrlm>")
        assert "root: step 1" in screen  # the question's progress shows while it runs
        _send(name, "help")  # the chat's own word, not a question for the model
        _wait_for(name, "/save [PATH]")
        _send(name, "How many chunks did you search?")
        _wait_for(name, "\n16\nrlm>")
        # Ctrl-C while the query's code is running (a host tool that never returns):
        # the query is cancelled, the prompt comes back and the session goes on.  The
        # sandbox that was running the code is killed, so its variables are gone (the
        # model is told); a Ctrl-C during a model request keeps them.
        _send(name, "Call stuck()")
        _wait_until(started.exists, "the tool never started")
        subprocess.run(["tmux", "send-keys", "-t", name, "C-c"], check=True)
        _wait_for(name, "(cancelled)")
        _wait_for(name, "(cancelled)\n")
        _send(name, "Call lookup('abc')")
        screen = _wait_for(name, "\nABC\nrlm>")
        assert "rlm> Call lookup('abc')" in screen  # the prompt came back after the stop
        assert "Traceback" not in screen
        subprocess.run(["tmux", "send-keys", "-t", name, "C-d"], check=True)
        _wait_for(name, "EXITED 0")  # the abandoned tool thread does not hold the exit
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


def _send(name: str, line: str) -> None:
    subprocess.run(["tmux", "send-keys", "-t", name, line, "Enter"], check=True)


def _wait_until(condition: Callable[[], bool], message: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(0.05)


def test_chat_json_lines_from_a_pipe(tmp_path: Path) -> None:
    context = tmp_path / "big.txt"
    context.write_text(NEEDLE.text)
    questions = "What is the magic number?\n\nHow many chunks did you search?\n"
    done = subprocess.run(
        [RLM_BIN, "chat", "--context-file", str(context), "--provider", "fixture", "--json"],
        input=questions, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(a["query"], a["answer"]) for a in answers] == [
        ("What is the magic number?", NEEDLE.answer),
        ("How many chunks did you search?", "16"),
    ]


def test_chat_with_a_missing_context_file_says_what_to_do(tmp_path: Path) -> None:
    done = rlm_in_process("chat", "--context-file", str(tmp_path / "nope.txt"), "--provider",
                          "fixture", stdin="")
    assert done.returncode == 2
    assert done.stderr.startswith("Error:") and "Traceback" not in done.stderr


TOOLS_MODULE = '''
import time


def lookup(key: str) -> str:
    """Upper-case a key."""
    return key.upper()


def slow(seconds: float) -> float:
    """Sleep on the host."""
    time.sleep(seconds)
    return seconds
'''


def test_chat_tools_from_a_module_in_the_current_folder(tmp_path: Path) -> None:
    # The console script's sys.path holds its bin folder, not the person's folder: a
    # mytools.py next to them was "No module named 'mytools'".
    (tmp_path / "v16tools_cwd.py").write_text(TOOLS_MODULE)
    (tmp_path / "big.txt").write_text(NEEDLE.text)
    done = subprocess.run(
        [RLM_BIN, "chat", "--context-file", "big.txt", "--provider", "fixture", "--json",
         "--tools", "v16tools_cwd:lookup"],
        input="Call lookup('abc')\nCall lookup(5)\n", capture_output=True, text=True,
        timeout=60, cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line)["answer"] for line in done.stdout.splitlines()]
    assert answers == ["ABC", "ToolError: lookup: argument 'key': 5 is not of type 'string'"]


def test_chat_tools_and_save_mistakes_are_clear_errors_before_the_chat_starts(
    tmp_path: Path,
) -> None:
    context = tmp_path / "big.txt"
    context.write_text("small")
    (tmp_path / "v16tools_broken.py").write_text("def f(:\n")
    (tmp_path / "v16tools_raises.py").write_text("raise RuntimeError('no database here')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        for extra, message in [
            (["--tools", "v16tools_broken:f"],
             "--tools 'v16tools_broken:f': importing v16tools_broken failed: SyntaxError"),
            (["--tools", "v16tools_raises:f"],
             "importing v16tools_raises failed: RuntimeError: no database here"),
            (["--tools", "v16tools_absent:f"], "cannot import 'v16tools_absent'"),
            (["--save", str(tmp_path / "no" / "such" / "s.json")], "does not exist; create it"),
        ]:
            done = rlm_in_process("chat", "--context-file", str(context), "--provider",
                                  "fixture", *extra, stdin="What is the magic number?\n")
            assert done.returncode == 2, (extra, done.stderr)
            assert done.stderr.startswith("Error: ") and message in done.stderr, done.stderr
            assert "Traceback" not in done.stderr
            assert done.stdout == ""  # refused before any question was answered
    finally:
        sys.path.remove(str(tmp_path))
