"""A stale recovery is an event on the volley's bus, a stderr line and a journal_log row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from rlm.cli import main
from rlm.journal import Owner, open_store
from rlm.journal.records import local_host


def _dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_a_recovered_claim_is_an_event_in_the_trace(tmp_path: Path) -> None:
    journal, trace = str(tmp_path / "j.sqlite3"), tmp_path / "trace.jsonl"
    runner = CliRunner()
    created = runner.invoke(main, ["volley", "create", "a", "b", "c", "d", "--provider", "fixture",
                                   "--journal", journal, "--output-format", "json"])
    assert created.exit_code == 0, created.output
    volley_id = json.loads(created.output)["volley_id"]
    store = open_store(journal)
    try:
        # A worker of this host claimed two tasks, then was killed: its process is gone.
        dead = Owner(local_host(), _dead_pid(), "killed")
        assert [t.index for t in store.claim(volley_id, dead, 2)] == [1, 2]
    finally:
        store.close()
    worked = runner.invoke(main, ["volley", "work", volley_id, "--journal", journal,
                                  "--trace", str(trace), "-q"])
    assert worked.exit_code == 0, worked.output
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    kinds = [e["event"] for e in events]
    recovered = [e for e in events if e["event"] == "stale_recovery"]
    assert [(e["index"], e["call_id"], e["owner"]) for e in recovered] == [
        (1, "t1", str(dead)), (2, "t2", str(dead))
    ]
    assert all(e["volley_id"] == volley_id and "gone" in e["reason"] for e in recovered)
    assert kinds.index("volley_started") < kinds.index("stale_recovery")
    # One line on stderr for the dead holder's claim, however many tasks it held.
    assert worked.output.count("stale_recovery: volley") == 1
    assert f"stale_recovery: volley {volley_id}: 2 tasks reopened (tasks 1–2; " in worked.output
    store = open_store(journal)
    try:
        assert len(store.log("stale_recovery")) == 2
        assert all(t.status == "done" for t in store.tasks(volley_id))
    finally:
        store.close()
