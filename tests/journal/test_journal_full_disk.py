"""A journal whose disk is full: the error says which file, that the disk is full, and
that nothing committed was lost; nothing committed is.

SQLite's ``max_page_count`` caps the file where it stands, so the next write that needs
a page fails with SQLite's real SQLITE_FULL ("database or disk is full"), the error a
full disk gives, after which SQLite has rolled the transaction back itself.  (An end
to end run against a real full filesystem is in tests/e2e/test_journal_volley_e2e.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from rlm.errors import JournalError
from rlm.journal import JournalStore, Owner, Verdict, open_store
from rlm.journal._threads import inline_run_sync
from rlm.journal.worker import JournalWorker
from rlm.volley.records import TaskResult, VolleyTask

_OWNER = Owner("h", 1, "w")


def fill(store: JournalStore) -> None:
    """Let the journal's file grow no more: the disk it is on is full."""
    with store.backend.transaction() as tx:
        ((pages,),) = tx.rows("PRAGMA page_count")
        tx.rows(f"PRAGMA max_page_count = {int(pages)}")


def _journal(path: Path, n: int) -> JournalStore:
    store = open_store(str(path), clock=trio.current_time)
    store.create_volley("v", {}, [VolleyTask(i, f"t{i}").to_dict() for i in range(1, n + 1)])
    return store


def test_a_full_disk_says_so_and_keeps_what_was_committed(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    store = open_store(str(path))
    try:
        store.create_volley("v", {}, [{"index": i, "prompt": f"t{i}"} for i in (1, 2)])
        store.claim_indices("v", _OWNER, 2)
        store.finish("v", [Verdict(1, "done", output="kept")])
        fill(store)
        with pytest.raises(JournalError) as caught:
            store.finish("v", [Verdict(2, "done", output="x" * 100_000)])
        # The connection is still usable: what needs no new page is written.
        store.release("v", _OWNER, [2])
    finally:
        store.close()
    message = str(caught.value)
    assert message.startswith(
        f"journal {path}: the disk is full (database or disk is full): this write was rolled "
        "back, and nothing the journal had committed before it is lost; free space on the "
        f"disk that holds {path}"
    ), message
    assert "no transaction is active" not in message
    reopened = open_store(str(path))
    try:
        rows = reopened.tasks("v")
    finally:
        reopened.close()
    assert [(r.status, r.output) for r in rows] == [("done", "kept"), ("open", None)]


async def test_a_volley_whose_disk_fills_reports_nothing_it_could_not_write(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    """Verdicts that could not be committed are never reported; the error the worker
    ends with says the disk is full, and what was committed stays."""
    path = tmp_path / "j.sqlite3"
    store = _journal(path, 4)
    told: list[int] = []
    try:
        worker = JournalWorker(store, "v", owner=_OWNER, run_sync=inline_run_sync)
        with pytest.raises(JournalError) as caught:
            async with worker.running():
                first = await worker.claim()
                assert first is not None
                await worker.accept(TaskResult(first.index, first.prompt, "succeeded", output="a"))
                told.append(first.index)
                fill(store)
                second = await worker.claim()
                assert second is not None
                worker.keep(TaskResult(second.index, second.prompt, "succeeded",
                                       output="b" * 100_000), lambda r: told.append(r.index))
                await trio.sleep_forever()  # the committer's failure ends the body
        rows = store.tasks("v")
    finally:
        store.close()
    assert told == [1]
    assert str(caught.value).startswith(f"journal {path}: the disk is full"), caught.value
    assert "the verdicts of 1 task(s) (2) were not written and not reported" in str(caught.value)
    assert "nothing the journal had committed before it is lost" in str(caught.value)
    assert rows[0].status == "done" and rows[1].status != "done"
