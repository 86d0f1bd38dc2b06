"""Opening a journal file: what is refused untouched, how an older schema is upgraded
in place (SQLite and PostgreSQL), which index each lookup of claims reads, and how a
write waits on another process's write lock."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from rlm.errors import JournalError
from rlm.journal._backends import Backend, PostgresBackend, SQLiteBackend, Tx
from rlm.journal._open import open_store
from rlm.journal._schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION
from rlm.journal.batches import batches, plan_batch
from rlm.journal.records import Owner, Verdict, local_host, pid_alive
from rlm.journal.store import JournalStore
from tests.journal_store_fixtures import A, B, FakeClock, RecordingSQLite, task_specs

_T = TypeVar("_T")


def test_a_newer_journal_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    open_store(str(path)).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    before = path.read_bytes()
    with pytest.raises(JournalError, match="newer rlm"):
        open_store(str(path))
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not a database at all, just some text " * 200, "not a database"),
        (None, "not an rlm journal"),
    ],
)
def test_a_foreign_file_is_refused_untouched(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "other.db"
    if content is None:
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE mine (x)")
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    with pytest.raises(JournalError, match=message):
        open_store(str(path))
    assert path.read_bytes() == before


def test_bad_paths_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="does not exist"):
        open_store(str(tmp_path / "missing" / "j.sqlite3"))
    with pytest.raises(JournalError, match="is a directory"):
        open_store(str(tmp_path))
    with pytest.raises(JournalError, match="only postgresql://"):
        open_store("mysql://x/y")


def test_an_unreachable_postgres_is_a_clear_error() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(JournalError, match=r"cannot open journal postgresql://u:\*\*\*@127"):
        open_store("postgresql://u:secret@127.0.0.1:1/nodb?connect_timeout=2")


def _backend(spec: str | Path) -> Backend:
    """A bare connection to journal ``spec`` (SQLite or PostgreSQL): no schema check."""
    if str(spec).startswith("postgresql://"):
        return PostgresBackend(str(spec))
    return SQLiteBackend(spec)


def _in_journal(spec: str | Path, work: Callable[[Tx], _T]) -> _T:
    """``work`` in one transaction on journal ``spec``, outside any store."""
    backend = _backend(spec)
    try:
        with backend.transaction() as tx:
            return work(tx)
    finally:
        backend.close()


def _journal_at(spec: str | Path, version: int) -> None:
    """A journal as rlm wrote it at schema ``version`` (SCHEMA, then the steps)."""
    assert version < SCHEMA_VERSION

    def work(tx: Tx) -> None:
        for statement in SCHEMA:
            tx.run(statement)
        for step in range(2, version + 1):
            for statement in MIGRATIONS[step]:
                tx.run(statement)
        tx.run("INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(version),))

    _in_journal(spec, work)


def _schema_version(spec: str | Path) -> str:
    rows = _in_journal(spec, lambda tx: tx.rows("SELECT value FROM meta"))
    return str(rows[0][0])


def _task_indexes(spec: str | Path) -> set[str]:
    """The names of the indexes on the task table that rlm made (not a primary key's)."""
    sql = (
        "SELECT indexname FROM pg_indexes WHERE tablename = 'tasks' "
        "AND schemaname = current_schema() AND indexname <> 'tasks_pkey'"
        if str(spec).startswith("postgresql://")
        else "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'tasks' "
        "AND sql IS NOT NULL"
    )
    return {str(name) for (name,) in _in_journal(spec, lambda tx: tx.rows(sql))}


def test_a_version_4_workers_row_has_no_start_time_and_its_pid_alone_decides(
    tmp_path: Path,
) -> None:
    """A worker registered before version 5 recorded no start time: after the
    migration its claims are judged by its pid alone, as before."""
    path = tmp_path / "v4.sqlite3"
    _journal_at(path, 4)
    here = local_host()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO volleys (volley_id, created_at, settings) VALUES ('v', 1, '{}')")
        conn.execute(
            "INSERT INTO tasks (volley_id, idx, spec, status, heartbeat_at, claimed_host, "
            "claimed_pid, claimed_worker) VALUES ('v', 1, '{}', 'in_progress', 1, ?, ?, 'old')",
            (here, os.getpid()),
        )
        conn.execute(
            "INSERT INTO workers (worker, volley_id, host, pid, started_at, heartbeat_at) "
            "VALUES ('old', 'v', ?, ?, 1, 1)",
            (here, os.getpid()),
        )
    store = open_store(str(path))
    try:
        assert store.recover_dead_local("v", pid_alive) == []  # this pid runs: kept
        assert store.tasks("v")[0].claimed_by == Owner(here, os.getpid(), "old")
        assert store.tasks("v")[0].claimed_by.started is None  # type: ignore[union-attr]
    finally:
        store.close()
    assert _schema_version(path) == str(SCHEMA_VERSION)


def test_a_version_1_journal_is_migrated_forward(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    _journal_at(path, 1)
    store = open_store(str(path))
    store.create_volley("v1", {}, task_specs(1), context=["c"])
    assert store.context("v1") == ["c"]
    store.close()
    assert _schema_version(path) == str(SCHEMA_VERSION)


def test_a_version_2_journal_keeps_its_tasks_and_indexes_only_open_and_claimed_ones(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v2.sqlite3"
    _journal_at(path, 2)
    with sqlite3.connect(path) as conn:  # a half-run volley, written by version 2
        conn.execute("INSERT INTO volleys (volley_id, created_at, settings) VALUES ('v', 1, '{}')")
        conn.executemany(
            "INSERT INTO tasks (volley_id, idx, spec, status, claimed_host, claimed_pid, "
            "claimed_worker) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                ("v", 1, '{"index": 1}', "done", None, None, None),
                ("v", 2, '{"index": 2}', "in_progress", "h", 9, "gone"),
                ("v", 3, '{"index": 3}', "open", None, None, None),
                ("v", 4, '{"index": 4}', "open", None, None, None),
            ],
        )
    store = open_store(str(path))
    assert _schema_version(path) == str(SCHEMA_VERSION)
    assert _task_indexes(path) == {"open_tasks", "claimed_tasks"}
    assert [t["index"] for t in store.claim_specs("v", A, 5)] == [3, 4]
    assert store.held_elsewhere("v", A) == 1
    assert store.finish("v", [Verdict(3, "done", output="x"), Verdict(4, "failed")]) == 2
    assert [t.status for t in store.tasks("v")] == ["done", "in_progress", "done", "failed"]
    store.close()


def test_a_version_5_journal_is_upgraded_in_place_and_finds_claims_by_holder(
    journal_spec: str, clock: FakeClock
) -> None:
    """Schema version 6 indexes the tasks in progress by volley and holder: a journal
    of version 5 with a volley half run is upgraded when opened, on either back end,
    and its claims are then found by holder as before."""
    _journal_at(journal_spec, 5)
    here = local_host()
    dead = Owner(here, 101, "dead", started=7)
    other = Owner("elsewhere", 5, "other")

    def half_run(tx: Tx) -> None:
        tx.run("INSERT INTO volleys (volley_id, created_at, settings) VALUES ('v', 1, '{}')")
        tx.many(
            "INSERT INTO tasks (volley_id, idx, spec, status, heartbeat_at, claimed_host, "
            "claimed_pid, claimed_worker) VALUES ('v', ?, ?, ?, ?, ?, ?, ?)",
            [
                (1, '{"index": 1}', "done", None, here, 101, "dead"),
                (2, '{"index": 2}', "in_progress", clock.now, here, 101, "dead"),
                (3, '{"index": 3}', "in_progress", clock.now, here, 101, "dead"),
                (4, '{"index": 4}', "in_progress", clock.now, "elsewhere", 5, "other"),
                (5, '{"index": 5}', "open", None, None, None, None),
            ],
        )
        tx.run(
            "INSERT INTO workers (worker, volley_id, host, pid, pid_start, started_at, "
            "heartbeat_at) VALUES ('dead', 'v', ?, 101, 7, ?, ?)",
            (here, clock.now, clock.now),
        )

    _in_journal(journal_spec, half_run)
    assert _schema_version(journal_spec) == "5" and "claimed_tasks" not in _task_indexes(
        journal_spec
    )
    store = open_store(journal_spec, clock=clock)
    try:
        assert _schema_version(journal_spec) == str(SCHEMA_VERSION)
        assert _task_indexes(journal_spec) == {"open_tasks", "claimed_tasks"}
        assert store.heartbeat(dead, "v") == [2, 3]
        assert store.held_elsewhere("v", other) == 2
        assert store.live_workers("v", 60, lambda pid, started: pid != 101) == 1  # at least 1
        held = store.tasks("v")[1].claimed_by  # the dead one's row stays: it holds tasks
        assert held is not None and held == dead and held.started == 7
        found = store.recover_dead_local("v", lambda pid, started: pid != 101)
        assert [(r.index, r.owner) for r in found] == [(2, dead), (3, dead)]
        assert [t.status for t in store.tasks("v")] == [
            "done", "open", "open", "in_progress", "open"
        ]
        clock.now += 120
        assert [r.index for r in store.recover_stale("v", 60)] == [4]
    finally:
        store.close()
    reopened = open_store(journal_spec, clock=clock)  # upgraded once: opens as it is
    reopened.close()
    assert _task_indexes(journal_spec) == {"open_tasks", "claimed_tasks"}


def test_a_version_6_journal_gains_the_batches_table_and_keeps_its_volley(
    journal_spec: str, clock: FakeClock
) -> None:
    """Schema version 7 adds the table of provider batches (``--batch-api``): a journal of
    version 6 with a volley half run is upgraded when opened, on either back end, and the
    volley's open tasks can then go into a batch while its done ones stay done."""
    _journal_at(journal_spec, 6)

    def half_run(tx: Tx) -> None:
        tx.run("INSERT INTO volleys (volley_id, created_at, settings) VALUES ('v', 1, '{}')")
        tx.many(
            "INSERT INTO tasks (volley_id, idx, spec, status, output) VALUES ('v', ?, ?, ?, ?)",
            [(1, '{"index": 1}', "done", "one"), (2, '{"index": 2}', "open", None),
             (3, '{"index": 3}', "open", None)],
        )

    _in_journal(journal_spec, half_run)
    store = open_store(journal_spec, clock=clock)
    try:
        assert _schema_version(journal_spec) == str(SCHEMA_VERSION) == "7"
        assert batches(store, "v") == []
        row = plan_batch(store, "v", "openai", [1, 2, 3], size=10)
        assert row is not None and row.tasks == (2, 3)
        assert [t.status for t in store.tasks("v")] == ["done", "in_progress", "in_progress"]
        assert store.tasks("v")[0].output == "one"
    finally:
        store.close()


def test_every_lookup_of_claims_reads_the_claimed_tasks_index(tmp_path: Path) -> None:
    """SQLite's plan for each statement that looks for tasks in progress (a worker's
    claims, whether a dead one holds any, stale or orphaned claims, claims held by
    others) reads the claimed_tasks index, not every row of the volley."""
    path = tmp_path / "j.sqlite3"
    backend = RecordingSQLite(path)
    clock = FakeClock()
    store = JournalStore(backend, clock=clock)
    try:
        store.create_volley("v1", {}, task_specs(40))
        here = local_host()
        workers = [Owner(here, 100 + i, f"w{i}") for i in range(3)]
        for owner in workers:
            store.register_worker("v1", owner)
            store.claim_indices("v1", owner, 5)
        store.finish("v1", [Verdict(1, "done")])
        backend.calls.clear()

        def alive(pid: int, started: int | None) -> bool:
            return pid != 100

        store.heartbeat(workers[1], "v1")
        store.held_elsewhere("v1", workers[1])
        store.live_workers("v1", 60, alive)
        clock.now += 120
        store.heartbeat(workers[2], "v1")
        store.recover_stale("v1", 60)
        store.recover_dead_local("v1", alive)
        lookups = [
            (sql, params)
            for sql, params in backend.calls
            if "tasks" in sql and "in_progress" in sql and "idx = ?" not in sql
        ]
        assert len(lookups) == 6
        with sqlite3.connect(path) as conn:
            for sql, params in lookups:
                plan = " / ".join(
                    str(row[3]) for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)
                )
                assert "USING INDEX claimed_tasks" in plan, (sql, plan)
    finally:
        store.close()


def test_many_connections_may_open_a_new_journal_at_once(tmp_path: Path) -> None:
    # Several connections switching one new file to WAL at the same moment deadlock
    # inside SQLite, which refuses one of them without waiting ("database is
    # locked"): a worker pool starting together, or a volley and `rlm volley list`.
    failures: list[str] = []
    for round_ in range(20):
        path = str(tmp_path / f"new-{round_}.sqlite3")
        start = threading.Barrier(6)

        def open_a_few(path: str = path, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                for _ in range(4):
                    open_store(path).close()
            except JournalError as exc:
                failures.append(str(exc))

        threads = [threading.Thread(target=open_a_few) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []


def test_a_write_held_up_by_another_process_says_so_then_goes_on(tmp_path: Path) -> None:
    """Another process holds the SQLite write lock: the write says (once) that it waits
    and who is registered, then commits once the lock is let go."""
    path = tmp_path / "j.sqlite3"
    first = open_store(str(path))
    first.create_volley("v1", {}, task_specs(1))
    first.register_worker("v1", A)
    first.close()
    notes: list[str] = []
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")

    def let_go(message: str) -> None:
        notes.append(message)
        holder.execute("ROLLBACK")

    store = JournalStore(SQLiteBackend(path, notice_after_s=0.05, on_wait=let_go))
    try:
        assert store.volley("v1").total == 1  # a read waits on nothing
        assert notes == []
        store.register_worker("v1", B)
        assert len(notes) == 1
        assert "another process holds its write lock" in notes[0]
        assert "pid 11 on host-a (volley v1)" in notes[0]
    finally:
        store.close()
        holder.close()


def test_a_write_lock_held_too_long_fails_saying_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    open_store(str(path)).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    store = JournalStore(SQLiteBackend(path, busy_timeout_s=0.2, notice_after_s=0.05))
    try:
        assert store.volleys() == []
        with pytest.raises(JournalError, match="is locked: another process") as raised:
            store.create_volley("v1", {}, task_specs(1))
        assert "no rlm worker is registered in it" in str(raised.value)
        assert "let it finish (or stop it), then run this again" in str(raised.value)
    finally:
        store.close()
        holder.execute("ROLLBACK")
        holder.close()
