"""The ``rlm`` executable's entry (rlm.cli._console): early zygote, fast exit, nothing lost.

Each check runs the entry in a fresh process, as a person's shell does; the
process-tree checks run it under a small supervisor that is a child
subreaper, so a process the entry left behind would be re-parented to the
supervisor and found there instead of vanishing into init.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlm.cli._console import starts_a_run
from rlm.fixtures.needle import generate_needle

QUESTION = "What is the magic number?"

# Runs the entry with argv[1:] as a child, then lists every process left below
# itself (the entry's orphans come here: PR_SET_CHILD_SUBREAPER) and prints
# the entry's exit code, stdout and stderr as JSON.
_SUPERVISOR = r"""
import ctypes, json, os, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
entry = ("import atexit, sys\n"
         "atexit.register(lambda: sys.stderr.write('\\nATEXIT RAN\\n'))\n"
         "from rlm.cli import console_main\n"
         "console_main()\n")
done = subprocess.run([sys.executable, "-c", entry, *sys.argv[1:]], capture_output=True,
                      stdin=subprocess.DEVNULL, timeout=60)
def below():
    me, found = os.getpid(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(") ", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            found.append(int(pid))
    return found
left = below()
for _ in range(50):  # a process being killed right now may take a moment to go
    if not left:
        break
    time.sleep(0.02)
    left = below()
print(json.dumps({"code": done.returncode, "stdout": done.stdout.decode(),
                  "stderr": done.stderr.decode(), "left": left}))
"""


def run_entry(*args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _SUPERVISOR, *args], capture_output=True, timeout=90, check=True
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", QUESTION, "--provider", "fixture"], True),
        (["--debug", "run", QUESTION], True),
        (["run", "--", "--help"], True),  # a query that reads like a flag
        (["run", "--help"], False),
        (["run", QUESTION, "-h"], False),
        (["runs"], False),
        (["--version"], False),
        ([], False),
    ],
)
def test_only_a_run_that_will_run_starts_a_zygote_first(argv: list[str], expected: bool) -> None:
    assert starts_a_run(argv) is expected


def test_a_run_through_the_entry_answers_runs_atexit_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    fixture = generate_needle(20_000, seed=11)
    path = tmp_path / "needle.txt"
    path.write_text(fixture.text, encoding="utf-8")
    trace = tmp_path / "trace.jsonl"
    done = run_entry("run", fixture.question, "--context-file", str(path), "--provider",
                     "fixture", "--trace", str(trace), "-v")
    assert done["code"] == 0, done["stderr"]
    assert done["stdout"] == fixture.answer + "\n"
    stderr = str(done["stderr"])
    assert "sub lane:" in stderr and "note: answered by the built-in fixture model" in stderr
    assert "capacity now" not in stderr  # it read as a drop that did not happen
    assert stderr.endswith("\nATEXIT RAN\n")  # the process's own exit handlers still run
    assert done["left"] == []
    # The trace is complete on disk: its last event is the run's end.
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert events[-1]["event"] == "run_finished"


def test_a_run_a_limit_ends_exits_3_through_the_entry_with_everything_written(
    tmp_path: Path,
) -> None:
    """Through the fast exit a run a limit ended keeps its exit code, and everything is
    written before it: the JSON object on stdout, the trace up to run_finished, the run
    history's summary; no process is left."""
    path = tmp_path / "tiny.txt"
    path.write_text("the magic number is 42\n", encoding="utf-8")
    trace = tmp_path / "trace.jsonl"
    done = run_entry("run", QUESTION, "--context-file", str(path), "--provider", "fixture",
                     "--max-llm-calls", "1", "--json", "--trace", str(trace))
    assert done["code"] == 3, done["stderr"]
    result = json.loads(str(done["stdout"]))  # one whole object, flushed before the exit
    assert result["status"] == "budget_exceeded"
    assert str(done["stderr"]).endswith("\nATEXIT RAN\n")
    assert done["left"] == []
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert events[-1]["event"] == "run_finished"
    assert events[-1]["status"] == "budget_exceeded"
    # The run history's entry holds the trace and says how the run ended.
    from rlm.history import RunHistory

    [entry] = [e for e in RunHistory().entries() if e.summary().get("user_trace") == str(trace)]
    assert entry.summary()["status"] == "budget_exceeded"
    assert entry.trace_path.read_text() == trace.read_text()


def test_a_usage_error_through_the_entry_exits_2_and_leaves_no_zygote(tmp_path: Path) -> None:
    done = run_entry("run", QUESTION, "--context-file", str(tmp_path / "nope.txt"),
                     "--provider", "fixture")
    assert done["code"] == 2
    assert "Error: context file" in str(done["stderr"])
    assert done["left"] == []


def test_a_bad_flag_through_the_entry_exits_2_and_leaves_no_zygote() -> None:
    done = run_entry("run", QUESTION, "--no-such-flag")
    assert done["code"] == 2
    assert "No such option" in str(done["stderr"])
    assert done["left"] == []


