"""The journal store: volleys, task claims, verdicts and cached responses.

Every method is one transaction and blocks; the async layer
(:mod:`rlm.journal.worker`) runs them in trio worker threads.  A lock
serialises calls on one store, so a store may be shared by the threads of one
process; several processes (or machines, on PostgreSQL) share a journal by
each opening their own store.

Task life cycle::

    open ──claim──► in_progress ──finish──► done | failed
      ▲                 │
      └──release────────┤  (given back without a verdict: Ctrl-C, a budget stop)
      └──recover_stale──┘  (its worker stopped heartbeating: killed, machine lost)

The first verdict on a task wins: a late verdict from a worker whose claim was
recovered is dropped, so a task is ``done`` exactly once.  Times come from the
injected ``clock`` (wall seconds), so claim and recovery logic is tested with a
fake clock; on PostgreSQL they are set to the server's clock (see :meth:`JournalStore.now`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from rlm.errors import JournalError, UnknownVolleyError
from rlm.journal._backends import Backend, Tx
from rlm.journal._schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION, TABLES
from rlm.journal.records import (
    Alive,
    Owner,
    Recovered,
    Spend,
    TaskRow,
    TaskState,
    Verdict,
    VerdictRow,
    VolleyRow,
    local_host,
    pid_alive,
)

__all__ = ["JournalStore"]

from rlm.journal.task_rows import HOLDER_STARTED, TASK_COLUMNS, int_or_none, task_row

_T = TypeVar("_T")
_NOTHING_SPENT = Spend()

_UNCLAIM = (
    "status = 'open', started_at = NULL, heartbeat_at = NULL, "
    "claimed_host = NULL, claimed_pid = NULL, claimed_worker = NULL"
)


class JournalStore:
    """One connection to a journal; see the module docstring for the semantics."""

    def __init__(self, backend: Backend, *, clock: Callable[[], float] = time.time) -> None:
        self.backend = backend
        self.where = backend.where
        self.clock = clock
        self._lock = threading.Lock()
        self._offset = 0.0
        try:
            self._check_schema()
            backend.ready()
            self._offset = self._server_offset()
        except BaseException:
            backend.close()
            raise

    def now(self) -> float:
        """The journal's time: the injected clock, moved onto the database server's.

        Heartbeats are written by one machine and judged by another; on
        PostgreSQL every worker's times are set to the server's clock (the
        offset is measured when the store opens), so two machines whose clocks
        disagree still agree on how old a heartbeat is.  A SQLite journal lives
        on one machine: its clock is the only one (offset 0).
        """
        return self.clock() + self._offset

    def _server_offset(self) -> float:
        sql = self.backend.clock_sql
        if sql is None:
            return 0.0
        before = self.clock()
        rows = self._read(lambda tx: tx.rows(sql))
        after = self.clock()
        return float(rows[0][0]) - (before + after) / 2

    def close(self) -> None:
        with self._lock:
            self.backend.close()

    # -- schema -------------------------------------------------------------

    def _check_schema(self) -> None:
        # A journal already at this version is only read: opening one to read it (volley
        # list, show) takes no write lock, so it never waits on a volley writing to it.
        with self._lock, self.backend.snapshot() as tx:
            tables = {str(name) for (name,) in tx.rows(self.backend.tables_sql)}
            version = _version(tx) if "meta" in tables else 0
        if version == SCHEMA_VERSION:
            return
        with self._lock, self.backend.transaction() as tx:
            if self.backend.lock_clause:
                # Two PostgreSQL workers creating one journal at once must not race.
                tx.rows("SELECT pg_advisory_xact_lock(7236101)")
            tables = {str(name) for (name,) in tx.rows(self.backend.tables_sql)}
            if "meta" not in tables:
                # A SQLite file is ours alone; a PostgreSQL schema may hold other tables.
                foreign = tables - {"sqlite_sequence"} if not self.backend.lock_clause else set()
                if tables & set(TABLES) or foreign:
                    raise JournalError(
                        f"{self.where} is not an rlm journal (it holds other tables); "
                        "give --journal a new path"
                    )
                for statement in SCHEMA:
                    tx.run(statement)
                tx.run("INSERT INTO meta (key, value) VALUES ('schema_version', '1')")
            version = _version(tx)
            if version > SCHEMA_VERSION:
                raise JournalError(
                    f"journal {self.where} was written by a newer rlm (schema version "
                    f"{version}; this rlm reads up to {SCHEMA_VERSION}): upgrade rlm, or "
                    "give --journal another path"
                )
            if version < 1:
                raise JournalError(
                    f"journal {self.where} has no schema version; not an rlm journal"
                )
            for step in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[step]:
                    tx.run(statement)
                tx.run("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(step),))

    def write(self, work: Callable[[Tx], _T]) -> _T:
        """``work`` in one write transaction: for the modules of the journal's other tables
        (:mod:`rlm.journal.batches`), which keep their statements beside their records."""
        return self._tx(work)

    def read(self, work: Callable[[Tx], _T]) -> _T:
        """``work`` in one transaction that only reads (takes no write lock)."""
        return self._read(work)

    def _tx(self, work: Callable[[Tx], _T]) -> _T:
        with self._lock, self.backend.transaction() as tx:
            return work(tx)

    def _read(self, work: Callable[[Tx], _T]) -> _T:
        """``work`` in a transaction that only reads (no write lock: see ``Backend.snapshot``)."""
        with self._lock, self.backend.snapshot() as tx:
            return work(tx)

    # -- volleys ------------------------------------------------------------

    def create_volley(
        self,
        volley_id: str,
        settings: Mapping[str, Any],
        tasks: Iterable[Mapping[str, Any]],
        *,
        context: Sequence[str] = (),
    ) -> None:
        """Record a volley, its shared context and its tasks (JSON-able dicts with an
        ``index``, taken one at a time: a generator is never held whole), all open."""
        if "api_key" in settings:
            raise ValueError("an API key is never stored in the journal")
        now = self.now()

        def work(tx: Tx) -> None:
            if tx.rows("SELECT 1 FROM volleys WHERE volley_id = ?", (volley_id,)):
                raise JournalError(f"volley {volley_id} already exists in {self.where}")
            tx.run(
                "INSERT INTO volleys (volley_id, created_at, settings, context_digest) "
                "VALUES (?, ?, ?, ?)",
                (volley_id, now, json.dumps(dict(settings)), context_digest(context)),
            )
            tx.many(
                "INSERT INTO volley_context (volley_id, position, text) VALUES (?, ?, ?)",
                [(volley_id, i, text) for i, text in enumerate(context)],
            )
            tx.many(
                "INSERT INTO tasks (volley_id, idx, spec, status) VALUES (?, ?, ?, 'open')",
                ((volley_id, int(t["index"]), json.dumps(dict(t))) for t in tasks),
            )

        self._tx(work)

    def resolve(self, ref: str, *, origin: Mapping[str, str] | None = None) -> str:
        """A volley id from ``ref``: an id, or ``last`` for the most recently created
        (with ``origin``, the most recent stored with that origin; see
        :func:`~rlm.journal.volleys.this_origin`)."""
        if ref != "last":
            self.volley(ref)
            return ref

        def newest(tx: Tx) -> str | None:
            found = tx.rows(
                "SELECT volley_id, settings FROM volleys ORDER BY created_at DESC, volley_id DESC"
            )
            for volley_id, settings in found:
                if origin is None or json.loads(settings).get("origin") == dict(origin):
                    return str(volley_id)
            return None

        volley_id = self._read(newest)
        if volley_id is None:
            raise UnknownVolleyError(
                f"journal {self.where} holds no volley yet", ref=ref, journal=self.where
            )
        return volley_id

    def volley(self, volley_id: str) -> VolleyRow:
        rows = self._read(lambda tx: self._volley_rows(tx, volley_id))
        if not rows:
            raise UnknownVolleyError(
                f"no volley {volley_id!r} in journal {self.where} (see `rlm volley list`)",
                ref=volley_id,
                journal=self.where,
            )
        return rows[0]

    def volleys(self) -> list[VolleyRow]:
        """Every volley, newest first."""
        return self._read(lambda tx: self._volley_rows(tx, None))

    def _volley_rows(self, tx: Tx, volley_id: str | None) -> list[VolleyRow]:
        where, params = ("WHERE volley_id = ?", (volley_id,)) if volley_id else ("", ())
        heads = tx.rows(
            "SELECT volley_id, created_at, settings, context_digest, spent_cost, spent_calls, "
            f"spent_input, spent_output FROM volleys {where} "
            "ORDER BY created_at DESC, volley_id DESC",
            params,
        )
        counts: dict[str, dict[TaskState, int]] = {}
        for vid, status, n in tx.rows(
            f"SELECT volley_id, status, COUNT(*) FROM tasks {where} GROUP BY volley_id, status",
            params,
        ):
            counts.setdefault(str(vid), {})[status] = int(n)
        return [
            VolleyRow(
                volley_id=str(vid),
                created_at=float(created),
                settings=json.loads(settings),
                context_digest=digest,
                spent=Spend(float(cost), int(calls), int(tokens_in), int(tokens_out)),
                counts={
                    state: counts.get(str(vid), {}).get(state, 0)
                    for state in ("open", "in_progress", "done", "failed")
                },
            )
            for vid, created, settings, digest, cost, calls, tokens_in, tokens_out in heads
        ]

    def context(self, volley_id: str) -> list[str]:
        """The volley's shared context documents, in order."""
        rows = self._read(
            lambda tx: tx.rows(
                "SELECT text FROM volley_context WHERE volley_id = ? ORDER BY position",
                (volley_id,),
            )
        )
        return [str(text) for (text,) in rows]

    def tasks(self, volley_id: str) -> list[TaskRow]:
        """Every task of a volley, in task order (a holder's process start time included,
        as its worker registered it: ``Owner.started``)."""
        rows = self._read(
            lambda tx: tx.rows(
                f"SELECT {TASK_COLUMNS}, {HOLDER_STARTED} FROM tasks WHERE volley_id = ? "
                "ORDER BY idx",
                (volley_id,),
            )
        )
        return [task_row(volley_id, row) for row in rows]

    def tasks_after(self, volley_id: str, after: int, limit: int) -> list[TaskRow]:
        """Up to ``limit`` tasks of a volley with an index above ``after``, in task order:
        :meth:`tasks` a page at a time, for readers that must not hold them all."""
        rows = self._read(
            lambda tx: tx.rows(
                f"SELECT {TASK_COLUMNS}, {HOLDER_STARTED} FROM tasks "
                "WHERE volley_id = ? AND idx > ? ORDER BY idx LIMIT ?",
                (volley_id, after, limit),
            )
        )
        return [task_row(volley_id, row) for row in rows]

    def spent(self, volley_id: str) -> Spend:
        """What every attempt of the volley has cost so far (for budgets across resumes)."""
        return self.volley(volley_id).spent

    # -- claims -------------------------------------------------------------

    def claim(self, volley_id: str, owner: Owner, limit: int = 1) -> list[TaskRow]:
        """Take up to ``limit`` open tasks, lowest index first, in one transaction.

        Each row is as :meth:`tasks` would read it now, ``claimed_by.started`` included
        (the start time ``owner``'s worker registered; None if it registered none).
        """
        rows = self._claim(volley_id, owner, limit, f"{TASK_COLUMNS}, {HOLDER_STARTED}")
        return sorted((task_row(volley_id, row) for row in rows), key=lambda t: t.index)

    def claim_specs(self, volley_id: str, owner: Owner, limit: int = 1) -> list[dict[str, Any]]:
        """:meth:`claim`, returning only each task's spec (what a worker runs).

        A worker's hot path: no row record is built for a task about to run.
        """
        return self._claim_picked(volley_id, owner, limit, specs=True)[1]

    def claim_indices(self, volley_id: str, owner: Owner, limit: int = 1) -> list[int]:
        """:meth:`claim`, returning only the indices (for a worker that knows the tasks)."""
        return self._claim_picked(volley_id, owner, limit, specs=False)[0]

    def _claim_picked(
        self, volley_id: str, owner: Owner, limit: int, *, specs: bool
    ) -> tuple[list[int], list[dict[str, Any]]]:
        """The claimed indices, in order, and their specs (when ``specs``; else none).

        Two flat lists, no tuple per task: a claim of thousands of tasks would
        otherwise make thousands of short-lived containers, which trigger young
        collections, get promoted, and bring on full collections of the heap.
        """
        if self.backend.cheap_returning:
            rows = self._claim(volley_id, owner, limit, "idx, spec" if specs else "idx")
            rows.sort(key=lambda row: int(row[0]))
            return [int(row[0]) for row in rows], [json.loads(row[1]) for row in rows if specs]
        # SQLite: every row a statement returns is one sqlite3_step, and the store's
        # thread gives the GIL up for each and must win it back from the busy event
        # loop.  So the pick comes back as one row (JSON arrays) and the claim is a
        # second statement over it, in the same write transaction (BEGIN IMMEDIATE
        # holds the file's write lock: nobody claims in between).
        now = self.now()
        columns = "json_group_array(idx), " + ("json_group_array(json(spec))" if specs else "NULL")

        def work(tx: Tx) -> tuple[str, str | None]:
            ((picked, spec_doc),) = tx.rows(
                f"SELECT {columns} FROM (SELECT idx, spec FROM tasks WHERE volley_id = ? "
                "AND status = 'open' ORDER BY idx LIMIT ?)",
                (volley_id, limit),
            )
            tx.run(
                "UPDATE tasks SET status = 'in_progress', started_at = ?, heartbeat_at = ?, "
                "claimed_host = ?, claimed_pid = ?, claimed_worker = ?, attempts = attempts + 1 "
                "WHERE volley_id = ? AND idx IN (SELECT value FROM json_each(?))",
                (now, now, owner.host, owner.pid, owner.worker, volley_id, picked),
            )
            return picked, spec_doc

        picked, spec_doc = self._tx(work)
        indices: list[int] = json.loads(picked)
        return indices, json.loads(spec_doc) if spec_doc is not None else []

    def _claim(
        self, volley_id: str, owner: Owner, limit: int, columns: str
    ) -> list[tuple[Any, ...]]:
        now = self.now()
        # One statement: pick the lowest open tasks (locked, skipping rows another
        # worker is claiming, on PostgreSQL) and mark them ours.
        # MATERIALIZED: PostgreSQL must run the locking pick once, not per row.
        return self._tx(
            lambda tx: tx.rows(
                "WITH picked AS MATERIALIZED (SELECT idx FROM tasks WHERE volley_id = ? "
                f"AND status = 'open' ORDER BY idx LIMIT ?{self.backend.lock_clause}) "
                "UPDATE tasks SET status = 'in_progress', started_at = ?, heartbeat_at = ?, "
                "claimed_host = ?, claimed_pid = ?, claimed_worker = ?, attempts = attempts + 1 "
                "WHERE volley_id = ? AND idx IN (SELECT idx FROM picked) "
                f"RETURNING {columns}",
                (volley_id, limit, now, now, owner.host, owner.pid, owner.worker, volley_id),
            )
        )

    def release(
        self, volley_id: str, owner: Owner, indices: Iterable[int], spend: Spend = _NOTHING_SPENT
    ) -> int:
        """Give claimed tasks back to ``open``; ``spend`` is what their attempts cost."""
        keys = list(indices)
        return self._tx(lambda tx: _release(tx, volley_id, owner, keys, spend))

    def finish(self, volley_id: str, verdicts: Sequence[Verdict]) -> int:
        """Record verdicts in one transaction; how many were written (the first verdict
        on a task wins, a later one is dropped).  Every verdict's spend is counted."""
        spends = [v.spend for v in verdicts]
        total = Spend(
            sum(s.cost for s in spends),
            sum(s.calls for s in spends),
            sum(s.input_tokens for s in spends),
            sum(s.output_tokens for s in spends),
        )
        rows: list[VerdictRow] = [
            (v.index, v.status, v.output, v.usage, v.cost, v.error) for v in verdicts
        ]
        return self.finish_rows(volley_id, rows, total)

    def finish_rows(
        self,
        volley_id: str,
        rows: Sequence[VerdictRow],
        spend: Spend,
        group: tuple[str, int] | None = None,
    ) -> int:
        """:meth:`finish` for verdicts as plain rows, ``spend`` what they cost in all
        (a worker's hot path: no object per verdict).

        ``group`` (the worker's name and the group's number, growing) makes a retry
        idempotent: a group whose commit the worker could not learn of (the
        connection was lost during its commit) is sent again under the same number, and
        its spend is added only if that number is new to the worker's row.
        """
        now = self.now()
        first: dict[int, VerdictRow] = {}
        for row in rows:  # the first verdict on a task wins, within a group too
            first.setdefault(row[0], row)
        # The whole group is one JSON parameter of one statement: one step in C writes
        # every row, so the writing thread takes the GIL back once per group, not per
        # row (each time it does, the event loop's thread stops for it).
        doc = json.dumps(list(first.values()))
        item = self.backend.json_item

        def work(tx: Tx) -> int:
            written = tx.run(
                f"WITH v AS MATERIALIZED (SELECT CAST({item(0)} AS INTEGER) AS idx, "
                f"{item(1)} AS status, {item(2)} AS output, {item(3)} AS usage, "
                f"CAST({item(4)} AS DOUBLE PRECISION) AS cost, {item(5)} AS error "
                f"FROM {self.backend.json_rows}) "
                "UPDATE tasks SET status = v.status, finished_at = ?, heartbeat_at = NULL, "
                "output = v.output, usage = v.usage, cost = v.cost, error = v.error FROM v "
                "WHERE tasks.volley_id = ? AND tasks.idx = v.idx "
                "AND tasks.status IN ('open', 'in_progress')",
                (doc, now, volley_id),
            )
            if group is None or _first_commit(tx, group):
                _add_spend(tx, volley_id, spend)
            return written

        return self._tx(work)

    def heartbeat(self, owner: Owner, volley_id: str) -> list[int]:
        """Refresh ``owner``'s liveness and the heartbeat of every task of the volley it
        holds; the tasks it still holds, in task order.

        A claim that is not among them was reopened meanwhile: its heartbeat had
        stopped for longer than the stale timeout (the worker's process was paused,
        or its machine slept) and another worker's sweep gave the task back to open,
        perhaps to be claimed again.  The claims are found through the
        ``claimed_tasks`` index (see schema version 6).
        """
        now = self.now()

        def work(tx: Tx) -> list[int]:
            tx.run("UPDATE workers SET heartbeat_at = ? WHERE worker = ?", (now, owner.worker))
            rows = tx.rows(
                "UPDATE tasks SET heartbeat_at = ? WHERE volley_id = ? AND "
                "claimed_worker = ? AND status = 'in_progress' RETURNING idx",
                (now, volley_id, owner.worker),
            )
            return sorted(int(idx) for (idx,) in rows)

        return self._tx(work)

    def held_elsewhere(self, volley_id: str, owner: Owner) -> int:
        """Tasks of the volley in progress under other workers' claims."""
        rows = self._read(
            lambda tx: tx.rows(
                "SELECT COUNT(*) FROM tasks WHERE volley_id = ? AND status = 'in_progress' "
                "AND claimed_worker <> ?",
                (volley_id, owner.worker),
            )
        )
        return int(rows[0][0])

    # -- workers ------------------------------------------------------------

    def register_worker(self, volley_id: str, owner: Owner) -> None:
        """Announce a worker on a volley (limits per journal are shared among live ones)."""
        now = self.now()
        self._tx(lambda tx: _register(tx, volley_id, owner, now))

    def retire_worker(self, owner: Owner) -> None:
        self._tx(lambda tx: _retire(tx, owner))

    def join(
        self, volley_id: str, owner: Owner, alive: Alive, timeout_s: float
    ) -> list[Recovered]:
        """A worker's start in one transaction: :meth:`register_worker`, then
        :meth:`recover_dead_local` and :meth:`recover_stale` (what they reopened)."""
        now = self.now()

        def work(tx: Tx) -> list[Recovered]:
            _register(tx, volley_id, owner, now)
            return self._dead_local_in(tx, volley_id, alive, now) + self._stale_in(
                tx, volley_id, timeout_s, now
            )

        return self._tx(work)

    def leave(
        self,
        volley_id: str,
        owner: Owner,
        indices: Iterable[int],
        spend: Spend = _NOTHING_SPENT,
        groups: Sequence[tuple[tuple[str, int], Spend]] = (),
    ) -> int:
        """A worker's end in one transaction: :meth:`release` ``indices``, record
        ``spend``, :meth:`retire_worker`.  How many tasks went back to ``open``.

        ``groups`` are verdict groups whose verdicts could not be written (numbered
        as :meth:`finish_rows` numbers them, in order) with what each cost: each
        one's spend is added unless the journal has it already (a commit whose
        outcome was unknown did happen), so what was paid for is recorded once.
        """
        keys = list(indices)

        def work(tx: Tx) -> int:
            changed = _release(tx, volley_id, owner, keys, spend)
            for group, cost in groups:
                if _first_commit(tx, group):
                    _add_spend(tx, volley_id, cost)
            _retire(tx, owner)
            return changed

        return self._tx(work)

    def live_workers(self, volley_id: str, timeout_s: float, alive: Alive = pid_alive) -> int:
        """Workers on the volley that heartbeat within ``timeout_s`` (at least 1).

        A worker of this host whose process is gone (``kill -9``, or its pid now
        another process's) is not one, so the survivors' share of the per-journal
        limits grows back at once instead of after the stale timeout; its row is
        removed now unless it still holds claims (then it stays, so the process's
        start time is there when they are reopened: see :meth:`recover_dead_local`).
        Another host's worker counts until its heartbeat is stale (its pid means
        nothing here).
        """
        since = self.now() - timeout_s
        here = local_host()

        def work(tx: Tx) -> int:
            rows = tx.rows(
                "SELECT worker, host, pid, pid_start FROM workers "
                "WHERE volley_id = ? AND heartbeat_at >= ?",
                (volley_id, since),
            )
            dead = [
                (w, volley_id, w)
                for w, host, pid, start in rows
                if host == here and not alive(int(pid), int_or_none(start))
            ]
            # Only a dead worker's claims are looked for (this runs every second under
            # SQLite's write lock): live ones touch no task row.  The claimed_tasks index
            # finds a dead one's (schema version 6): without it, this NOT EXISTS read
            # every row of the volley, or (PostgreSQL, by its statistics) of the table.
            if dead:
                tx.many(
                    "DELETE FROM workers WHERE worker = ? AND NOT EXISTS (SELECT 1 FROM tasks "
                    "WHERE volley_id = ? AND status = 'in_progress' AND claimed_worker = ?)",
                    dead,
                )
            return len(rows) - len(dead)

        # Asked only by a registered worker: with its own heartbeat late it is still one live.
        return max(1, self._tx(work))

    # -- recovery -----------------------------------------------------------

    def recover_stale(self, volley_id: str | None, timeout_s: float) -> list[Recovered]:
        """Reopen claims whose heartbeat is older than ``timeout_s``; each is logged."""
        now = self.now()
        return self._tx(lambda tx: self._stale_in(tx, volley_id, timeout_s, now))

    def recover_dead_local(self, volley_id: str, alive: Alive) -> list[Recovered]:
        """Reopen claims held by processes of this host that no longer exist.

        Run when a worker starts, so a ``--resume`` right after a ``kill -9``
        does not wait out the stale timeout for tasks its own machine orphaned.
        A holder's process is judged by its pid and, when its worker registered
        it, its start time (a pid since reused by another process is gone); the
        rows of the workers found gone are removed.
        """
        now = self.now()
        return self._tx(lambda tx: self._dead_local_in(tx, volley_id, alive, now))

    def _stale_in(
        self, tx: Tx, volley_id: str | None, timeout_s: float, now: float
    ) -> list[Recovered]:
        scope, params = ("AND volley_id = ? ", (volley_id,)) if volley_id else ("", ())
        return _reopen(
            tx,
            "SELECT volley_id, idx, claimed_host, claimed_pid, claimed_worker, heartbeat_at "
            f"FROM tasks WHERE status = 'in_progress' AND heartbeat_at < ? "
            f"{scope}{self.backend.lock_clause}",
            (now - timeout_s, *params),
            now,
            keep=lambda owner: False,
            reason=f"no heartbeat for more than {timeout_s:g} s",
        )

    def _dead_local_in(self, tx: Tx, volley_id: str, alive: Alive, now: float) -> list[Recovered]:
        found = _reopen(
            tx,
            "SELECT volley_id, idx, claimed_host, claimed_pid, claimed_worker, heartbeat_at, "
            f"{HOLDER_STARTED} FROM tasks WHERE status = 'in_progress' AND volley_id = ? "
            f"AND claimed_host = ?{self.backend.lock_clause}",
            (volley_id, local_host()),
            now,
            keep=lambda owner: owner is not None and alive(owner.pid, owner.started),
            reason="its worker process on this host is gone",
        )
        gone = sorted({r.owner.worker for r in found if r.owner is not None})
        tx.many("DELETE FROM workers WHERE worker = ?", [(w,) for w in gone])
        return found

    def reopen_failed(self, volley_id: str) -> int:
        """Put failed tasks back to ``open`` (a resume without ``--skip-failed``)."""
        return self._tx(
            lambda tx: tx.run(
                f"UPDATE tasks SET {_UNCLAIM}, finished_at = NULL, output = NULL, error = NULL "
                "WHERE volley_id = ? AND status = 'failed'",
                (volley_id,),
            )
        )

    def log(self, kind: str | None = None) -> list[tuple[float, str, str | None, int | None, str]]:
        """The journal's log lines (``stale_recovery`` ...), oldest first."""
        where, params = ("WHERE kind = ?", (kind,)) if kind else ("", ())
        rows = self._read(
            lambda tx: tx.rows(
                f"SELECT at, kind, volley_id, idx, detail FROM journal_log {where} ORDER BY at",
                params,
            )
        )
        return [
            (float(a), str(k), v, None if i is None else int(i), str(d)) for a, k, v, i, d in rows
        ]

    # -- response cache -----------------------------------------------------

    def cached(self, digest: str) -> str | None:
        """The stored completion (JSON) for a request digest, if any."""
        rows = self._read(
            lambda tx: tx.rows("SELECT completion FROM responses WHERE digest = ?", (digest,))
        )
        return str(rows[0][0]) if rows else None

    def cache(self, entries: Sequence[tuple[str, str, str, str]]) -> None:
        """Store (digest, provider, model, completion JSON) rows; a later one replaces."""
        now = self.now()
        self._tx(
            lambda tx: tx.many(
                "INSERT INTO responses (digest, created_at, provider, model, completion) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (digest) DO UPDATE SET "
                "created_at = excluded.created_at, completion = excluded.completion",
                [(d, now, p, m, c) for d, p, m, c in entries],
            )
        )


