"""A journaled volley holds what is in flight, not its N tasks (invariant 12).

Run as ``rlm volley -f FILE`` runs one: tasks made from the file's text on each
pass (TaskStream), recorded in a SQLite journal and read back from it as they are
used (StoredRows), claimed from it, verdicts kept there, results written in task
order by a writer that reads back what it does not hold.  The volley's task and
result records alive at any moment are counted (the garbage collector tracks
them): they stay under a bound set by the claim batch and the windows, far below
N.  Counting objects, not timing: it cannot be flaky.
"""

from __future__ import annotations

import functools
import gc
import json
from pathlib import Path

import pytest
import trio

from rlm._config import RunConfig, VolleyOptions
from rlm.journal import JournalStore, Owner, Verdict, open_store
from rlm.journal import worker as worker_module
from rlm.journal.volleys import record_volley, result_reader, stored_settings
from rlm.volley.journaled import JournaledVolley
from rlm.volley.output import OrderedWriter
from rlm.volley.records import TaskResult, VolleyTask
from rlm.volley.tasks import TaskStream, parse_lines

WINDOW = 64  # the writer's: results ahead of the next one to write that it holds


#: In every prompt of the volley: only its own records are counted, not those other tests
#: of this process left behind.
MARK = "memory-test-3f9c"


def _records_alive() -> int:
    return sum(1 for o in gc.get_objects()
               if type(o) in (TaskResult, VolleyTask) and o.prompt.startswith(MARK))


def _volley(n: int, path: Path) -> tuple[list[int], list[str]]:
    """Run ``n`` zero-latency tasks; the records alive every 250 results, and stdout."""
    text = "".join(f"{MARK} classify record {i}\n" for i in range(1, n + 1))
    config = RunConfig(provider="fixture", model="fixture", max_concurrent=32, max_llm_calls=None)
    options = VolleyOptions()
    lines: list[str] = []
    alive: list[int] = []
    with JournaledVolley(str(path)) as journal:
        stored = journal.load(journal.create(TaskStream(parse_lines(text)), [], config, options))
        writer = OrderedWriter("jsonl", len(stored.tasks), lines.append,
                               reader=result_reader(journal.store, stored.volley_id),
                               window=WINDOW)

        def written(result: TaskResult) -> None:
            writer.add(result)
            if result.index % 250 == 0:
                alive.append(_records_alive())

        result = trio.run(functools.partial(journal.work, stored, config, options,
                                            on_result=written, keep_results=False))
        assert result.status == "succeeded" and result.summary.succeeded == n
        assert result.tasks == ()  # counted, not held
        writer.finish(result)
    return alive, lines


def test_a_volley_holds_what_is_in_flight_not_its_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 10_000
    # Claim batches (each at most _MAX_CLAIM: the one buffered, the one claimed ahead,
    # and the journal's pages of tasks they were read from), the runner's window, the
    # writer's window and the verdicts waiting for a group commit: whatever N is.  The
    # claim cap is lowered so that this bound sits far below N: holding every task (or
    # result) would reach N by the last sample.
    monkeypatch.setattr(worker_module, "_MAX_CLAIM", 512)
    alive, lines = _volley(n, tmp_path / "journal.sqlite3")
    bound = 4 * 512 + 1_200
    assert bound < n // 3
    assert len(alive) == n // 250 and max(alive) <= bound, alive
    # Nothing was lost for it: every result, in task order, then the summary.
    results = [json.loads(line) for line in lines[:-1]]
    assert [r["index"] for r in results] == list(range(1, n + 1))
    assert json.loads(lines[-1])["summary"]["succeeded"] == n


def test_results_past_the_writers_window_are_read_back_in_order(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "journal.sqlite3"))
    try:
        config = RunConfig(provider="fixture", model="fixture")
        tasks = [VolleyTask(i, f"task {i}") for i in range(1, 11)]
        record_volley(store, "v1", stored_settings(config, {}), tasks, [])
        store.claim_indices("v1", Owner.here(), 10)
        done = [TaskResult(i, f"task {i}", "succeeded", output=f"out {i}") for i in range(1, 11)]
        lines: list[str] = []
        writer = OrderedWriter("jsonl", 10, lines.append, reader=result_reader(store, "v1"),
                               window=3)
        _keep(store, done[1:])  # every task but the first is durable, reported out of order
        for result in reversed(done[1:]):
            writer.add(result)
        assert lines == []  # waiting for task 1; tasks 5..10 were not held
        _keep(store, done[:1])
        writer.add(done[0])
        assert [json.loads(line)["index"] for line in lines] == list(range(1, 11))
    finally:
        store.close()


def _keep(store: JournalStore, results: list[TaskResult]) -> None:
    """Make ``results`` durable in ``store``, as a worker does before it reports them."""
    store.finish("v1", [Verdict(r.index, "done", output=r.output) for r in results])
