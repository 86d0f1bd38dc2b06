"""`rlm volley` as a newcomer meets it: at a terminal, piped into `head`, resumed from
the wrong directory, declining the question (issue 31 items 5–8)."""

from __future__ import annotations

import os
import pty
import re
import select
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import trio

from tests.helpers import serving

RLM_BIN = [sys.executable, "-m", "rlm"]
ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


def on_terminal(args: list[str], env: dict[str, str], cwd: Path,
                answer: bytes | None = None) -> tuple[int, bytes]:
    """``rlm ARGS`` with stdin, stdout and stderr on one pseudo-terminal; what it drew
    and its exit code.  ``answer`` is typed once a question (ending in ``? ``) shows."""
    main, child = pty.openpty()
    proc = subprocess.Popen([*RLM_BIN, *args], stdin=child, stdout=child, stderr=child,
                            env={**os.environ, **env, "COLUMNS": "200"}, cwd=cwd)
    os.close(child)
    screen = b""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                piece = os.read(main, 65536)
            except OSError:  # the child side is closed: it exited
                break
            if not piece:
                break
            screen += piece
            if answer is not None and re.search(rb"\? \[[Yy]/[Nn]\]: $", screen):
                os.write(main, answer)
                answer = None
        return proc.wait(timeout=60), screen
    finally:
        proc.kill()
        os.close(main)


def environment(tmp_path: Path) -> dict[str, str]:
    return {"RLM_JOURNAL": str(tmp_path / "j.db"), "RLM_API_KEY": "k",
            "XDG_STATE_HOME": str(tmp_path / "state"), "LANG": "C.UTF-8"}


def volleys_in(journal: Path) -> int:
    if not journal.exists():
        return 0
    with sqlite3.connect(journal) as db:
        return int(db.execute("SELECT COUNT(*) FROM volleys").fetchone()[0])


def test_a_result_never_starts_on_the_status_line(tmp_path: Path) -> None:
    # The status bar is drawn on stderr's last line; a result written to the same
    # terminal used to start right after it ("… ETA 452ms=== [40/40] ✓").
    code, screen = on_terminal(
        ["volley", *(f"task {i}" for i in range(8)), "--provider", "fixture",
         "--fixture-latency", "0.4", "--max-concurrent", "2", "--no-history"],
        environment(tmp_path), tmp_path)
    assert code == 0, screen
    lines = [ESCAPES.sub(b"", line) for line in re.split(rb"[\r\n]", screen)]
    blocks = [line for line in lines if b"=== [" in line]
    assert len(blocks) == 8, screen
    assert all(line.startswith(b"=== [") for line in blocks), blocks


def test_a_fixture_volley_is_not_asked_about(tmp_path: Path) -> None:
    # Nothing is billed: no estimate, no question, even at a terminal.
    code, screen = on_terminal(
        ["volley", *(f"task {i}" for i in range(20)), "--provider", "fixture", "--no-history"],
        environment(tmp_path), tmp_path, answer=b"n\n")
    assert code == 0, screen
    assert b"Continue?" not in screen and b"estimate:" not in screen
    assert screen.count(b"=== [") == 20


async def test_declining_a_billed_volley_is_exit_0_and_nothing_is_stored(
    tmp_path: Path,
) -> None:
    env = environment(tmp_path)
    async with serving() as (url, server):
        def declined(*flags: str) -> tuple[int, bytes]:
            return on_terminal(["volley", *(f"task {i}" for i in range(20)), "--base-url", url,
                                "--model", "unpriced-model", "--no-history", *flags],
                               env, tmp_path, answer=b"n\n")

        code, screen = await trio.to_thread.run_sync(declined)
        assert code == 0, screen
        assert b"estimate: 20 tasks" in screen and b"Continue? [Y/n]" in screen
        assert b"Not sent: nothing was stored or sent" in screen and b"Error" not in screen
        # -q: no estimate, a one-line question instead.
        code, screen = await trio.to_thread.run_sync(declined, "-q")
        assert code == 0, screen
        assert b"estimate:" not in screen and b"Send 20 tasks (unpriced)? [Y/n]" in screen
        assert server.stats.total_requests == 0
    assert volleys_in(tmp_path / "j.db") == 0