def _version(tx: Tx) -> int:
    rows = tx.rows("SELECT value FROM meta WHERE key = 'schema_version'")
    return int(rows[0][0]) if rows else 0


def context_digest(context: Sequence[str]) -> str | None:
    """SHA-256 over the shared context documents (None when there is none)."""
    if not context:
        return None
    digest = hashlib.sha256()
    for text in context:
        data = text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def _register(tx: Tx, volley_id: str, owner: Owner, now: float) -> None:
    tx.run(
        "INSERT INTO workers (worker, volley_id, host, pid, pid_start, started_at, heartbeat_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (owner.worker, volley_id, owner.host, owner.pid, owner.started, now, now),
    )


def _first_commit(tx: Tx, group: tuple[str, int]) -> bool:
    """Record verdict group ``group`` as its worker's last; False when it was already
    (a retry of a group committed before).  A worker with no row (retired, or never
    registered) cannot tell: its spend is added."""
    worker, number = group
    if tx.run(
        "UPDATE workers SET last_group = ? WHERE worker = ? AND last_group < ?",
        (number, worker, number),
    ):
        return True
    return not tx.rows("SELECT 1 FROM workers WHERE worker = ?", (worker,))


def _retire(tx: Tx, owner: Owner) -> None:
    tx.run("DELETE FROM workers WHERE worker = ?", (owner.worker,))


