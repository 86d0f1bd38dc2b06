"""Where a volley's tasks come from and where its results go.

The runner takes tasks from a :class:`TaskSource` and hands every verdict to a
:class:`ResultSink`; it reports (prints, yields, emits ``task_finished``) a
result only after ``accept`` has returned, so a sink that makes results durable
(the journal) guarantees that nothing reported can be lost.  Both protocols
are small on purpose: a journal implements them over SQLite or PostgreSQL,
:class:`MemoryStore` over a list.

Cancellation: the runner calls ``release`` and ``accept`` inside a shielded
cancel scope, so an interrupt never tears a write in half.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Protocol

import trio

from rlm.volley.records import TaskResult, VolleyTask

__all__ = ["MemoryStore", "ResultSink", "TaskSource"]


class TaskSource(Protocol):
    """Hands out the tasks still to run, one claim at a time."""

    async def claim(self) -> VolleyTask | None:
        """The next task to run, now claimed by the caller; ``None`` when none is left.

        A claimed task is either closed by ``ResultSink.accept`` or given back
        with ``release``.
        """
        ...

    async def release(self, task: VolleyTask) -> None:
        """Give back a claimed task that got no verdict (interrupted, stopped, not sent)."""
        ...


class ResultSink(Protocol):
    """Takes each task's verdict; returns only when it is kept (durable, for a journal)."""

    async def accept(self, result: TaskResult) -> None: ...


class MemoryStore:
    """Both protocols over a list in memory: claims in task order, results by index."""

    def __init__(self, tasks: Iterable[VolleyTask]) -> None:
        self._open: list[tuple[int, VolleyTask]] = [(t.index, t) for t in tasks]
        heapq.heapify(self._open)
        self.results: dict[int, TaskResult] = {}

    async def claim(self) -> VolleyTask | None:
        await trio.lowlevel.checkpoint()
        return heapq.heappop(self._open)[1] if self._open else None

    async def release(self, task: VolleyTask) -> None:
        heapq.heappush(self._open, (task.index, task))
        await trio.lowlevel.checkpoint()

    async def accept(self, result: TaskResult) -> None:
        self.results[result.index] = result
        await trio.lowlevel.checkpoint()

    def unclaimed(self) -> list[VolleyTask]:
        """The tasks still open (never claimed, or released), in task order."""
        return [task for _, task in sorted(self._open)]
