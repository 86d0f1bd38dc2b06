"""`rlm volley watch` and `rlm volley show --board` on a real pool: real worker processes on
a SQLite journal, the watcher a process of its own that only reads."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.helpers import pid_alive, rlm_in_process

RLM = [sys.executable, "-m", "rlm"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}


def _create(journal: Path, tasks: int) -> str:
    done = rlm_in_process("volley", "create", "--journal", str(journal),
                          *[f"task {i}" for i in range(tasks)], "--provider", "fixture",
                          "--fixture-latency", "0.3s", "--max-concurrent", "4")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_watch_follows_a_pool_to_its_end_and_names_each_holder(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite3"
    volley_id = _create(journal, 40)
    pool = subprocess.Popen([*RLM, "volley", "work", volley_id, "--journal", str(journal),
                             "--pool", "2", "-q"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=_env())
    try:
        watched = subprocess.run(
            [*RLM, "volley", "watch", volley_id, "--journal", str(journal),
             "--output-format", "jsonl", "--interval", "0.1s"],
            capture_output=True, text=True, env=_env(), timeout=120,
        )
        assert pool.wait(timeout=60) == 0
    finally:
        if pool.poll() is None:
            pool.send_signal(signal.SIGTERM)
            pool.wait(timeout=30)
    assert watched.returncode == 0, watched.stderr
    boards = [json.loads(line) for line in watched.stdout.splitlines()]
    holders = {(h["host"], h["pid"], h["worker"]) for b in boards for h in b["holdings"]}
    assert len({pid for _, pid, _ in holders}) == 2  # both of the pool's processes
    last = boards[-1]
    assert (last["done"], last["open"], last["in_progress"], last["holdings"]) == (40, 0, 0, [])
    assert sum(w["done"] for w in last["workers"]) == 40
    assert {(w["host"], w["pid"], w["worker"]) for w in last["workers"]} >= holders
    # A worker that joins takes half of the pool's 4 slots while the first still has its
    # 4 requests out: for one latency the pool may hold a little more than 4.
    # Above 1 by a little: two workers start on the whole limit before their first
    # share of it (sharing is once a second), on a volley of a few seconds.
    assert last["max_concurrent"] == 4 and 0.3 < last["efficiency"] < 1.5
    assert abs(sum(w["share"] for w in last["workers"]) - 1.0) < 0.01
    assert not any(pid_alive(pid) for _, pid, _ in holders)


def test_the_board_reads_while_another_process_holds_the_write_lock(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite3"
    volley_id = _create(journal, 3)
    assert rlm_in_process("volley", "work", volley_id, "--journal", str(journal),
                          "-q").returncode == 0
    writer = sqlite3.connect(journal, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # a worker in the middle of a commit
        shown = subprocess.run(
            [*RLM, "volley", "show", volley_id, "--board", "--journal", str(journal)],
            capture_output=True, text=True, env=_env(), timeout=60,
        )
        watched = subprocess.run(
            [*RLM, "volley", "watch", "last", "--journal", str(journal)],
            capture_output=True, text=True, env=_env(), timeout=60,
        )
    finally:
        writer.rollback()
        writer.close()
    assert shown.returncode == 0 and "note: waiting" not in shown.stderr, shown.stderr
    assert shown.stdout.startswith(f"volley {volley_id} (finished): 3 tasks: 3 done")
    assert "efficiency" in shown.stdout and "workers:" in shown.stdout
    assert watched.returncode == 0 and watched.stdout.startswith(f"volley {volley_id}")


def test_the_board_of_a_volley_not_started_says_so(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite3"
    volley_id = _create(journal, 2)
    shown = rlm_in_process("volley", "show", volley_id, "--board", "--journal", str(journal),
                           "--output-format", "json")
    board = json.loads(shown.stdout)
    assert (board["open"], board["workers"], board["efficiency"]) == (2, [], None)
    text = rlm_in_process("volley", "show", volley_id, "--board", "--journal", str(journal))
    assert "pool: 0 workers; no task has finished yet" in text.stdout
