"""A task's row as the journal's tables hold it, and the record it is read into: the
columns every task query selects, and the decoding of one row (shared by the store and
the board's reads)."""

from __future__ import annotations

import json
from typing import Any

from rlm.journal.records import Owner, TaskRow

__all__ = ["HOLDER_STARTED", "TASK_COLUMNS", "int_or_none", "task_row"]

TASK_COLUMNS = (
    "idx, spec, status, started_at, finished_at, heartbeat_at, claimed_host, claimed_pid, "
    "claimed_worker, attempts, output, usage, cost, error"
)
#: The start time of a claim's holder's process, as its worker registered it (NULL:
#: unknown, or the worker's row is gone).
HOLDER_STARTED = (
    "(SELECT pid_start FROM workers WHERE workers.worker = tasks.claimed_worker)"
)

def int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def task_row(volley_id: str, row: tuple[Any, ...]) -> TaskRow:
    (idx, spec, status, started, finished, beat, host, pid, worker, attempts) = row[:10]
    output, usage, cost, error = row[10:14]
    holder_started = int_or_none(row[14]) if len(row) > 14 else None
    return TaskRow(
        volley_id=volley_id,
        index=int(idx),
        spec=json.loads(spec),
        status=status,
        started_at=started,
        finished_at=finished,
        heartbeat_at=beat,
        claimed_by=Owner(host, int(pid), worker, holder_started) if worker is not None else None,
        attempts=int(attempts),
        output=output,
        usage=json.loads(usage) if usage else {},
        cost=cost,
        error=error,
    )
