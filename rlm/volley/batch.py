"""A volley sent through the provider's batch service (``--batch-api``): about half the
price, answered within a day, and durable at every step in between.

:class:`BatchVolley` works one journaled volley:

1. it takes the volley (one process at a time, :func:`rlm.journal.batches.take_volley`)
   and heartbeats while it works;
2. it cuts the open tasks into batches (:class:`~rlm.volley.batch_files.BatchPlanner`),
   each recorded with its tasks before anything is sent, each request reserved in the
   budget at the batch service's prices (``--max-cost`` applies at those);
3. it sends each batch: the upload (OpenAI), then the create, each step recorded
   before it starts; a step that may have reached the provider (a stop, a timeout) is
   first looked for there, so a resume never submits a task twice;
4. it polls the batches, ``batch_poll`` apart at first and half as long again each
   time up to twelve times that (a ``Retry-After`` wins), emitting ``batch_status``
   each time what the provider says changes;
5. it reads each ended batch's results and commits them, a result reported only once
   committed; a task the provider gave no answer gets its reason (errored, expired,
   cancelled) as a failed task.

:meth:`BatchVolley.interrupt` (Ctrl-C) stops between steps (an upload or create under
way finishes first): batches at the provider keep running, and ``--resume`` or
``rlm volley cancel`` takes them up.  With ``cancel``, nothing new is planned: every
batch at the provider is cancelled, what it answered before is kept, and every task
still without a verdict fails as cancelled.
"""

from __future__ import annotations

import dataclasses
import functools
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, BinaryIO

import trio

from rlm._config import RunConfig, VolleyOptions
from rlm._events import Event, EventBus
from rlm._run.assembly import load_prices, make_budget
from rlm._traffic.budget import Budget
from rlm._traffic.prices import PriceTable
from rlm._traffic.retry import RetryPolicy
from rlm.errors import ProviderError, SettingError
from rlm.journal import JournalStore, Owner, Spend
from rlm.journal._threads import RunSync, thread_run_sync
from rlm.journal._verdicts import flat_verdict, verdict_row
from rlm.journal.batches import (
    BatchRow,
    Stage,
    advance,
    batches,
    fail_unanswered,
    record_results,
    take_volley,
    task_specs,
)
from rlm.journal.volleys import StoredVolley
from rlm.providers.batch import BatchOutcome, BatchService, BatchState
from rlm.volley.batch_files import BatchPlanner, task_of, write_batch
from rlm.volley.events import (
    BatchStatus,
    BatchSubmitted,
    TaskFinished,
    VolleyFinished,
    VolleyStarted,
    task_call_id,
)
from rlm.volley.layout import RequestLayout
from rlm.volley.readback import stored_result
from rlm.volley.records import TaskResult, VolleyResult, VolleyStatus, VolleyTask

__all__ = ["BatchVolley"]

#: Polls in a row that may fail (the network, the provider) before the wait stops.
_POLL_FAILURES = 10
#: The longest wait between two polls, in ``batch_poll``s.
_POLL_CAP = 12