def test_a_closed_stdout_stops_the_volley_and_says_how_to_resume(tmp_path: Path) -> None:
    env = {**os.environ, **environment(tmp_path)}
    proc = subprocess.Popen(
        [*RLM_BIN, "volley", *(f"task {i}" for i in range(30)), "--provider", "fixture",
         "--fixture-latency", "0.2", "--max-concurrent", "2", "--no-history", "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env,
        cwd=tmp_path)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"=== [1/30]")  # what `| head -1` reads
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 130
    said = re.fullmatch(r"stdout closed: stopped with (\d+) of 30 tasks left; "
                        r"`rlm volley --resume (v\w+)` runs them\n", err)
    assert said is not None, err
    assert "Traceback" not in err and "BrokenPipe" not in err
    resumed = subprocess.run([*RLM_BIN, "volley", "--resume", said[2], "--no-history"],
                             capture_output=True, env=env, cwd=tmp_path, check=False)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.count(b"=== [") == 30
    assert f"resuming volley {said[2]}: 30 tasks".encode() in resumed.stderr
    assert f"; {said[1]} left to run".encode() in resumed.stderr


def test_resume_last_is_the_last_volley_started_here(tmp_path: Path) -> None:
    env = {**os.environ, **environment(tmp_path)}
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()

    def rlm(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*RLM_BIN, "volley", *args], capture_output=True, text=True,
                              env=env, cwd=cwd, check=False)

    mine = rlm(here, "first task here", "second", "--provider", "fixture", "--no-history")
    assert mine.returncode == 0, mine.stderr
    other = rlm(elsewhere, "another's task", "--provider", "fixture", "--no-history")
    assert other.returncode == 0, other.stderr
    # Another directory's volley is newer: `last` here is still this directory's.
    again = rlm(here, "--resume", "last", "--no-history")
    assert again.returncode == 0, again.stderr
    assert re.match(r"volley v\w+: 2 tasks, created [\d-]+ [\d:]+; first task: first task here; "
                    r"nothing left to run \(2 done\): printing it\n", again.stderr), again.stderr
    assert again.stdout.count("=== [") == 2
    # A directory where no volley was started is told which volley is newest, by id.
    (tmp_path / "new").mkdir()
    none = rlm(tmp_path / "new", "--resume", "last")
    assert none.returncode == 2
    assert none.stderr.startswith(f"Error: no volley in journal {tmp_path / 'j.db'} was "
                                  f"started by "), none.stderr
    assert f"1 task, started from {elsewhere}): name it by its id" in none.stderr
    # Flags that cannot apply to a resumed volley are refused, not dropped.
    refused = rlm(here, "--resume", "last", "--encoding", "latin-1")
    assert refused.returncode == 2 and "--encoding applies only to files" in refused.stderr
    skipped = rlm(here, "x", "--skip-failed", "--provider", "fixture")
    assert skipped.returncode == 2 and "--skip-failed goes with --resume" in skipped.stderr


def test_a_write_to_a_terminal_that_hung_up_goes_to_dev_null() -> None:
    # Writes fail with EIO as soon as the terminal hangs up, before SIGHUP reaches the
    # watch that stops the command: the stream must take them, not end the command.
    from rlm.cli._terminal import _HangupSafe

    read_end, write_end = os.pipe()

    class HungUp:
        def write(self, text: str) -> int:
            raise OSError(5, "Input/output error")  # EIO

        def flush(self) -> None:
            raise OSError(5, "Input/output error")

        def fileno(self) -> int:
            return write_end

    try:
        stream = _HangupSafe(HungUp())  # type: ignore[arg-type]
        assert stream.write("a result\n") == len("a result\n")
        stream.flush()
        assert os.path.samestat(os.fstat(write_end), os.stat(os.devnull))
    finally:
        os.close(read_end)
        os.close(write_end)
