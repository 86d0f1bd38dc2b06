"""A volley's provider batches in the journal (``--batch-api``): what was planned, sent,
created, and what came back.

Each provider batch is a row of ``batches`` (schema version 7), written *before*
each step at the provider, so a process stopped anywhere (``kill -9`` included) is
followed by one that knows how far it got::

    planned ──upload──► uploaded ──► creating ──create──► submitted ──► ended ──► collected
       (OpenAI uploads the requests as a file first; Anthropic goes from planned to creating)

- ``planned``: its tasks are taken (below); nothing is known to be at the provider.  A
  process stopped while uploading may have left the file there: the next one looks for
  it by the batch's ``label`` before uploading again.
- ``creating``: the create request may have reached the provider: the next process
  looks for the batch there (by its input file, or by its size and the time) before
  creating it again, so no task is submitted twice.
- ``submitted``: the provider's batch id is recorded; the batch is polled until it ends.
- ``ended``: its results are being read; each is committed with its task, and a task
  that already has its verdict is not written again (nor its spend added again), so
  reading the results again after a stop changes nothing twice.
- ``collected``: every task of the batch has its verdict.

A task a batch holds is ``in_progress`` under the batch's claim: ``claimed_host``
:data:`BATCH_HOST`, ``claimed_worker`` ``batch-<number>``, no heartbeat.  No stale
sweep reopens it (sweeps judge heartbeats and this host's processes), no worker
holds it, and a live worker on the volley waits for it like any claim held
elsewhere.  One process at a time works on a batch volley (:func:`take_volley`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rlm.errors import JournalError
from rlm.journal._backends import Tx
from rlm.journal.records import Alive, Owner, Spend, VerdictRow, local_host, pid_alive
from rlm.journal.store import JournalStore, _add_spend

__all__ = [
    "BATCH_HOST",
    "BatchRow",
    "Stage",
    "advance",
    "batch_holder",
    "batches",
    "fail_unanswered",
    "held_specs",
    "open_specs",
    "plan_batch",
    "record_results",
    "take_volley",
    "task_specs",
]

#: ``claimed_host`` of a task a provider batch holds (no process of any host).
BATCH_HOST = "provider-batch"

Stage = Literal["planned", "uploaded", "creating", "submitted", "ended", "collected"]

_COLUMNS = (
    "number, label, provider, stage, tasks, size, file_id, batch_id, provider_status, counts, "
    "output, error, created_at, creating_at, updated_at"
)
#: The columns :func:`advance` may set, beside the stage.
_FIELDS = frozenset(
    {"file_id", "batch_id", "provider_status", "counts", "output", "error", "creating_at"}
)


def batch_holder(number: int) -> str:
    """``claimed_worker`` of the tasks batch ``number`` holds."""
    return f"batch-{number}"


@dataclass(frozen=True)
class BatchRow:
    """One provider batch of a volley, as the journal holds it.

    ``counts`` are the provider's last counts (``total``, ``succeeded``, ``failed``,
    ``processing``); ``output`` where its results are (file ids, a results URL);
    ``error`` why the whole batch failed, when it did.
    """

    volley_id: str
    number: int
    label: str
    provider: str
    stage: Stage
    tasks: tuple[int, ...]
    size: int
    file_id: str | None = None
    batch_id: str | None = None
    provider_status: str | None = None
    counts: Mapping[str, int] = field(default_factory=dict)
    output: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None
    created_at: float = 0.0
    creating_at: float | None = None
    updated_at: float = 0.0

    @property
    def holder(self) -> str:
        return batch_holder(self.number)

    def describe(self) -> dict[str, Any]:
        """The batch as ``rlm volley show`` and the JSON output give it."""
        return {
            "number": self.number, "batch_id": self.batch_id, "provider": self.provider,
            "stage": self.stage, "status": self.provider_status, "tasks": len(self.tasks),
            "succeeded": int(self.counts.get("succeeded", 0)),
            "failed": int(self.counts.get("failed", 0)), "error": self.error,
        }


def _row(volley_id: str, values: tuple[Any, ...]) -> BatchRow:
    (number, label, provider, stage, tasks, size, file_id, batch_id, status, counts,
     output, error, created, creating, updated) = values
    return BatchRow(
        volley_id=volley_id, number=int(number), label=str(label), provider=str(provider),
        stage=stage, tasks=tuple(json.loads(tasks)), size=int(size), file_id=file_id,
        batch_id=batch_id, provider_status=status, counts=json.loads(counts or "{}"),
        output=json.loads(output or "{}"), error=error, created_at=float(created),
        creating_at=None if creating is None else float(creating), updated_at=float(updated),
    )


def batches(store: JournalStore, volley_id: str) -> list[BatchRow]:
    """The volley's provider batches, in the order they were planned."""
    rows = store.read(lambda tx: tx.rows(
        f"SELECT {_COLUMNS} FROM batches WHERE volley_id = ? ORDER BY number", (volley_id,)
    ))
    return [_row(volley_id, values) for values in rows]


