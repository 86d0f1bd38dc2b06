"""A volley's tasks as provider batches: which tasks go into each, and the bytes it sends.

Every request of a batch is the body the live provider would post for the task
(:class:`~rlm.volley.layout.RequestLayout`: the shared prefix first, byte for byte
the same in every request, so a provider that caches inside a batch can), with the
task's id as its ``custom_id`` (``<volley id>-t<index>``).  :class:`BatchPlanner`
takes the open tasks in task order into batches that fit the service (its
request and byte limits, ``--batch-size``) and the budget (each request reserved
at the batch service's prices); a batch's file is written again from the journal
when it is sent, so no batch is ever held in memory whole.  These functions block
(journal reads, encoding): the volley runs them in a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from rlm._traffic.budget import Budget, Ticket
from rlm.errors import BudgetExceeded
from rlm.journal import JournalStore
from rlm.journal.batches import BatchRow, held_specs, open_specs, plan_batch
from rlm.providers.base import CompletionRequest
from rlm.providers.batch import BatchService
from rlm.volley.events import task_call_id
from rlm.volley.layout import RequestLayout
from rlm.volley.records import VolleyTask

__all__ = ["BatchPlanner", "Planned", "custom_id", "task_of", "write_batch"]

_PAGE = 1000  # task rows read from the journal at a time


def custom_id(volley_id: str, index: int) -> str:
    """The ``custom_id`` of task ``index``'s request in a provider batch."""
    return f"{volley_id}-t{index}"


def task_of(volley_id: str, given: str) -> int | None:
    """The task a ``custom_id`` names, or None when it is not one of this volley's."""
    head, sep, index = given.rpartition("-t")
    return int(index) if sep and head == volley_id and index.isdigit() else None


@dataclass
class Planned:
    """What planning did: the batches it recorded, and why it stopped early (a budget)."""

    batches: list[BatchRow] = field(default_factory=list)
    stopped: str | None = None


class BatchPlanner:
    """Cuts a volley's open tasks into provider batches (see the module docstring).

    ``tickets`` holds each planned task's reservation in ``budget``, settled when its
    result comes.
    """

    def __init__(self, store: JournalStore, volley_id: str, service: BatchService,
                 layout: RequestLayout, budget: Budget, *, batch_size: int | None = None,
                 stopped: Callable[[], bool] = lambda: False) -> None:
        self.store, self.volley_id, self.service = store, volley_id, service
        self.layout, self.budget = layout, budget
        self.max_requests = min(batch_size or service.max_requests, service.max_requests)
        self.tickets: dict[int, Ticket] = {}
        self._stopped = stopped

    def request(self, task: VolleyTask) -> CompletionRequest:
        return self.layout.request(task, task_call_id(task.index))

    def item(self, task: VolleyTask) -> bytes:
        """Task ``task``'s request in a batch file."""
        return self.service.item(custom_id(self.volley_id, task.index),
                                 self.service.body(self.request(task)))

    def reserve_sent(self, row: BatchRow) -> None:
        """Reserve the tasks of a batch sent before (a resume): they count, whatever the
        limits say, against what is planned next."""
        for task in _held_tasks(self.store, row):
            self.tickets[task.index] = self.budget.reserve(self.request(task), sent=True)

    def plan(self) -> Planned:
        """Record batches for every open task that fits the budget, in task order."""
        planned = Planned()
        service = self.service
        indices: list[int] = []
        size = len(service.head) + len(service.tail)
        after = 0
        while not self._stopped() and (specs := open_specs(self.store, self.volley_id, after,
                                                           _PAGE)):
            for spec in specs:
                task = VolleyTask.from_dict(spec)
                grown = len(self.item(task)) + (len(service.separator) if indices else 0)
                if indices and (len(indices) >= self.max_requests
                                or size + grown > service.max_bytes):
                    self._record(planned, indices, size)
                    indices, size = [], len(service.head) + len(service.tail)
                    grown -= len(service.separator)
                try:
                    self.tickets[task.index] = self.budget.reserve(self.request(task))
                except BudgetExceeded as exc:
                    planned.stopped = str(exc)
                    self._record(planned, indices, size)
                    return planned
                indices.append(task.index)
                size += grown
            after = int(specs[-1]["index"])
        self._record(planned, indices, size)
        return planned

    def _record(self, planned: Planned, indices: Sequence[int], size: int) -> None:
        if not indices:
            return
        row = plan_batch(self.store, self.volley_id, self.service.name, indices, size)
        if row is None:
            for index in indices:
                self.budget.release(self.tickets.pop(index))
            return
        planned.batches.append(row)
        for index in set(indices) - set(row.tasks):  # taken meanwhile: not this batch's
            self.budget.release(self.tickets.pop(index))


def write_batch(planner: BatchPlanner, row: BatchRow, out: BinaryIO) -> int:
    """Write batch ``row``'s file to ``out`` (its requests, read from the journal); its
    size in bytes."""
    service = planner.service
    size = out.write(service.head)
    first = True
    for task in _held_tasks(planner.store, row):
        if not first:
            size += out.write(service.separator)
        size += out.write(planner.item(task))
        first = False
    size += out.write(service.tail)
    out.flush()
    out.seek(0)
    return size


def _held_tasks(store: JournalStore, row: BatchRow) -> Iterator[VolleyTask]:
    """The tasks batch ``row`` holds, read from the journal a page at a time."""
    after = 0
    while specs := held_specs(store, row.volley_id, row.number, after, _PAGE):
        for spec in specs:
            yield VolleyTask.from_dict(spec)
        after = int(specs[-1]["index"])
