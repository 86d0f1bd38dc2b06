"""`rlm chat` in a real terminal (tmux) and from a pipe."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
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


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_chat_at_a_terminal_prompt(tmp_path: Path) -> None:
    context = tmp_path / "big.txt"
    context.write_text(NEEDLE.text)
    name = f"rlm-chat-{uuid.uuid4().hex[:8]}"
    chat = f"{RLM_BIN} chat --context-file {context} --provider fixture"
    command = f"{chat}; echo EXITED $?; sleep 60"  # the pane stays to be read
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", name, "-x", "160", "-y", "40", command], check=True
    )
    try:
        _wait_for(name, "rlm>")
        subprocess.run(["tmux", "send-keys", "-t", name, "What is the magic number?", "Enter"],
                       check=True)
        _wait_for(name, NEEDLE.answer)
        subprocess.run(
            ["tmux", "send-keys", "-t", name, "How many chunks did you search?", "Enter"],
            check=True,
        )
        screen = _wait_for(name, "\n16\n")
        assert "Traceback" not in screen
        subprocess.run(["tmux", "send-keys", "-t", name, "C-d"], check=True)
        screen = _wait_for(name, "EXITED 0")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


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