class BatchVolley:
    """Works a journaled volley through a provider's batch service; see the module
    docstring.  ``service`` replaces the one ``config`` names (tests pass a fake);
    ``prices`` the live price table the batch rates come from; ``keep_results=False``
    (the command line, which reads them back from the journal as it prints): the result
    lists no task, only counts."""

    def __init__(
        self,
        store: JournalStore,
        stored: StoredVolley,
        config: RunConfig,
        options: VolleyOptions,
        *,
        service: BatchService | None = None,
        prices: PriceTable | None = None,
        sinks: Sequence[Callable[[Event], None]] = (),
        on_result: Callable[[TaskResult], None] | None = None,
        report_failed: bool = True,
        keep_results: bool = True,
        cancel: bool = False,
        owner: Owner | None = None,
        run_sync: RunSync = thread_run_sync,
    ) -> None:
        self.store, self.stored, self.config, self.options = store, stored, config, options
        self.volley_id = stored.volley_id
        self._service = service
        self._sinks, self._on_result = list(sinks), on_result
        self._report_failed = report_failed  # False: --retry-live reports them after
        self._keep_results = keep_results  # False: the result counts verdicts, lists none
        self._cancel = cancel
        self._owner = owner or Owner.here()
        self._run_sync = run_sync
        self._budget = _batch_budget(config, prices or load_prices(config),
                                     [t.model for t in stored.tasks if t.model])
        self._budget.preload(stored.spent.calls, stored.spent.input_tokens,
                             stored.spent.output_tokens, stored.spent.cost)
        self._layout = RequestLayout(stored.context, model=config.model,
                                     max_tokens=config.max_tokens)
        self._retry = RetryPolicy(max_retries=config.max_retries, base_s=config.retry_delay)
        self._rows: dict[int, BatchRow] = {}
        self._interrupted = False
        self._waiting: trio.CancelScope | None = None
        self._stopped: str | None = None  # why planning stopped early (a budget)
        self._bus: EventBus | None = None
        self._started = 0.0

    # -- control -----------------------------------------------------------------------

    @property
    def ledger(self) -> Budget:
        """The volley's ledger at batch prices (it starts with what the journal has spent)."""
        return self._budget

    def interrupt(self) -> None:
        """Stop between steps; batches at the provider keep running (see the docstring)."""
        self._interrupted = True
        if self._waiting is not None:
            self._waiting.cancel()

    def kill_sandboxes(self) -> None:
        """Nothing to kill: a batch volley runs no sandbox (the drive's second Ctrl-C)."""

    # -- running -----------------------------------------------------------------------

    async def run(self) -> VolleyResult:
        """Work the volley until every batch is collected (or a stop); the whole volley."""
        bus = self._bus = EventBus(keep=False)
        for sink in self._sinks:
            bus.add_sink(sink)
        self._started = trio.current_time()
        bus.emit(VolleyStarted(volley_id=self.volley_id, tasks=len(self.stored.tasks),
                               context_chars=self._layout.context_chars, mode="completion",
                               cache_warm=False))
        await self._run_sync(take_volley, self.store, self._owner, self.volley_id,
                             self.options.stale_timeout)
        failure: Exception | None = None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._heartbeat)
                try:
                    async with self._opened() as service:
                        await self._work(service)
                except Exception as exc:  # raised as itself, not in the nursery's group
                    failure = exc
                nursery.cancel_scope.cancel()
            if failure is not None:
                raise failure
        finally:
            with trio.CancelScope(shield=True):
                await self._run_sync(self.store.retire_worker, self._owner)
        result = await self._result()
        bus.emit(VolleyFinished(volley_id=self.volley_id, status=result.status,
                                error=result.error, summary=result.summary.to_dict()))
        return result

    @asynccontextmanager
    async def _opened(self) -> AsyncIterator[BatchService]:
        if self._service is not None:
            yield self._service
            return
        from rlm.providers.open import open_batch_service

        async with open_batch_service(self.config) as service:
            yield service

    async def _heartbeat(self) -> None:
        while True:
            await trio.sleep(self.options.stale_timeout / 4)
            await self._run_sync(self.store.heartbeat, self._owner, self.volley_id)

    async def _work(self, service: BatchService) -> None:
        planner = BatchPlanner(self.store, self.volley_id, service, self._layout, self._budget,
                               batch_size=self.options.batch_size,
                               stopped=lambda: self._interrupted)
        for row in await self._run_sync(batches, self.store, self.volley_id):
            if row.stage != "collected":
                self._rows[row.number] = row
                await self._run_sync(planner.reserve_sent, row)
        if not self._cancel:
            planned = await self._run_sync(planner.plan)
            self._stopped = planned.stopped
            self._rows.update((row.number, row) for row in planned.batches)
        for number in sorted(self._rows):
            if self._interrupted:
                return
            if self._rows[number].stage in ("planned", "uploaded", "creating"):
                await self._send(service, planner, number)
        sent = [n for n, row in sorted(self._rows.items()) if row.stage in ("submitted", "ended")]
        if self._cancel:
            await self._cancel_sent(service, sent)
        await self._wait(service, planner, sent)
        if self._cancel and not self._interrupted:
            await self._run_sync(self._cancel_open)

    # -- sending -----------------------------------------------------------------------

    async def _send(self, service: BatchService, planner: BatchPlanner, number: int) -> None:
        """Send planned batch ``number``: upload and create it, or find it at the provider
        where a stopped process may have left it.  (With ``cancel``: drop it instead.)"""
        with tempfile.TemporaryFile() as file:
            size = await self._run_sync(write_batch, planner, self._rows[number], file)
            if self._cancel:
                await self._attempts(functools.partial(self._drop, service, planner, number,
                                                       size))
            else:
                await self._attempts(functools.partial(self._submit, service, number, file,
                                                       size))

    async def _submit(self, service: BatchService, number: int, file: BinaryIO,
                      size: int) -> None:
        row = self._rows[number]
        if service.needs_upload and row.stage == "planned":
            file_id = await service.find_upload(row.label, size)
            if file_id is None:
                file.seek(0)
                file_id = await service.upload(row.label, file, size)
            row = await self._advance(number, "uploaded", file_id=file_id)
        state = await self._find_sent(service, row)
        found = state is not None
        if state is None:
            if row.stage != "creating":
                row = await self._advance(number, "creating", creating_at=self.store.now())
            file.seek(0)
            state = await service.create(row.label, row.file_id, file, size)
        await self._advance(number, "submitted", batch_id=state.id,
                            provider_status=state.status, counts=state.counts())
        self._emit(BatchSubmitted(volley_id=self.volley_id, number=number, batch_id=state.id,
                                  provider=service.name, tasks=len(row.tasks), bytes=size,
                                  found=found))
        self._emit(self._status_event(number, state))

    async def _find_sent(self, service: BatchService, row: BatchRow) -> BatchState | None:
        """The provider's batch of ``row`` when its create may have reached the provider
        (the journal says it was under way), else None."""
        if row.stage != "creating":
            return None
        since = row.creating_at if row.creating_at is not None else row.created_at
        return await service.find(row.label, row.file_id, since, len(row.tasks))

    async def _attempts(self, step: Callable[[], Awaitable[None]]) -> None:
        """``step``, tried again after a failure that may pass (the retry settings); each
        try starts from what the journal says was done."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return await step()
            except ProviderError as exc:
                if not self._retry.should_retry(exc, attempt) or self._retry.too_long(exc):
                    raise
                await trio.sleep(self._retry.delay(exc, attempt))

    async def _advance(self, number: int, stage: Stage, **fields: Any) -> BatchRow:
        await self._run_sync(functools.partial(advance, self.store, self.volley_id, number,
                                               stage, **fields))
        row = dataclasses.replace(self._rows[number], stage=stage, **fields)
        self._rows[number] = row
        return row

    # -- waiting -----------------------------------------------------------------------

    async def _wait(self, service: BatchService, planner: BatchPlanner,
                    numbers: list[int]) -> None:
        """Poll the batches ``numbers`` until each has ended and been collected."""
        pending = list(numbers)
        delay = self.options.batch_poll
        failures = 0
        while pending and not self._interrupted:
            pause = delay
            for number in list(pending):
                row = self._rows[number]
                try:
                    state = await self._state(service, row)
                except ProviderError as exc:
                    failures += 1
                    if not exc.retryable or failures >= _POLL_FAILURES:
                        raise
                    pause = max(pause, getattr(exc, "retry_after", None) or 0.0)
                    break
                failures = 0
                if state.ended:
                    await self._collect(service, planner, number, state)
                    pending.remove(number)
                if self._interrupted:
                    return
            if pending:
                with trio.CancelScope() as self._waiting:
                    await trio.sleep(pause)
                self._waiting = None
                delay = min(delay * 1.5, _POLL_CAP * self.options.batch_poll)

    async def _state(self, service: BatchService, row: BatchRow) -> BatchState:
        """The batch as the provider says now (an ended one as the journal recorded it);
        recorded and told when it changed."""
        assert row.batch_id is not None
        if row.stage == "ended":  # its results were being read when a process stopped
            return BatchState(row.batch_id, row.provider_status or "ended", True,
                              len(row.tasks), output=row.output, error=row.error)
        state = await service.get(row.batch_id)
        if (state.status, state.counts()) != (row.provider_status, dict(row.counts)):
            await self._advance(row.number, "submitted", provider_status=state.status,
                                counts=state.counts())
            self._emit(self._status_event(row.number, state))
        return state

    def _status_event(self, number: int, state: BatchState) -> BatchStatus:
        return BatchStatus(volley_id=self.volley_id, number=number, batch_id=state.id,
                           status=state.status, ended=state.ended, total=state.total,
                           succeeded=state.succeeded, failed=state.failed)

    # -- results -----------------------------------------------------------------------

    async def _collect(self, service: BatchService, planner: BatchPlanner, number: int,
                       state: BatchState) -> None:
        """Commit an ended batch's results; its tasks with none fail with the reason."""
        await self._advance(number, "ended", output=dict(state.output), error=state.error,
                            provider_status=state.status, counts=state.counts())
        if state.error is None:
            await service.results(state, functools.partial(self._accept, planner, number,
                                                           state))
            why = f"provider batch {state.id} ({state.status}) gave no result for it"
        else:
            why = f"provider batch {state.id} failed: {state.error}"
        failed = await self._run_sync(fail_unanswered, self.store, self.volley_id, number, why)
        if failed:
            specs = await self._run_sync(task_specs, self.store, self.volley_id, failed)
            for index in failed:
                self._settle(planner, specs[index], None)
                self._report(TaskResult(index, str(specs[index].get("prompt", "")), "failed",
                                        error=why))
        await self._advance(number, "collected")

    async def _accept(self, planner: BatchPlanner, number: int, state: BatchState,
                      outcomes: list[BatchOutcome]) -> None:
        """Commit one chunk of a batch's results, then report the ones written."""
        row = self._rows[number]
        mine = {index: o for o in outcomes
                if (index := task_of(self.volley_id, o.custom_id)) is not None}
        specs = await self._run_sync(task_specs, self.store, self.volley_id, list(mine))
        took = self.store.now() - (row.creating_at or row.created_at)
        results, rows, spends = [], [], []
        for index, outcome in sorted(mine.items()):
            if index not in specs:
                continue
            result, spend = self._verdict(planner, specs[index], outcome, state, took)
            verdict = verdict_row(flat_verdict(result))
            verdict[3]["batch"] = state.id  # type: ignore[index]
            results.append(result)
            rows.append(verdict)
            spends.append(spend)
        written = set(await self._run_sync(record_results, self.store, self.volley_id, number,
                                           rows, spends))
        for result in results:
            if result.index in written:
                self._report(result)

    def _verdict(self, planner: BatchPlanner, spec: dict[str, Any], outcome: BatchOutcome,
                 state: BatchState, took: float) -> tuple[TaskResult, Spend]:
        task = VolleyTask.from_dict(spec)
        completion = outcome.completion
        cost = self._settle(planner, spec, outcome)
        if completion is None:
            error = f"provider batch {state.id}: {outcome.error}"
            return TaskResult(task.index, task.prompt, "failed", took, error=error), Spend(0, 1)
        cached = completion.metadata.get("cached_tokens")
        result = TaskResult(task.index, task.prompt, "succeeded", took,
                            completion.input_tokens, completion.output_tokens,
                            cached if isinstance(cached, int) else 0, cost,
                            output=completion.text)
        return result, Spend(cost or 0.0, 1, completion.input_tokens, completion.output_tokens)

    def _settle(self, planner: BatchPlanner, spec: dict[str, Any],
                outcome: BatchOutcome | None) -> float | None:
        """Replace the task's reservation by what its answer cost at batch prices."""
        task = VolleyTask.from_dict(spec)
        ticket = planner.tickets.pop(task.index, None)
        if ticket is None:
            ticket = self._budget.reserve(planner.request(task), sent=True)
        return self._budget.settle(ticket, None if outcome is None else outcome.completion)

    def _report(self, result: TaskResult) -> None:
        self._emit(TaskFinished(
            call_id=task_call_id(result.index), index=result.index, status=result.status,
            duration_s=round(result.duration_sec, 6), input_tokens=result.tokens_input,
            output_tokens=result.tokens_output, cached_tokens=result.tokens_cached,
            cost=result.cost, retries=0, error=result.error, output=result.output,
        ))
        if self._on_result is not None and (result.status == "succeeded"
                                            or self._report_failed):
            self._on_result(result)

    def _emit(self, event: Event) -> None:
        if self._bus is not None:
            self._bus.emit(event)

    # -- cancelling ----------------------------------------------------------------------

    async def _drop(self, service: BatchService, planner: BatchPlanner, number: int,
                    size: int) -> None:
        """(cancel) A batch not known to be at the provider: if a stopped process created
        it after all, cancel it there; else its tasks fail, never sent."""
        row = self._rows[number]
        state = await self._find_sent(service, row)
        if state is not None:
            await self._advance(number, "submitted", batch_id=state.id,
                                provider_status=state.status, counts=state.counts())
            return
        why = "cancelled (rlm volley cancel) before it was sent to the provider"
        failed = await self._run_sync(fail_unanswered, self.store, self.volley_id, number, why)
        for index in failed:
            self._budget.release(planner.tickets.pop(index))
        await self._advance(number, "collected")

    async def _cancel_sent(self, service: BatchService, numbers: Sequence[int]) -> None:
        for number in numbers:
            row = self._rows[number]
            if row.stage == "submitted" and row.batch_id is not None:
                state = await service.cancel(row.batch_id)
                await self._advance(number, "submitted", provider_status=state.status,
                                    counts=state.counts())
                self._emit(self._status_event(number, state))

    def _cancel_open(self) -> None:
        """(cancel) Fail every task still open: none will be sent."""
        self.store.write(lambda tx: tx.run(
            "UPDATE tasks SET status = 'failed', finished_at = ?, error = ? "
            "WHERE volley_id = ? AND status = 'open'",
            (self.store.now(), "cancelled (rlm volley cancel) before it was sent",
             self.volley_id),
        ))

    # -- the result ----------------------------------------------------------------------

    async def _result(self) -> VolleyResult:
        result = await self._run_sync(stored_result, self.store, self.volley_id)
        left = any(t.status == "cancelled" for t in result.tasks)
        status: VolleyStatus = result.status
        error: str | None = None
        if self._interrupted and left:
            status = "interrupted"
            at_provider = sum(1 for b in result.batches if b["stage"] != "collected"
                              and b["batch_id"])
            if at_provider:
                error = (f"interrupted: {at_provider} provider batch(es) keep running at the "
                         f"provider; `rlm volley --resume {self.volley_id}` collects them, "
                         f"`rlm volley cancel {self.volley_id}` cancels them")
        elif self._stopped is not None:
            status, error = "budget_exceeded", self._stopped
        elif left:
            status = "interrupted"
        summary = dataclasses.replace(result.summary,
                                      duration_sec=trio.current_time() - self._started)
        return dataclasses.replace(result, status=status, error=error, summary=summary,
                                   heartbeat_age_sec=None,
                                   tasks=result.tasks if self._keep_results else ())


def _batch_budget(config: RunConfig, prices: PriceTable, models: list[str]) -> Budget:
    """The ledger at the batch service's prices; a model with none under ``max_cost`` is
    refused, as a model with no price is."""
    try:
        return make_budget(config, prices.batch(), models=models)
    except SettingError as exc:
        raise SettingError(
            f"{exc.template}; at the batch service's prices, which are its batch_input and "
            "batch_output in the table"
        ) from exc
