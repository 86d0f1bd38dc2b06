"""Where a volley's tasks come from and where its results go.

The runner takes tasks from a :class:`TaskSource` and hands every verdict to a
:class:`ResultSink`; it reports (prints, yields, emits ``task_finished``) a
result only once the sink says it is kept, so a sink that makes results
durable (the journal) guarantees that nothing reported can be lost.  Both
protocols are small on purpose: a journal implements them over SQLite or
PostgreSQL, :class:`MemoryStore` over a list.

``keep`` does not block: a journal commits verdicts in groups (one fsync for
many), and the runner goes on with the next task meanwhile instead of holding
a place in its window for a result that only waits to be durable.

Cancellation: the runner calls ``release`` inside a shielded cancel scope, so
an interrupt never tears a write in half.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Protocol

import trio

from rlm.volley.records import TaskResult, VolleyTask

__all__ = ["MemoryStore", "ResultSink", "TaskSource"]


class TaskSource(Protocol):
    """Hands out the tasks still to run, one claim at a time."""

    async def claim(self) -> VolleyTask | None:
        """The next task to run, now claimed by the caller; ``None`` when none is left.

        A claimed task is either closed by ``ResultSink.keep`` or given back
        with ``release``.
        """
        ...

    async def release(self, task: VolleyTask) -> None:
        """Give back a claimed task that got no verdict (interrupted, stopped, not sent)."""
        ...


class ResultSink(Protocol):
    """Takes each task's verdict and says when it is kept (durable, for a journal)."""

    def keep(self, result: TaskResult, kept: Callable[[TaskResult], None]) -> None:
        """Keep ``result`` (a verdict: succeeded or failed); call ``kept(result)`` on
        the trio thread once it is kept: at once, or later (after other tasks ran).

        A sink that cannot keep it raises from whatever runs its writes, never
        calls ``kept``: an unkept result is never reported.
        """
        ...


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

    def keep(self, result: TaskResult, kept: Callable[[TaskResult], None]) -> None:
        self.results[result.index] = result
        kept(result)

    def unclaimed(self) -> list[VolleyTask]:
        """The tasks still open (never claimed, or released), in task order."""
        return [task for _, task in sorted(self._open)]
