"""The run history: `rlm run` keeps every run, `rlm runs` lists them, `rlm view last` draws one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlm.history import HISTORY_ENV, RunHistory, history_enabled
from tests.view.view_helpers import events, fixture_run, rlm, rlm_in_process

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    """Three fixture runs kept in a private state directory; the third with --trace and --view."""
    tmp = tmp_path_factory.mktemp("history")
    env = {"XDG_STATE_HOME": str(tmp / "state")}
    context = tmp / "F.txt"
    from rlm.fixtures.needle import generate_needle
    context.write_text(generate_needle(30_000, seed=5).text, encoding="utf-8")
    for query in ("What is the magic number?", "What was the magic number?"):
        done = rlm("run", query, "--context-file", str(context), "--provider", "fixture",
                   "--model", "fixture:2", "-q", env=env)
        assert done.returncode == 0, done.stderr
    trace = fixture_run(tmp, "--view", env=env)
    return tmp, env, trace


def listed(env: dict[str, str]) -> list[dict[str, object]]:
    done = rlm_in_process("runs", "--json", env=env)
    assert done.returncode == 0, done.stderr
    value: list[dict[str, object]] = json.loads(done.stdout)
    return value


def test_runs_lists_the_last_runs_newest_first(state: tuple[Path, dict[str, str], Path]) -> None:
    _, env, trace = state
    runs = listed(env)
    assert len(runs) == 3
    assert [r["status"] for r in runs] == ["answered"] * 3
    assert [r["query"] for r in runs][1:] == ["What was the magic number?",
                                              "What is the magic number?"]
    newest = runs[0]
    finished = next(e for e in events(trace) if e["event"] == "run_finished")
    assert newest["llm_calls"] == finished["llm_calls"]
    assert abs(float(str(newest["duration_s"])) - finished["duration_s"]) < 0.01
    assert newest["calls"] == 5 and newest["cost"] == finished["usage_detail"]["cost"]
    # The history keeps its own copy of the trace, identical to the one --trace wrote.
    assert Path(str(newest["trace"])).read_bytes() == trace.read_bytes()
    table = rlm_in_process("runs", env=env)
    assert table.returncode == 0
    for run in runs:
        assert str(run["id"]) in table.stdout
    assert "What was the magic number?" in table.stdout


def test_runs_show_prints_one_summary(state: tuple[Path, dict[str, str], Path]) -> None:
    _, env, _ = state
    newest = listed(env)[0]
    for ref in ("last", str(newest["id"])[:-2]):
        done = rlm_in_process("runs", "show", ref, env=env)
        assert done.returncode == 0, done.stderr
        assert str(newest["id"]) in done.stdout and "answered" in done.stdout
    missing = rlm_in_process("runs", "show", "19990101", env=env)
    assert missing.returncode == 2 and missing.stderr.startswith("Error: no run")


def test_view_last_draws_the_newest_run(state: tuple[Path, dict[str, str], Path]) -> None:
    tmp, env, trace = state
    done = rlm_in_process("view", "last", "-o", str(tmp / "last.html"), env=env)
    assert done.returncode == 0, done.stderr
    html = (tmp / "last.html").read_text(encoding="utf-8")
    run_id = next(e for e in events(trace) if e["event"] == "run_started")["wall_time"]
    assert run_id.replace("<", "\\u003c") in html
    older = rlm_in_process("view", "last~2", env=env)
    assert older.returncode == 0, older.stderr
    assert "What is the magic number?" in Path(older.stdout.strip()).read_text(encoding="utf-8")


def test_run_view_writes_the_page_next_to_the_trace(
        state: tuple[Path, dict[str, str], Path]) -> None:
    _, _, trace = state
    assert trace.with_suffix(".html").exists()
    assert "rlm-data" in trace.with_suffix(".html").read_text(encoding="utf-8")


def test_no_history_keeps_nothing(state: tuple[Path, dict[str, str], Path]) -> None:
    tmp, env, _ = state
    before = len(listed(env))
    done = rlm("run", "What is the magic number?", "--context-file", str(tmp / "F.txt"),
               "--provider", "fixture", "--model", "fixture:2", "-q", "--no-history", env=env)
    assert done.returncode == 0, done.stderr
    assert len(listed(env)) == before
    for value, kept in (("off", False), ("0", False), ("1", True), ("", True)):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(HISTORY_ENV, value)
            assert history_enabled(True) is kept
    assert history_enabled(False) is False
    refused = rlm_in_process("run", "What is the magic number?", "--context-file",
                             str(tmp / "F.txt"), "--provider", "fixture", "--no-history",
                             "--view", env=env)
    assert refused.returncode == 2 and "--view" in refused.stderr
    assert len(listed(env)) == before


def test_the_size_cap_removes_the_oldest_runs(tmp_path: Path) -> None:
    history = RunHistory(tmp_path / "runs", cap_bytes=10_000)
    entries = []
    for _ in range(4):
        entry = history.begin({"kind": "run", "query": "q"})
        entry.trace_path.write_bytes(b"x" * 4_000)
        entries.append(entry)
    removed = history.prune(keep=entries[-1])
    assert removed == [entries[0].id, entries[1].id]
    assert [e.id for e in history.entries()] == [e.id for e in entries[2:]]


def test_pruning_after_every_run_keeps_the_cap_through_the_ledger(tmp_path: Path) -> None:
    # As rlm run does: prune after each run.  Runs under the cap only add to the ledger;
    # the run that passes it has the oldest removed, and one removed by hand is noticed.
    history = RunHistory(tmp_path / "runs", cap_bytes=10_000)
    entries = []
    for size in (4_000, 4_000, 1_000, 4_000):
        entry = history.begin({"kind": "run", "query": "q"})
        entry.trace_path.write_bytes(b"x" * size)
        entries.append(entry)
        removed = history.prune(keep=entry)
        assert removed == ([entries[0].id] if len(entries) == 4 else [])
    shutil.rmtree(entries[1].path)
    later = []
    for _ in range(2):
        entry = history.begin({"kind": "run", "query": "q"})
        entry.trace_path.write_bytes(b"x" * 4_000)
        history.prune(keep=entry)
        later.append(entry.id)
    on_disk = sum(f.stat().st_size for f in (tmp_path / "runs").rglob("*") if f.is_file()
                  and f.name != ".size")
    assert on_disk <= 10_000
    assert [e.id for e in history.entries()] == later  # the oldest went first


def test_a_killed_runs_half_written_trace_counts_in_the_cap(tmp_path: Path) -> None:
    # A run killed mid-way never adds its size to the ledger; its .part trace (sparse
    # here: the size is what counts) must still count, and go first as the oldest.
    history = RunHistory(tmp_path / "runs", cap_bytes=1 << 20)
    first = history.begin({"kind": "run", "query": "q"})
    first.trace_path.write_bytes(b"x" * 1_000)
    assert history.prune(keep=first) == []
    killed = history.begin({"kind": "run", "query": "killed"})
    with open(killed.path / ".trace.jsonl.4242.part", "wb") as part:
        part.truncate(1200 << 20)  # what a killed run once left: 1.2 GB
    later = history.begin({"kind": "run", "query": "q"})
    later.trace_path.write_bytes(b"x" * 1_000)
    assert history.prune(keep=later) == [first.id, killed.id]
    assert [e.id for e in history.entries()] == [later.id]
    # The ledger counts the runs again: the next run takes the quick path and stays.
    last = history.begin({"kind": "run", "query": "q"})
    last.trace_path.write_bytes(b"x" * 1_000)
    assert history.prune(keep=last) == []
    assert [e.id for e in history.entries()] == [later.id, last.id]


def test_a_killed_run_is_listed_as_killed_and_its_cut_trace_can_be_viewed(
        state: tuple[Path, dict[str, str], Path], tmp_path: Path) -> None:
    _, _, trace = state
    history = RunHistory(tmp_path / "state" / "rlm" / "runs")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    entry = history.begin({"kind": "run", "query": "killed mid-run"})
    summary = json.loads(entry.summary_path.read_text(encoding="utf-8"))
    entry.write_summary({**summary, "pid": int(dead.stdout)})
    text = trace.read_text(encoding="utf-8")
    (entry.path / f".trace.jsonl.{dead.stdout.strip()}.part").write_text(text[: len(text) // 2])
    assert entry.summary()["status"] == "killed"
    done = rlm_in_process("view", "last", env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert done.returncode == 0, done.stderr
    assert "cut" in done.stderr
    assert Path(done.stdout.strip()) == entry.path / "trace.html"


def test_a_killed_run_with_trace_is_viewed_from_its_half_written_trace(
        state: tuple[Path, dict[str, str], Path], tmp_path: Path) -> None:
    """`rlm run --trace run.jsonl` killed: what it wrote is in .run.jsonl.PID.part beside
    run.jsonl (which may hold an earlier run's trace), and `rlm view last` shows that."""
    _, _, trace = state
    history = RunHistory(tmp_path / "state" / "rlm" / "runs")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    user_trace = tmp_path / "run.jsonl"
    user_trace.write_text("an earlier run's trace\n", encoding="utf-8")
    entry = history.begin({"kind": "run", "query": "killed mid-run",
                           "user_trace": str(user_trace)})
    summary = json.loads(entry.summary_path.read_text(encoding="utf-8"))
    entry.write_summary({**summary, "pid": int(dead.stdout)})
    text = trace.read_text(encoding="utf-8")
    part = tmp_path / f".run.jsonl.{dead.stdout.strip()}.part"
    part.write_text(text[: len(text) // 2], encoding="utf-8")
    shown = entry.summary()
    assert shown["status"] == "killed"
    assert shown["trace"] == str(part)
    done = rlm_in_process("view", "last", env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert done.returncode == 0, done.stderr
    assert "cut" in done.stderr
    assert Path(done.stdout.strip()) == tmp_path / "run.html"


def test_a_volley_is_kept_too(state: tuple[Path, dict[str, str], Path]) -> None:
    tmp, env, _ = state
    done = rlm("volley", "What is the magic number?", "Summarise it", "--context-file",
               str(tmp / "F.txt"), "--provider", "fixture", "-q", env=env)
    assert done.returncode == 0, done.stderr
    newest = listed(env)[0]
    assert newest["kind"] == "volley" and newest["status"] == "succeeded"
    assert newest["calls"] == 2
    page = rlm_in_process("view", "last", env=env)
    assert page.returncode == 0, page.stderr
    assert "volley_finished" not in page.stderr  # a known kind, not "from a newer rlm"


def test_an_rlm_volley_counts_every_request_its_tasks_sent(tmp_path: Path) -> None:
    """An --rlm task makes many requests (steps and sub-queries), not one per task."""
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    context = tmp_path / "F.txt"
    from rlm.fixtures.needle import generate_needle
    context.write_text(generate_needle(30_000, seed=5).text, encoding="utf-8")
    done = rlm("volley", "--rlm", "What is the magic number?", "Find the magic number",
               "--context-file", str(context), "--provider", "fixture", "--model", "fixture:3",
               "--trace", str(tmp_path / "v.jsonl"), "-q", env=env)
    assert done.returncode == 0, done.stderr
    newest = listed(env)[0]
    sent = sum(1 for e in events(tmp_path / "v.jsonl") if e["event"] == "llm_request")
    assert sent > 2 * 2  # two tasks, each a root step and its fan-out at least
    assert newest["llm_calls"] == sent


def test_a_meta_run_keeps_no_answer_in_the_history_either(tmp_path: Path) -> None:
    """--trace-content meta is for sensitive inputs: the answer comes from the input."""
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    context = tmp_path / "F.txt"
    from rlm.fixtures.needle import generate_needle
    needle = generate_needle(30_000, seed=5)
    context.write_text(needle.text, encoding="utf-8")
    done = rlm("run", "What is the magic number?", "--context-file", str(context),
               "--provider", "fixture", "--model", "fixture:2", "--trace-content", "meta",
               "-q", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(needle.answer)  # answered, on stdout only
    newest = listed(env)[0]
    assert newest["answer"] is None and newest["status"] == "answered"
    kept = [p for p in (tmp_path / "state").rglob("*") if p.is_file()]
    assert {p.name for p in kept} >= {"summary.json", "trace.jsonl"}
    for path in kept:
        assert str(needle.answer).encode() not in path.read_bytes(), path


def test_a_query_from_bytes_that_are_not_utf8_is_kept_as_it_came(tmp_path: Path) -> None:
    # A shell argument that is not UTF-8 reaches Python as a lone surrogate; writing the
    # summary used to fail ("Error: UnicodeEncodeError", exit 1, a volley half stored).
    history = RunHistory(tmp_path / "runs")
    entry = history.begin({"kind": "run", "query": "q\udcff"})
    assert entry.summary()["query"] == "q\udcff"
    done = subprocess.run(
        [sys.executable, "-m", "rlm", "run", b"What is it?\xff".decode(errors="surrogateescape"),
         "--provider", "fixture", "-q"],
        capture_output=True, text=True, env={**os.environ, "XDG_STATE_HOME": str(tmp_path)},
        check=False, timeout=60,
    )
    assert done.returncode == 2, done.stderr
    # Advice for a command line, not for Python ("decode ... with errors='replace'").
    assert ("Error: the query holds bytes that are not UTF-8 text (at character 11): give it "
            "as UTF-8") in done.stderr, done.stderr
    assert "errors=" not in done.stderr
    assert "Traceback" not in done.stderr and "UnicodeEncodeError" not in done.stderr


def test_a_state_directory_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("not a folder")
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    for args in (["runs"], ["runs", "show", "last"], ["view", "last"]):
        done = rlm_in_process(*args, env=env)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("Error: cannot read the run history at "), done.stderr
        assert "NotADirectoryError" not in done.stderr