def open_specs(store: JournalStore, volley_id: str, after: int, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` open tasks of the volley above task ``after``, in task order (specs)."""
    rows = store.read(lambda tx: tx.rows(
        "SELECT spec FROM tasks WHERE volley_id = ? AND status = 'open' AND idx > ? "
        "ORDER BY idx LIMIT ?", (volley_id, after, limit),
    ))
    return [json.loads(spec) for (spec,) in rows]


def held_specs(
    store: JournalStore, volley_id: str, number: int, after: int, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` tasks batch ``number`` holds above task ``after``, in task order
    (read through the index of claimed tasks)."""
    rows = store.read(lambda tx: tx.rows(
        "SELECT spec FROM tasks WHERE volley_id = ? AND status = 'in_progress' "
        "AND claimed_worker = ? AND idx > ? ORDER BY idx LIMIT ?",
        (volley_id, batch_holder(number), after, limit),
    ))
    return [json.loads(spec) for (spec,) in rows]


def task_specs(store: JournalStore, volley_id: str, indices: Sequence[int]) -> dict[int, Any]:
    """The specs of the volley's tasks ``indices``, by task."""
    item = store.backend.json_item(0)
    rows = store.read(lambda tx: tx.rows(
        f"SELECT idx, spec FROM tasks WHERE volley_id = ? AND idx IN (SELECT CAST({item} AS "
        f"INTEGER) FROM {store.backend.json_rows})",
        (volley_id, json.dumps([[index] for index in indices])),
    ))
    return {int(idx): json.loads(spec) for idx, spec in rows}


def plan_batch(
    store: JournalStore, volley_id: str, provider: str, indices: Sequence[int], size: int
) -> BatchRow | None:
    """Take the tasks of ``indices`` that are still open into a new batch (one
    transaction: no task is ever in two batches); None when none was open.

    ``size`` is the bytes of their requests, as the batch will send them.
    """
    now = store.now()

    def work(tx: Tx) -> BatchRow | None:
        ((last,),) = tx.rows(
            "SELECT COALESCE(MAX(number), 0) FROM batches WHERE volley_id = ?", (volley_id,)
        )
        number = int(last) + 1
        taken = sorted(int(idx) for (idx,) in tx.rows(
            "UPDATE tasks SET status = 'in_progress', started_at = ?, heartbeat_at = NULL, "
            "claimed_host = ?, claimed_pid = 0, claimed_worker = ?, attempts = attempts + 1 "
            f"WHERE volley_id = ? AND status = 'open' AND idx IN (SELECT "
            f"CAST({store.backend.json_item(0)} AS INTEGER) FROM {store.backend.json_rows}) "
            "RETURNING idx",
            # One JSON parameter (rows of one item: the JSON table both back ends read).
            (now, BATCH_HOST, batch_holder(number), volley_id,
             json.dumps([[index] for index in indices])),
        ))
        if not taken:
            return None
        label = f"rlm-{volley_id}-b{number}"
        tx.run(
            "INSERT INTO batches (volley_id, number, label, provider, stage, tasks, size, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, 'planned', ?, ?, ?, ?)",
            (volley_id, number, label, provider, json.dumps(taken), size, now, now),
        )
        return BatchRow(volley_id, number, label, provider, "planned", tuple(taken), size,
                        created_at=now, updated_at=now)

    return store.write(work)


def advance(store: JournalStore, volley_id: str, number: int, stage: Stage,
            **fields: Any) -> None:
    """Record batch ``number`` at ``stage``, with the ``fields`` given (``file_id``,
    ``batch_id``, ``provider_status``, ``counts``, ``output``, ``error``, ``creating_at``)."""
    unknown = set(fields) - _FIELDS
    if unknown:
        raise ValueError(f"not a batch field: {sorted(unknown)}")
    values = {k: json.dumps(v) if k in ("counts", "output") else v for k, v in fields.items()}
    assignments = "".join(f", {name} = ?" for name in values)
    store.write(lambda tx: tx.run(
        f"UPDATE batches SET stage = ?, updated_at = ?{assignments} "
        "WHERE volley_id = ? AND number = ?",
        (stage, store.now(), *values.values(), volley_id, number),
    ))


def record_results(
    store: JournalStore, volley_id: str, number: int, rows: Sequence[VerdictRow],
    spends: Sequence[Spend],
) -> list[int]:
    """Write the verdicts of tasks batch ``number`` still holds, and add the spend of the
    ones written (one transaction); the tasks written.

    A task that has its verdict already (these results were read before a stop) is not
    written again, and its spend is not added again.
    """
    now = store.now()
    item = store.backend.json_item
    doc = json.dumps(list(rows))
    spend_of = {row[0]: spend for row, spend in zip(rows, spends, strict=True)}

    def work(tx: Tx) -> list[int]:
        written = [int(idx) for (idx,) in tx.rows(
            f"WITH v AS MATERIALIZED (SELECT CAST({item(0)} AS INTEGER) AS idx, "
            f"{item(1)} AS status, {item(2)} AS output, {item(3)} AS usage, "
            f"CAST({item(4)} AS DOUBLE PRECISION) AS cost, {item(5)} AS error "
            f"FROM {store.backend.json_rows}) "
            "UPDATE tasks SET status = v.status, finished_at = ?, output = v.output, "
            "usage = v.usage, cost = v.cost, error = v.error FROM v "
            "WHERE tasks.volley_id = ? AND tasks.idx = v.idx "
            "AND tasks.status = 'in_progress' AND tasks.claimed_worker = ? RETURNING tasks.idx",
            (doc, now, volley_id, batch_holder(number)),
        )]
        _add_spend(tx, volley_id, sum((spend_of[i] for i in written), Spend()))
        return sorted(written)

    return store.write(work)


def fail_unanswered(store: JournalStore, volley_id: str, number: int, error: str) -> list[int]:
    """Fail, with ``error``, every task batch ``number`` still holds (no result came for
    it, or the whole batch failed); the tasks failed."""
    now = store.now()
    rows = store.write(lambda tx: tx.rows(
        "UPDATE tasks SET status = 'failed', finished_at = ?, error = ? WHERE volley_id = ? "
        "AND status = 'in_progress' AND claimed_worker = ? RETURNING idx",
        (now, error, volley_id, batch_holder(number)),
    ))
    return sorted(int(idx) for (idx,) in rows)


def take_volley(store: JournalStore, owner: Owner, volley_id: str, stale_timeout: float,
                alive: Alive = pid_alive) -> None:
    """Register ``owner`` as the one worker of a batch volley, or raise JournalError naming
    the live worker that has it (one transaction: two processes never both take it).

    A worker of this host whose process is gone, or one whose heartbeat is older than
    ``stale_timeout``, does not count (its row is removed).
    """
    now = store.now()
    here = local_host()

    def work(tx: Tx) -> None:
        found = tx.rows(
            "SELECT worker, host, pid, pid_start, heartbeat_at FROM workers "
            "WHERE volley_id = ?", (volley_id,),
        )
        gone = [
            (worker,) for worker, host, pid, started, beat in found
            if float(beat) < now - stale_timeout
            or (host == here and not alive(int(pid), None if started is None else int(started)))
        ]
        tx.many("DELETE FROM workers WHERE worker = ?", gone)
        live = [(host, pid) for worker, host, pid, _, _ in found if (worker,) not in gone]
        if live:
            host, pid = live[0]
            raise JournalError(
                f"volley {volley_id} is being worked on by process {pid} on {host}; a volley "
                "sent as provider batches has one worker at a time: wait for it to end, or "
                "stop it (its batches keep running at the provider)"
            )
        tx.run(
            "INSERT INTO workers (worker, volley_id, host, pid, pid_start, started_at, "
            "heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (owner.worker, volley_id, owner.host, owner.pid, owner.started, now, now),
        )

    store.write(work)
