"""`rlm volley work --pool N` never puts credentials on its siblings' command lines.

Every process on the machine can read a command line (/proc/PID/cmdline); the
base URL's user:password and ``?api_key=`` value, and a journal URL's password,
reach the siblings in their environment instead, as the API key does.  Real
`rlm` processes, a real SQLite journal, the fixture server over loopback.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import trio

from rlm.cli._pool_link import pool_argv
from rlm.journal import open_store
from tests.cli.test_volley_pool_link import _registered
from tests.e2e.test_journal_volley_e2e import RLM, _env, _task_file, _until, counting_server
from tests.helpers import rlm_in_process

USER_SECRET = "s3cret-pw"
QUERY_SECRET = "sk-query-key"


def test_pool_argv_moves_credential_flags_to_the_environment() -> None:
    argv = ["volley", "work", "V", "--pool", "3", "--base-url", "http://a:pw@h/v1?api_key=k",
            "--journal=postgresql://u:pg@h/db", "-q", "--pool=2", "--base-url=http://h/v2",
            "--", "--journal"]
    command, env = pool_argv(argv)
    assert command == ["volley", "work", "V", "-q", "--", "--journal"]
    assert env == {"RLM_BASE_URL": "http://h/v2", "RLM_JOURNAL": "postgresql://u:pg@h/db"}


def _descendants(root: int) -> set[int]:
    """The pids of ``root``'s living descendants (children, their children...)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rpartition(")")[2].split()[1])
            except (FileNotFoundError, ProcessLookupError):
                continue  # ended meanwhile
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError):
        return b""


async def test_pool_siblings_work_with_the_credentials_and_their_argv_holds_none(
    tmp_path: Path,
) -> None:
    journal = str(tmp_path / "j.sqlite3")
    tasks = _task_file(tmp_path, 40)
    # Every request is held until ``release``: all three workers are alive and working
    # when their command lines are read.
    async with counting_server(0.02, answer_first=0) as (url, server):
        secret_url = (url.replace("http://", f"http://alice:{USER_SECRET}@", 1)
                      + f"?api_key={QUERY_SECRET}")
        created = await trio.to_thread.run_sync(functools.partial(
            rlm_in_process, "volley", "create", "-f", str(tasks), "--journal", journal,
            "--output-format", "json", "--base-url", secret_url, "--model", "fixture",
            "--max-concurrent", "6", "--no-estimate",
        ))
        assert created.returncode == 0, created.stderr
        volley_id = json.loads(created.stdout)["volley_id"]
        err_path = tmp_path / "stderr"
        with err_path.open("wb") as err_file:
            pool = await trio.lowlevel.open_process(
                [*RLM, "volley", "work", volley_id, "--journal", journal, "--pool", "3", "-q",
                 "--base-url", secret_url],
                env=_env(), stderr=err_file,
            )
        try:
            # A worker registers only once its settings hold a URL that can send: the
            # journal keeps it redacted, so a sibling given none would refuse to start.
            await _until([pool], lambda: len(_registered(journal, volley_id)) == 3,
                         "all three workers had started")
            siblings = _registered(journal, volley_id) - {pool.pid}
            assert len(siblings) == 2 and siblings <= _descendants(pool.pid)
            for pid in _descendants(pool.pid):
                cmdline = _cmdline(pid)
                assert USER_SECRET.encode() not in cmdline, (pid, cmdline)
                assert QUERY_SECRET.encode() not in cmdline, (pid, cmdline)
            server.release.set()
            with trio.fail_after(60):
                await pool.wait()
        finally:
            server.release.set()
            if pool.returncode is None:
                pool.kill()
                await pool.wait()
    err = err_path.read_bytes()
    assert pool.returncode == 0, err
    assert b"Error" not in err, err  # no sibling was refused for want of the URL
    store = open_store(journal)
    try:
        rows = store.tasks(volley_id)
    finally:
        store.close()
    assert [r.status for r in rows] == ["done"] * 40
    assert set(server.per_task) == set(range(1, 41))
