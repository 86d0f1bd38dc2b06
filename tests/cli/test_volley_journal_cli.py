"""`rlm volley` and its journal as a demanding user drives them: resume, work, list, show.

In-process CLI runs (``rlm_in_process``) on the built-in fixture provider and a
real SQLite journal in a temporary directory; the pool test runs real worker
processes.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlm.journal import Owner, open_store
from rlm.journal.records import local_host, process_started
from rlm.volley.records import VolleyResult
from tests.helpers import pid_alive, rlm_in_process


def _create(journal: Path, *args: str) -> str:
    done = rlm_in_process("volley", "create", "--journal", str(journal), *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _workers(journal: Path, volley_id: str) -> int:
    store = open_store(str(journal))
    try:
        return store.live_workers(volley_id, 600.0)
    finally:
        store.close()


def _counts(journal: Path, volley_id: str) -> dict[str, int]:
    store = open_store(str(journal))
    try:
        return {state: n for state, n in store.volley(volley_id).counts.items()}
    finally:
        store.close()


def test_resume_and_work_apply_the_named_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stored: an endpoint nothing listens on.  The profile says where to send now.
    journal = tmp_path / "j.sqlite3"
    (tmp_path / "rlm.toml").write_text('[profiles.here]\nprovider = "fixture"\n')
    monkeypatch.chdir(tmp_path)
    for verb in (["volley", "--resume"], ["volley", "work"]):
        volley_id = _create(journal, "a", "b", "--base-url", "http://127.0.0.1:9/v1",
                            "--model", "fixture", "--max-retries", "0")
        done = rlm_in_process(*verb, volley_id, "--journal", str(journal), "--profile",
                              "here", "-q")
        assert done.returncode == 0, (verb, done.stderr)
        assert _counts(journal, volley_id)["done"] == 2


def test_commands_that_read_a_journal_never_create_one(tmp_path: Path) -> None:
    missing = tmp_path / "typo.sqlite3"
    for args in (["volley", "list"], ["volley", "show", "last"], ["volley", "work", "last"],
                 ["volley", "--resume", "last"]):
        done = rlm_in_process(*args, "--journal", str(missing))
        assert done.returncode == 1, args
        assert done.stderr.startswith(f"Error: no journal at {missing}"), done.stderr
        assert not missing.exists()


@pytest.mark.parametrize("refused", [("--max-concurrent", "100000"), ("--max-cost", "nan")])
def test_a_volley_or_eval_refused_for_a_setting_writes_no_journal(
    tmp_path: Path, refused: tuple[str, str]
) -> None:
    # The journal was opened (and so created, its schema written) before the settings
    # were checked: a refused command left an empty journal behind (issue 27).
    journal = tmp_path / "j.sqlite3"
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("a\nb\n")
    for command in (["volley", "-f", str(tasks)], ["eval", "needle", "--tiers", "2k", "-y"]):
        done = rlm_in_process(*command, *refused, "--provider", "fixture",
                              "--journal", str(journal))
        assert done.returncode == 2, (command, done.stderr)
        assert done.stderr.startswith(f"Error: {refused[0]} must be "), done.stderr
        assert not list(tmp_path.glob("j.sqlite3*")), command


def test_an_unknown_volley_id_is_a_usage_error_that_says_how_to_list_them(
    tmp_path: Path,
) -> None:
    # A mistyped id is the user's mistake (exit 2), not a journal failure (exit 1).
    journal = tmp_path / "j.sqlite3"
    _create(journal, "a", "--provider", "fixture")
    rlm_bin = str(Path(sys.executable).with_name("rlm"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    for args in (["volley", "show", "nosuch"], ["volley", "work", "nosuch"],
                 ["volley", "--resume", "nosuch"]):
        done = subprocess.run([rlm_bin, *args, "--journal", str(journal)], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("Error: no volley 'nosuch' in journal"), done.stderr
        assert f"rlm volley list --journal {journal}" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_resume_last_on_an_empty_journal_is_a_usage_error(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite3"
    open_store(str(journal)).close()  # a journal with no volley
    for args in (["volley", "--resume", "last"], ["volley", "show", "last"]):
        done = rlm_in_process(*args, "--journal", str(journal))
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith(f"Error: journal {journal} holds no volley yet"), done.stderr


def test_an_empty_journal_path_says_it_is_empty(tmp_path: Path) -> None:
    # Path("") is the working directory: "--journal . is a directory" named neither.
    for args in (["volley", "list"], ["volley", "create", "a", "--provider", "fixture"]):
        done = rlm_in_process(*args, "--journal", "")
        assert done.returncode == 2, args
        assert done.stderr.startswith("Error: --journal is empty: give a journal file path")


def test_show_says_running_while_a_live_worker_holds_a_task(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite3"
    volley_id = _create(journal, "a", "b", "c", "d", "--provider", "fixture")

    def status() -> str:
        done = rlm_in_process("volley", "show", volley_id, "--journal", str(journal),
                              "--output-format", "json")
        assert done.returncode == 0, done.stderr
        return str(json.loads(done.stdout)["status"])

    here = local_host()
    # Held an hour ago (past the stale timeout), and by a process of this host that is gone.
    old = open_store(str(journal), clock=lambda: time.time() - 3600)
    try:
        old.claim(volley_id, Owner(here, os.getpid(), "stale"))
    finally:
        old.close()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    store = open_store(str(journal))
    try:
        store.claim(volley_id, Owner(here, int(gone.stdout), "dead"))
        assert status() == "interrupted"
        # This process's pid, but the worker that registered it started at another
        # time: the pid was reused, the worker is gone.
        reused = Owner(here, os.getpid(), "reused", started=(process_started(os.getpid()) or 0) + 1)
        store.register_worker(volley_id, reused)
        store.claim(volley_id, reused)
        assert status() == "interrupted"
        store.claim(volley_id, Owner(here, os.getpid(), "live"))  # this process: alive
        assert status() == "running"
    finally:
        store.close()


def test_show_gives_a_running_volleys_heartbeat_age(tmp_path: Path) -> None:
    # A worker on another host was killed: its claim says "running" until the stale
    # timeout, and show tells how old the last heartbeat is (text, JSON, the task).
    from rlm.volley.output import format_summary
    from rlm.volley.readback import stored_result

    journal = tmp_path / "j.sqlite3"
    volley_id = _create(journal, "a", "b", "--provider", "fixture")
    elsewhere = Owner("elsewhere~0a1b2c3d", 4242, "w1")
    then = open_store(str(journal), clock=lambda: 1_000.0)
    try:
        then.claim(volley_id, elsewhere)
    finally:
        then.close()

    def shown(at: float) -> VolleyResult:
        store = open_store(str(journal), clock=lambda: at)
        try:
            return stored_result(store, volley_id)
        finally:
            store.close()

    result = shown(1_042.0)
    assert result.status == "running" and result.heartbeat_age_sec == 42.0
    assert result.to_dict()["heartbeat_age_sec"] == 42.0
    assert format_summary(result).splitlines()[0] == (
        f"=== volley {volley_id}: running (heartbeat 42s ago) ==="
    )
    assert result.tasks[0].error == (
        "in progress (heartbeat 42s ago, held by elsewhere~0a1b2c3d/4242/w1)"
    )
    assert result.tasks[1].error == "not started"
    late = shown(1_000.0 + 601)  # past the default stale timeout: nobody is working on it
    assert late.status == "interrupted" and late.heartbeat_age_sec is None
    assert late.tasks[0].error == (
        "in progress (heartbeat 10m01s ago, held by elsewhere~0a1b2c3d/4242/w1)"
    )
    # The commands say it too (the journal's clock is the real one there).
    now = open_store(str(journal))
    try:
        now.claim(volley_id, elsewhere)
    finally:
        now.close()
    text = rlm_in_process("volley", "show", volley_id, "--journal", str(journal))
    assert f"=== volley {volley_id}: running (heartbeat " in text.stdout
    done = rlm_in_process("volley", "show", volley_id, "--journal", str(journal),
                          "--output-format", "json")
    assert json.loads(done.stdout)["heartbeat_age_sec"] >= 0


def test_a_stale_timeout_too_short_for_heartbeats_is_refused(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite3"
    volley_id = _create(journal, "a", "--provider", "fixture")
    done = rlm_in_process("volley", "work", volley_id, "--journal", str(journal),
                          "--stale-timeout", "10ms")
    assert done.returncode == 2
    assert "--stale-timeout must be at least 1s" in done.stderr
    assert _counts(journal, volley_id)["open"] == 1


def test_work_says_when_tasks_failed_and_exits_non_zero(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite3"
    volley_id = _create(journal, "a", "b", "--provider", "fixture", "--fixture-latency", "5s",
                        "--timeout", "50ms")
    done = rlm_in_process("volley", "work", volley_id, "--journal", str(journal), "-q")
    assert done.returncode == 1
    assert f"Error: 2 task(s) of volley {volley_id} failed" in done.stderr


def test_a_stored_limit_can_be_lifted_on_resume(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite3"
    volley_id = _create(journal, "a", "b", "c", "--provider", "fixture",
                        "--max-llm-calls", "1")
    first = rlm_in_process("volley", "--resume", volley_id, "--journal", str(journal), "-q")
    assert first.returncode == 3 and "--max-llm-calls none lifts it" in first.stderr
    done = rlm_in_process("volley", "--resume", volley_id, "--journal", str(journal), "-q",
                          "--max-llm-calls", "none", "--output-format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["summary"]["succeeded"] == 3


def test_resume_estimate_sends_nothing_and_changes_nothing(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite3"
    volley_id = _create(journal, "a", "b", "c", "--provider", "fixture",
                        "--fixture-latency", "5s", "--timeout", "50ms")
    assert rlm_in_process("volley", "--resume", volley_id, "--journal", str(journal),
                          "--max-llm-calls", "1", "-q").returncode == 3
    before = _counts(journal, volley_id)
    assert before["failed"] == 1 and before["open"] == 2
    done = rlm_in_process("volley", "--resume", volley_id, "--journal", str(journal),
                          "--estimate")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("estimate: 3 tasks")  # the two open ones and the failed one
    assert _counts(journal, volley_id) == before
    skip = rlm_in_process("volley", "--resume", volley_id, "--journal", str(journal),
                          "--estimate", "--skip-failed")
    assert skip.stdout.startswith("estimate: 2 tasks")


@pytest.mark.parametrize("flag", [["--context", "new"], ["--rlm"]])
def test_resume_refuses_flags_it_would_ignore(tmp_path: Path, flag: list[str]) -> None:
    journal = tmp_path / "j.sqlite3"
    volley_id = _create(journal, "a", "--provider", "fixture")
    done = rlm_in_process("volley", "--resume", volley_id, "--journal", str(journal), *flag)
    assert done.returncode == 2
    assert done.stderr.startswith("Error: --resume ")
    assert _counts(journal, volley_id)["open"] == 1


def test_a_signal_to_the_pool_stops_every_worker(tmp_path: Path) -> None:
    # SIGTERM (a supervisor, `kill`) reaches only the pool's first process: it must
    # stop its siblings, which give their tasks back, instead of waiting for them
    # to finish the whole volley.
    journal = tmp_path / "j.sqlite3"
    volley_id = _create(journal, *[f"task {i}" for i in range(60)], "--provider", "fixture",
                        "--fixture-latency", "1s", "--max-concurrent", "3")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    pool = subprocess.Popen(
        [sys.executable, "-m", "rlm", "volley", "work", volley_id, "--journal", str(journal),
         "--pool", "3", "-q"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )
    siblings: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _workers(journal, volley_id) < 3:
            time.sleep(0.1)  # until all three work
        siblings = [int(p) for p in subprocess.run(
            ["pgrep", "-f", f"rlm volley work {volley_id}"], capture_output=True, text=True,
        ).stdout.split() if int(p) != pool.pid]
        assert len(siblings) == 2
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(timeout=30) == 130
        assert not [pid for pid in siblings if pid_alive(pid)]
        counts = _counts(journal, volley_id)
        assert counts["in_progress"] == 0 and counts["open"] > 0
    finally:
        pool.kill()
        for pid in siblings:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_resumed_volley_counts_on_from_the_tasks_already_done(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite3"
    volley_id = _create(journal, "a", "b", "c", "--provider", "fixture",
                        "--max-llm-calls", "1")
    assert rlm_in_process("volley", "--resume", volley_id, "--journal", str(journal),
                          "-q").returncode == 3
    done = rlm_in_process("volley", "--resume", volley_id, "--journal", str(journal),
                          "--max-llm-calls", "none", "--no-estimate")
    assert done.returncode == 0, done.stderr
    counters = [line.split("]")[0] + "]" for line in done.stderr.splitlines()
                if line.startswith("[")]
    assert counters == ["[2/3]", "[3/3]"]


def test_a_resume_beside_another_worker_prints_that_workers_results_too(tmp_path: Path) -> None:
    # `rlm volley work ID` runs tasks a and b while `--resume ID` runs c and d: the
    # resume prints the whole volley, a and b included, and it succeeded.
    import threading

    from rlm.journal import Owner, Verdict

    journal = tmp_path / "j.sqlite3"
    volley_id = _create(journal, "a", "b", "c", "d", "--provider", "fixture")
    store = open_store(str(journal))
    other = Owner.here("other-worker")  # this live process: never reopened as dead
    store.register_worker(volley_id, other)
    held = store.claim(volley_id, other, 2)
    assert [t.index for t in held] == [1, 2]

    def finish_later() -> None:
        time.sleep(1.0)
        store.finish(volley_id, [Verdict(t.index, "done", output=f"by the other {t.index}")
                                 for t in held])

    thread = threading.Thread(target=finish_later)
    thread.start()
    try:
        done = rlm_in_process("volley", "--resume", volley_id, "--journal", str(journal),
                              "--output-format", "json", "-q")
    finally:
        thread.join()
        store.retire_worker(other)
        store.close()
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "succeeded"
    assert [t["output"] for t in out["tasks"][:2]] == ["by the other 1", "by the other 2"]
    assert [t["status"] for t in out["tasks"]] == ["succeeded"] * 4


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_create_prints_its_id_as_json(tmp_path: Path, fmt: str) -> None:
    done = rlm_in_process("volley", "create", "a", "--provider", "fixture", "--journal",
                          str(tmp_path / "j.sqlite3"), "--output-format", fmt)
    assert done.returncode == 0
    assert json.loads(done.stdout)["volley_id"].startswith("v")


def test_a_holder_with_many_reopened_claims_gets_one_stderr_line() -> None:
    from rlm.cli._stale_lines import recovery_lines
    from rlm.journal import Owner, Recovered

    dead, slow = Owner("h", 1, "dead"), Owner("h", 2, "slow")
    found = [Recovered("v1", i, dead, 5.0, "gone") for i in [*range(3, 1003), 1005, 1007]]
    found.append(Recovered("v1", 2, slow, 700.0, "silent"))
    lines = recovery_lines(found)
    assert lines == [
        "stale_recovery: volley v1: 1002 tasks reopened (tasks 3–1002, 1005, 1007; gone; "
        "held by h/1/dead, silent 5.0s)",
        "stale_recovery: volley v1 task 2 reopened (silent; held by h/2/slow, silent 700.0s)",
    ]
    many = recovery_lines([Recovered("v1", i, dead, 1.0, "gone") for i in range(1, 40, 2)])
    assert "(tasks 1, 3, 5, 7, 9, 11 and 14 more; gone;" in many[0]


def test_a_hosted_api_without_a_key_stops_before_anything_is_sent(tmp_path: Path) -> None:
    # As `rlm run` does: one line naming the variables (exit 4), not every task failing alone.
    journal = tmp_path / "j.sqlite3"
    hosted = ("--base-url", "https://api.openai.com/v1", "--model", "gpt-4.1",
              "--max-retries", "0", "--journal", str(journal))
    no_key = {"ANTHROPIC_API_KEY": ""}
    said = "Error: no API key for https://api.openai.com/v1: set RLM_API_KEY (or OPENAI_API_KEY)"
    done = rlm_in_process("volley", "a", "b", *hosted, env=no_key)
    assert done.returncode == 4, done.stderr
    assert done.stderr.startswith(said), done.stderr
    assert rlm_in_process("volley", "list", "--journal", str(journal)).stdout == ""  # not stored
    estimated = rlm_in_process("volley", "a", "b", *hosted, "--estimate", env=no_key)
    assert estimated.returncode == 0 and "estimate: 2 tasks" in estimated.stdout  # sends nothing
    volley_id = _create(journal, "a", "b", *hosted[:-2])  # recording one needs no key
    for verb in (["volley", "--resume"], ["volley", "work"]):
        done = rlm_in_process(*verb, volley_id, "--journal", str(journal), "-q", env=no_key)
        assert done.returncode == 4, (verb, done.stderr)
        assert done.stderr.startswith(said), done.stderr
        assert _counts(journal, volley_id)["open"] == 2  # no task was tried


def test_show_does_not_claim_a_peak_of_zero_in_flight(tmp_path: Path) -> None:
    # The journal keeps each task's retries, not the volley's peak or its 429s: `show`
    # printed "peak 0 in flight, ... 0 rate limited" for a volley that ran 3 at once.
    journal = str(tmp_path / "j.sqlite3")
    ran = rlm_in_process("volley", "a", "b", "c", "--provider", "fixture", "--journal", journal)
    assert "traffic: peak " in ran.stdout and "traffic: peak 0 " not in ran.stdout
    shown = rlm_in_process("volley", "show", "last", "--journal", journal)
    assert shown.stdout.rstrip().endswith(
        "traffic: 0 retries (peak in flight and 429s: not in the journal)"), shown.stdout


def test_show_of_a_volley_with_no_verdict_yet_claims_no_peak_of_zero_either(
    tmp_path: Path,
) -> None:
    # Read back while its first tasks are in flight (no verdict yet), a volley's traffic
    # line still said "peak 0 in flight, 0 retries, 0 rate limited": the journal keeps
    # neither, whether or not a task has finished.
    journal = tmp_path / "j.sqlite3"
    volley_id = _create(journal, "a", "b", "--provider", "fixture")
    store = open_store(str(journal))
    try:
        store.claim(volley_id, Owner("elsewhere~0a1b2c3d", 4242, "w1"))
    finally:
        store.close()
    shown = rlm_in_process("volley", "show", volley_id, "--journal", str(journal))
    assert shown.stdout.startswith(f"=== volley {volley_id}: running "), shown.stdout
    assert "traffic: 0 retries (peak in flight and 429s: not in the journal)" in shown.stdout
    assert "traffic: peak 0 in flight" not in shown.stdout


def test_a_resume_with_nothing_left_to_run_claims_no_peak_of_zero(tmp_path: Path) -> None:
    # Every result is the journal's: this process sent nothing, the runs that did kept no
    # peak in flight or 429s there.
    journal = str(tmp_path / "j.sqlite3")
    ran = rlm_in_process("volley", "a", "b", "--provider", "fixture", "--journal", journal)
    assert "traffic: peak " in ran.stdout and "traffic: peak 0 " not in ran.stdout
    volley_id = ran.stdout.split("=== volley ")[1].split(":")[0]
    resumed = rlm_in_process("volley", "--resume", volley_id, "--journal", journal)
    assert resumed.returncode == 0, resumed.stderr
    assert "traffic: 0 retries (peak in flight and 429s: not in the journal)" in resumed.stdout


def test_list_and_show_answer_while_another_process_holds_the_write_lock(
    tmp_path: Path,
) -> None:
    """A volley writing to the journal holds SQLite's write lock; reading the journal
    (list, show) takes none under WAL, so it answers rather than waiting on the writer."""
    journal = tmp_path / "j.sqlite3"
    volley_id = _create(journal, "a", "b", "--provider", "fixture")
    writer = sqlite3.connect(journal, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE tasks SET attempts = attempts + 1")  # uncommitted
        listed = rlm_in_process("volley", "list", "--journal", str(journal),
                                "--output-format", "json")
        assert listed.returncode == 0, listed.stderr
        assert [row["volley_id"] for row in json.loads(listed.stdout)] == [volley_id]
        shown = rlm_in_process("volley", "show", "last", "--journal", str(journal),
                               "--output-format", "json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["volley_id"] == volley_id
        assert "waiting" not in listed.stderr + shown.stderr
    finally:
        writer.execute("ROLLBACK")
        writer.close()