def _release(tx: Tx, volley_id: str, owner: Owner, indices: Sequence[int], spend: Spend) -> int:
    changed = 0
    for idx in indices:
        changed += tx.run(
            f"UPDATE tasks SET {_UNCLAIM} WHERE volley_id = ? AND idx = ? "
            "AND status = 'in_progress' AND claimed_worker = ?",
            (volley_id, idx, owner.worker),
        )
    _add_spend(tx, volley_id, spend)
    return changed


def _reopen(
    tx: Tx,
    select: str,
    params: tuple[Any, ...],
    now: float,
    *,
    keep: Callable[[Owner | None], bool],
    reason: str,
) -> list[Recovered]:
    """Reopen the claims ``select`` finds (unless ``keep``s its owner), in task order;
    each is logged.

    ``select`` has no ORDER BY: ordered by task, SQLite reads the volley's rows through
    its primary key (all of them) instead of the ``claimed_tasks`` index (only those in
    progress); the few rows found are sorted here.
    """
    found = []
    rows = tx.rows(select, params)
    rows.sort(key=lambda row: (str(row[0]), int(row[1])))
    for vid, idx, host, pid, worker, beat, *started in rows:
        owner = (
            Owner(host, int(pid), worker, int_or_none(started[0]) if started else None)
            if worker is not None
            else None
        )
        if keep(owner):
            continue
        changed = tx.run(
            f"UPDATE tasks SET {_UNCLAIM} WHERE volley_id = ? AND idx = ? "
            "AND status = 'in_progress' AND claimed_worker = ?",
            (vid, idx, worker),
        )
        if changed:
            idle = now - float(beat) if beat is not None else 0.0
            found.append(Recovered(str(vid), int(idx), owner, idle, reason))
    tx.many(
        "INSERT INTO journal_log (at, kind, volley_id, idx, detail) "
        "VALUES (?, 'stale_recovery', ?, ?, ?)",
        [(now, r.volley_id, r.index, f"{reason}; was {r.owner}") for r in found],
    )
    return found


def _add_spend(tx: Tx, volley_id: str, spend: Spend) -> None:
    if spend == Spend():
        return
    tx.run(
        "UPDATE volleys SET spent_cost = spent_cost + ?, spent_calls = spent_calls + ?, "
        "spent_input = spent_input + ?, spent_output = spent_output + ?, "
        "spent_tokens = spent_tokens + ? WHERE volley_id = ?",
        (
            spend.cost,
            spend.calls,
            spend.input_tokens,
            spend.output_tokens,
            spend.input_tokens + spend.output_tokens,
            volley_id,
        ),
    )
