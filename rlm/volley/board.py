"""A volley's board: who holds what, who did what, and how much of the pool was busy.

What ``rlm volley show --board`` prints and ``rlm volley watch`` redraws, read from the
journal in two reads that take no write lock (the tasks in progress, and one tally per
holder), so any process may open it while workers run, as often as it likes.

- **Holdings**: each task in progress with its holder (host, pid, worker), when it was
  claimed, how long it has been in progress and how old its heartbeat is; a heartbeat
  past three quarters of the stale timeout is *near stale* (its task is reopened for
  another worker at the timeout), past the timeout *stale*.
- **Workers**: per holder, its tasks done, failed and in progress, its verdicts' tokens
  and cost, their requests' time at the provider (*busy*: the permits they held, in
  seconds), and its *share* of the pool's busy time.
- **Parallelism**: the pool's busy time over the time from the first claim to the last
  verdict (or now, while it runs): requests at the provider at once, on average.
  **Efficiency** is that over ``max_concurrent``: 1.0 is every slot busy all along.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlm._config import DEFAULT_STALE_TIMEOUT
from rlm.journal import HolderTally, JournalStore, Owner, TaskRow, board_reads

__all__ = ["NEAR_STALE", "Board", "Holding", "WorkerLine", "read_board"]

#: The share of the stale timeout past which a heartbeat is shown as near stale.
NEAR_STALE = 0.75


@dataclass(frozen=True)
class Holding:
    """A task in progress, and who holds it."""

    index: int
    prompt: str
    holder: Owner | None
    claimed_at: float | None
    in_progress_s: float | None
    heartbeat_age_s: float | None
    stale_timeout: float

    @property
    def state(self) -> str:
        """``ok``, ``near stale`` or ``stale``, by the heartbeat's age."""
        age = self.heartbeat_age_s
        if age is None or age < NEAR_STALE * self.stale_timeout:
            return "ok"
        return "stale" if age >= self.stale_timeout else "near stale"

    def to_dict(self) -> dict[str, Any]:
        holder = self.holder
        return {
            "task": self.index,
            "prompt": self.prompt,
            "host": None if holder is None else holder.host,
            "pid": None if holder is None else holder.pid,
            "worker": None if holder is None else holder.worker,
            "claimed_at": self.claimed_at,
            "in_progress_s": _round(self.in_progress_s),
            "heartbeat_age_s": _round(self.heartbeat_age_s),
            "state": self.state,
        }


@dataclass(frozen=True)
class WorkerLine:
    """One holder's part of the volley."""

    tally: HolderTally
    share: float | None

    def to_dict(self) -> dict[str, Any]:
        t = self.tally
        return {
            "host": t.holder.host,
            "pid": t.holder.pid,
            "worker": t.holder.worker,
            "done": t.done,
            "failed": t.failed,
            "in_progress": t.in_progress,
            "tokens": t.tokens,
            "cost": round(t.cost, 8),
            "busy_s": _round(t.busy_s),
            "share": _round(self.share),
        }


@dataclass(frozen=True)
class Board:
    """A volley's board at one moment (``now``, the journal's clock)."""

    volley_id: str
    total: int
    done: int
    failed: int
    open: int
    in_progress: int
    cost: float
    holdings: tuple[Holding, ...]
    workers: tuple[WorkerLine, ...]
    busy_s: float
    span_s: float
    max_concurrent: int | None
    stale_timeout: float

    @property
    def finished(self) -> bool:
        return not (self.open or self.in_progress)

    @property
    def parallelism(self) -> float | None:
        """Requests at the provider at once, on average, between the first claim and the
        last verdict (None before any verdict)."""
        return self.busy_s / self.span_s if self.span_s > 0 else None

    @property
    def efficiency(self) -> float | None:
        """:attr:`parallelism` over ``max_concurrent`` (None when either is unknown)."""
        if self.parallelism is None or not self.max_concurrent:
            return None
        return self.parallelism / self.max_concurrent

    def to_dict(self) -> dict[str, Any]:
        return {
            "volley_id": self.volley_id,
            "tasks": self.total,
            "done": self.done,
            "failed": self.failed,
            "open": self.open,
            "in_progress": self.in_progress,
            "cost": round(self.cost, 8),
            "max_concurrent": self.max_concurrent,
            "stale_timeout_s": self.stale_timeout,
            "busy_s": _round(self.busy_s),
            "span_s": _round(self.span_s),
            "parallelism": _round(self.parallelism),
            "efficiency": _round(self.efficiency),
            "holdings": [h.to_dict() for h in self.holdings],
            "workers": [w.to_dict() for w in self.workers],
        }


def read_board(store: JournalStore, volley_id: str) -> Board:
    """Volley ``volley_id``'s board as the journal has it now."""
    row = store.volley(volley_id)
    claimed = board_reads.claimed(store, volley_id)
    tallies = board_reads.holder_tallies(store, volley_id)
    now = store.now()
    options, config = row.settings.get("options") or {}, row.settings.get("config") or {}
    stale_timeout = float(options.get("stale_timeout") or DEFAULT_STALE_TIMEOUT)
    busy = sum(t.busy_s for t in tallies)
    firsts = [t.first_claim for t in tallies if t.first_claim is not None]
    lasts = [t.last_verdict for t in tallies if t.last_verdict is not None]
    end = now if row.counts["in_progress"] else max(lasts, default=None)
    span = end - min(firsts) if firsts and end is not None else 0.0
    cap = config.get("max_concurrent")
    ordered = sorted(tallies, key=lambda t: (t.holder.host, t.holder.pid, t.holder.worker))
    return Board(
        volley_id=volley_id,
        total=row.total,
        done=row.counts["done"],
        failed=row.counts["failed"],
        open=row.counts["open"],
        in_progress=row.counts["in_progress"],
        cost=row.spent.cost,
        holdings=tuple(_holding(task, now, stale_timeout) for task in claimed),
        workers=tuple(WorkerLine(t, t.busy_s / busy if busy > 0 else None) for t in ordered),
        busy_s=busy,
        span_s=max(0.0, span),
        max_concurrent=cap if isinstance(cap, int) and cap > 0 else None,
        stale_timeout=stale_timeout,
    )


def _holding(task: TaskRow, now: float, stale_timeout: float) -> Holding:
    return Holding(
        index=task.index,
        prompt=str(task.spec.get("prompt", "")),
        holder=task.claimed_by,
        claimed_at=task.started_at,
        in_progress_s=None if task.started_at is None else max(0.0, now - task.started_at),
        heartbeat_age_s=None if task.heartbeat_at is None else max(0.0, now - task.heartbeat_at),
        stale_timeout=stale_timeout,
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
