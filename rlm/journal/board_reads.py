"""What a pool's board reads of a volley (``rlm volley show --board``, ``watch``):
its tasks in progress with their holders, and a tally per holder.  Read-only, through
the store's read transactions; the claims index keeps both cheap.
"""

from __future__ import annotations

from rlm.journal.records import HolderTally, Owner, TaskRow
from rlm.journal.store import JournalStore
from rlm.journal.task_rows import HOLDER_STARTED, TASK_COLUMNS, task_row

__all__ = ["claimed", "holder_tallies"]


def claimed(store: JournalStore, volley_id: str) -> list[TaskRow]:
    """The volley's tasks in progress, in task order, each with its holder (read
    through the claims index, not the volley's every row)."""
    rows = store.read(
        lambda tx: tx.rows(
            f"SELECT {TASK_COLUMNS}, {HOLDER_STARTED} FROM tasks WHERE volley_id = ? "
            "AND status = 'in_progress' ORDER BY idx",
            (volley_id,),
        )
    )
    return [task_row(volley_id, row) for row in rows]


def holder_tallies(store: JournalStore, volley_id: str) -> list[HolderTally]:
    """Per holder (host, pid, worker) of any of the volley's tasks: its tasks done,
    failed and in progress, the tokens and cost of its verdicts, their time at the
    provider in all, its first claim and its last verdict."""
    number = store.backend.json_number
    tokens = (f"COALESCE({number('usage', 'tokens_input')}, 0) + "
              f"COALESCE({number('usage', 'tokens_output')}, 0)")
    rows = store.read(
        lambda tx: tx.rows(
            "SELECT claimed_host, claimed_pid, claimed_worker, "
            "SUM(CASE WHEN status = 'done' THEN 1 ELSE 0 END), "
            "SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END), "
            "SUM(CASE WHEN status = 'in_progress' THEN 1 ELSE 0 END), "
            f"SUM({tokens}), SUM(COALESCE(cost, 0)), "
            # Older verdicts have no time at the provider: their time in a worker.
            f"SUM(COALESCE({number('usage', 'request_sec')}, "
            f"{number('usage', 'duration_sec')}, 0)), "
            "MIN(started_at), MAX(finished_at) "
            "FROM tasks WHERE volley_id = ? AND claimed_worker IS NOT NULL "
            "GROUP BY claimed_host, claimed_pid, claimed_worker",
            (volley_id,),
        )
    )
    return [
        HolderTally(Owner(str(host), int(pid), str(worker)), int(done), int(failed),
                    int(held), int(tokens_sum or 0), float(cost or 0.0), float(busy or 0.0),
                    first, last)
        for host, pid, worker, done, failed, held, tokens_sum, cost, busy, first, last in rows
    ]
