"""A volley read back from its journal: what ``rlm volley show`` prints, and what a
worker reports at its end (the verdicts other workers gave meanwhile included).

The journal keeps each task's verdict, usage and retries, and each claim's holder
and heartbeat; not the peak in flight or the 429s of the runs that gave them
(``VolleyResult.read_back`` says so).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from rlm._config import DEFAULT_STALE_TIMEOUT
from rlm.journal import JournalStore, TaskRow
from rlm.journal.batches import BatchRow, batches
from rlm.journal.records import Alive, local_host
from rlm.journal.volleys import result_from_row
from rlm.journal.worker import pid_alive
from rlm.volley.output import heartbeat_age
from rlm.volley.records import TaskResult, VolleyResult, VolleyStatus, VolleySummary

__all__ = ["live_heartbeat_age", "stored_result", "with_other_workers"]


def stored_result(store: JournalStore, volley_id: str) -> VolleyResult:
    """Volley ``volley_id`` as the journal has it, in the ``--output-format json`` shape."""
    row = store.volley(volley_id)
    rows = store.tasks(volley_id)
    tasks: list[TaskResult] = []
    now = store.now()
    sent = {row.holder: row for row in batches(store, volley_id)}
    for task in rows:
        done = result_from_row(task)
        if done is None:
            waiting = "not started"
            holder = task.claimed_by.worker if task.claimed_by is not None else ""
            if task.status == "in_progress" and holder in sent:
                waiting = f"in progress ({_batch_note(sent[holder])})"
            elif task.status == "in_progress":
                waiting = f"in progress ({_claim_note(task, now)})"
            done = TaskResult(
                index=task.index,
                prompt=str(task.spec.get("prompt", "")),
                status="cancelled",
                error=waiting,
            )
        tasks.append(done)
    status: VolleyStatus
    age: float | None = None
    if row.counts["open"] or row.counts["in_progress"]:
        age = live_heartbeat_age(store, rows)
        if age is not None:
            status = "running"
        elif all(t.status == "open" and not t.attempts for t in rows):
            status = "created"  # not "interrupted": nothing ever ran
        else:
            status = "interrupted"
    else:
        status = "failed" if row.counts["failed"] else "succeeded"
    started = [t.started_at for t in rows if t.started_at is not None]
    finished = [t.finished_at for t in rows if t.finished_at is not None]
    summary = VolleySummary(
        total_tasks=len(tasks),
        succeeded=sum(1 for t in tasks if t.status == "succeeded"),
        failed=sum(1 for t in tasks if t.status == "failed"),
        cancelled=sum(1 for t in tasks if t.status == "cancelled"),
        duration_sec=max(finished) - min(started) if started and finished else 0.0,
        tokens_input=row.spent.input_tokens,
        tokens_output=row.spent.output_tokens,
        tokens_cached=sum(t.tokens_cached for t in tasks),
        total_cost=row.spent.cost,
        max_concurrent_used=0,
        total_retries=sum(t.retries for t in tasks),
        rate_limited=0,
        batch_tasks=sum(1 for t in rows if t.usage.get("batch")),
    )
    return VolleyResult(volley_id=volley_id, status=status, summary=summary, tasks=tuple(tasks),
                        heartbeat_age_sec=None if age is None else round(age, 3),
                        read_back=True, batches=tuple(b.describe() for b in sent.values()))


def _batch_note(row: BatchRow) -> str:
    """Where a task a provider batch holds is."""
    if row.batch_id is None:
        return f"in provider batch {row.number}, not sent yet"
    return f"in provider batch {row.number}, {row.batch_id}: {row.provider_status}"


def _claim_note(task: TaskRow, now: float) -> str:
    """Who holds an in-progress task, and how long ago it last heartbeat."""
    held = f"held by {task.claimed_by}" if task.claimed_by is not None else "no holder"
    if task.heartbeat_at is None:
        return held
    return f"heartbeat {heartbeat_age(max(0.0, now - task.heartbeat_at))} ago, {held}"


def live_heartbeat_age(
    store: JournalStore, rows: Sequence[TaskRow], alive: Alive = pid_alive
) -> float | None:
    """Seconds since the youngest heartbeat of a live worker's claim on the volley; None
    when no live worker (in any process) holds a task of it.  A claim is live when its
    heartbeat is younger than the default stale timeout and its process, when it is on
    this host, still runs (the same process: its start time, when recorded, matches).
    (The workers table cannot say "none": ``live_workers`` counts at least one.)"""
    now = store.now()
    since = now - DEFAULT_STALE_TIMEOUT
    here = local_host()
    youngest: float | None = None
    for task in rows:
        if task.status != "in_progress" or task.heartbeat_at is None:
            continue
        owner = task.claimed_by
        if task.heartbeat_at >= since and not (
            owner is not None and owner.host == here and not alive(owner.pid, owner.started)
        ):
            youngest = task.heartbeat_at if youngest is None else max(youngest, task.heartbeat_at)
    return None if youngest is None else max(0.0, now - youngest)


def with_other_workers(store: JournalStore, result: VolleyResult) -> VolleyResult:
    """``result`` with the verdicts other workers gave meanwhile (a ``work`` process
    running beside a resume): the whole volley, as the journal has it now.

    A task this process did not run and the journal holds a verdict for is shown
    with that verdict instead of "not started"; when that leaves no task
    without a verdict, a volley that was not stopped is succeeded or failed.  A
    result that holds no tasks (the command line's: they are read back when
    printed) gets the journal's counts.
    """
    if not result.tasks:
        return _with_counts(store, result)
    missing = {t.index for t in result.tasks if t.status == "cancelled"}
    if not missing:
        return result
    found = {
        done.index: done
        for done in map(result_from_row, store.tasks(result.volley_id))
        if done is not None and done.index in missing
    }
    if not found:
        return result
    tasks = tuple(found.get(t.index, t) for t in result.tasks)
    status = result.status
    if status in ("succeeded", "failed") and all(t.status != "cancelled" for t in tasks):
        status = "succeeded" if all(t.status == "succeeded" for t in tasks) else "failed"
    summary = dataclasses.replace(
        result.summary,
        succeeded=sum(1 for t in tasks if t.status == "succeeded"),
        failed=sum(1 for t in tasks if t.status == "failed"),
        cancelled=sum(1 for t in tasks if t.status == "cancelled"),
    )
    return dataclasses.replace(result, status=status, summary=summary, tasks=tasks)


def _with_counts(store: JournalStore, result: VolleyResult) -> VolleyResult:
    counts = store.volley(result.volley_id).counts
    succeeded, failed = counts["done"], counts["failed"]
    if (succeeded, failed) == (result.summary.succeeded, result.summary.failed):
        return result
    cancelled = result.summary.total_tasks - succeeded - failed
    status = result.status
    if status in ("succeeded", "failed") and not cancelled:
        status = "failed" if failed else "succeeded"
    summary = dataclasses.replace(
        result.summary, succeeded=succeeded, failed=failed, cancelled=cancelled)
    return dataclasses.replace(result, status=status, summary=summary)
