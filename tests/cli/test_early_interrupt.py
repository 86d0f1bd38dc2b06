"""Ctrl-C at any moment of ``rlm run``'s start, not only once the run's own handling began:
``interrupted``, exit 130, no traceback, no process left (rlm/cli/_console.py).

Each check runs the real executable under a small supervisor (a child subreaper, so
a process the run left behind is re-parented to it and found), waits until the
executable's own code runs (its zygote, started first thing, appears), lets some
time pass, and sends SIGINT to the whole process group, as a terminal does.  The
moments are samples of different phases of the start (click, the run command and
the runtime importing, the run itself waiting on a server that never answers);
the check is the same at each.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RLM_BIN = str(Path(sys.executable).with_name("rlm"))

_SUPERVISOR = r"""
import ctypes, json, os, signal, socket, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER: orphans come here
delay, rlm, context, start = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
# What the entry inherits: a terminal's SIGINT, or the SIG_IGN a shell gives a background job.
signal.signal(signal.SIGINT, signal.SIG_IGN if start == "ignored" else signal.SIG_DFL)
hang = socket.socket()
hang.bind(("127.0.0.1", 0))
hang.listen(64)  # never accepts: the run's first request waits
url = f"http://127.0.0.1:{hang.getsockname()[1]}/v1"
env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
entry = subprocess.Popen(
    [rlm, "run", "q", "--context-file", context, "--base-url", url, "--model", "m"],
    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    start_new_session=True)
def below(parent):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(") ", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent and fields[0] != "Z":
            found.append(int(pid))
    return found
deadline = time.monotonic() + 30
while not below(entry.pid) and entry.poll() is None and time.monotonic() < deadline:
    time.sleep(0.005)  # the zygote, started first thing, shows the entry's code is running
time.sleep(delay)
os.killpg(entry.pid, signal.SIGINT)  # as a terminal sends Ctrl-C: to the whole group
try:
    out, err = entry.communicate(timeout=60)
    code = entry.returncode
except subprocess.TimeoutExpired:  # the Ctrl-C was lost: say so, leave nothing running
    os.killpg(entry.pid, signal.SIGKILL)
    out, err = entry.communicate()
    code = "hung after SIGINT"
left = below(os.getpid())
for _ in range(50):
    if not left: break
    time.sleep(0.02); left = below(os.getpid())
for pid in left:
    os.kill(pid, signal.SIGKILL)
print(json.dumps({"code": code, "stderr": err.decode(), "left": left}))
"""


# "ignored": started as a shell starts a background job, with SIGINT ignored, which
# Python then leaves ignored (a Ctrl-C right at the start was lost: the run hung).
@pytest.mark.parametrize(
    ("after_s", "start"),
    [
        (0.0, "default"),
        (0.0, "ignored"),
        (0.01, "ignored"),
        (0.02, "default"),
        (0.05, "ignored"),
        (0.2, "default"),
        (0.6, "ignored"),
    ],
)
def test_ctrl_c_early_in_a_run_exits_130_without_a_traceback(
    after_s: float, start: str, tmp_path: Path
) -> None:
    context = tmp_path / "context.txt"
    context.write_text("the magic number is 42\n")
    done = subprocess.run(
        [sys.executable, "-c", _SUPERVISOR, str(after_s), RLM_BIN, str(context), start],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()  # the supervisor's own failure
    seen = json.loads(done.stdout)
    assert seen["code"] == 130, seen
    assert "Traceback" not in seen["stderr"] and "Aborted" not in seen["stderr"], seen
    assert "interrupted" in seen["stderr"].splitlines(), seen
    assert seen["left"] == [], seen
