"""Every file a flag names is read by the one bounded reader (``rlm._files``), as context
files are: what is not a regular file is refused in one line naming the flag before a byte
is read, and a file past ``SMALL_FILE_BYTES`` is refused by its size (issue 27, item 11).

``--prices /dev/zero`` used to end in ``MemoryError`` and ``--prices FIFO`` to hang past
``--timeout``; the subprocesses here run under a memory limit and a time limit, so the
old reader fails them instead of taking the machine's memory or the suite's time.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from rlm._files import SMALL_FILE_BYTES
from tests.helpers import rlm_in_process

RUN = ("run", "q", "--provider", "fixture", "--context", "x", "--timeout", "5s")
COMMANDS = {
    "--prices": (*RUN, "--prices"),
    "--load": ("chat", "--provider", "fixture", "--timeout", "5s", "--load"),
    "trace": ("view",),
}


def _limited() -> None:  # the old reader took /dev/zero until MemoryError
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _rlm(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    return subprocess.run([sys.executable, "-m", "rlm", *args], capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL, timeout=60, preexec_fn=_limited)


@pytest.mark.parametrize("flag", sorted(COMMANDS))
@pytest.mark.parametrize("kind", ["a character device", "a named pipe"])
def test_a_named_file_that_is_not_a_regular_file_is_refused(
    tmp_path: Path, flag: str, kind: str
) -> None:
    path = "/dev/zero"
    if kind == "a named pipe":  # no writer: opening it for reading would wait for one
        path = str(tmp_path / "pipe")
        os.mkfifo(path)
    done = _rlm(*COMMANDS[flag], path)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"Error: {flag} {path} is not a regular file ({kind}); "
                           "pass a regular file\n")


@pytest.mark.parametrize("flag", ["--prices", "--load"])
def test_a_named_file_past_the_bound_is_refused_by_its_size(tmp_path: Path, flag: str) -> None:
    sparse = tmp_path / "huge.json"
    with sparse.open("wb") as handle:
        handle.truncate(SMALL_FILE_BYTES + 1)  # takes no disk; read whole, it would
    done = rlm_in_process(*COMMANDS[flag], str(sparse))
    assert done.returncode == 2
    assert done.stderr == (f"Error: {flag} {sparse} is larger than 64MiB, the most rlm reads "
                           "of it: check that it is the file you meant\n")
