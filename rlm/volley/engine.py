"""One volley, assembled: providers → the gate → the runner → a VolleyResult.

:class:`Volley` builds the run's one gate from the configuration (permits,
pacer, retry policy, adaptive capacity, budget ledger) exactly as ``rlm run``
does, and runs every task through it.  Tasks come from a
:class:`~rlm.volley.store.TaskSource` and verdicts go to a
:class:`~rlm.volley.store.ResultSink` (a :class:`MemoryStore` unless a journal
is given).  ``earlier`` results (a resumed volley's finished tasks) are part
of the result but are not run again.  ``before_send`` is asked by the gate
right before each request goes out (a journal worker refuses the requests of
tasks whose claims it lost: :meth:`rlm.journal.worker.JournalWorker.before_send`).

What a volley holds is bounded by what is in flight, not by its number of
tasks, when its tasks (and ``earlier``) are collections made again on each
pass (a :class:`~rlm.volley.tasks.TaskStream`, a journal's
:class:`~rlm.journal.volleys.StoredRows`), a source and sink keep them (a
journal) and ``keep_results=False``: its result then counts verdicts without
holding them (``tasks`` is empty; a journal's reader gives them in task
order).  The Python API keeps every result: it returns them.

A task may carry its own documents, mode, run settings and group cap
(:class:`~rlm.volley.records.VolleyTask`): an eval's volley mixes completion and
rlm tasks, each over its item's documents.  With ``cache_path`` set, the response
cache answers requests it has seen, before the gate sends them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from rlm._config import RunConfig, VolleyOptions, check_sub_endpoint, public_settings
from rlm._events import Event, EventBus, StreamSink
from rlm._run.assembly import (
    build_gate,
    default_launcher,
    load_prices,
    make_budget,
    open_cache,
    open_telemetry,
)
from rlm._run.context import Context
from rlm._run.runtime import Runtime
from rlm._run.tools import ToolBox
from rlm._sandbox.interface import Launcher, LauncherFactory
from rlm._trace import TraceWriter
from rlm._traffic.budget import Budget
from rlm._traffic.gate import CompletionCache, Gate, SendCheck
from rlm._traffic.prices import PriceTable
from rlm.errors import RLMError
from rlm.providers.base import Lane, Provider
from rlm.providers.open import open_providers
from rlm.volley.events import VolleyFinished, VolleyStarted
from rlm.volley.layout import RequestLayout, fit_window
from rlm.volley.records import (
    TaskResult,
    VolleyResult,
    VolleyStatus,
    VolleySummary,
    VolleyTask,
    new_volley_id,
)
from rlm.volley.rlm_tasks import RlmTaskExecutor, shared_context
from rlm.volley.runner import TaskExecutor, VolleyRunner
from rlm.volley.store import MemoryStore, ResultSink, TaskSource
from rlm.volley.tally import TaskTally

__all__ = ["Volley", "VolleyOptions", "VolleyProgress", "VolleyRun"]


class VolleyRun(Protocol):
    """A volley that can be driven: run it, stop it, kill its sandboxes (a
    :class:`Volley`, or one sent through a batch service: ``rlm.volley.batch``)."""

    async def run(self) -> VolleyResult: ...

    def interrupt(self) -> None: ...

    def kill_sandboxes(self) -> None: ...

@dataclass(frozen=True)
class VolleyProgress:
    """A snapshot for progress displays."""

    total: int
    succeeded: int
    failed: int
    running: int
    concurrency: int
    retries: int
    rate_limited: int
    tokens: int
    cost: float
    elapsed: float


class Volley:
    """Runs ``tasks`` (over an optional shared ``context``) under ``config``'s gate."""

    def __init__(
        self,
        config: RunConfig,
        tasks: Collection[VolleyTask],
        *,
        context: Sequence[str] = (),
        options: VolleyOptions | None = None,
        volley_id: str | None = None,
        providers: Mapping[Lane, Provider] | None = None,
        prices: PriceTable | None = None,
        sinks: Sequence[Callable[[Event], None]] = (),
        trace_path: str | None = None,
        source: TaskSource | None = None,
        sink: ResultSink | None = None,
        earlier: Collection[TaskResult] = (),
        on_result: Callable[[TaskResult], None] | None = None,
        stream: StreamSink | None = None,
        sandboxes: LauncherFactory | None = None,
        tools: ToolBox | None = None,
        before_send: SendCheck | None = None,
        keep_results: bool = True,
    ) -> None:
        self.config = config
        self._before_send = before_send
        self._sandboxes = sandboxes  # rlm tasks: makes the volley's one launcher
        self._tools = tools  # rlm tasks: host tools their code may call
        self._launcher: Launcher | None = None
        self._stream = stream  # a live consumer: every task streams its text into it
        # A list is copied; a collection made on each pass (a TaskStream, a journal's rows)
        # is kept as it is, never read whole.
        self.tasks = tuple(tasks) if isinstance(tasks, list | tuple) else tasks
        self.total = len(self.tasks)
        self.context = tuple(context)
        self.options = options or VolleyOptions()
        check_sub_endpoint(config, self.options)
        self.volley_id = volley_id or new_volley_id()
        self._providers = providers
        self._prices = prices if prices is not None else load_prices(config)
        # A task's own model without a price under max_cost is refused, as the run's is.
        # (Read only when max_cost needs them: a TaskStream's tasks are made again to read.)
        models = [] if config.max_cost is None else _task_models(self.tasks)
        self._budget = make_budget(config, self._prices, models=models)
        self._sinks = list(sinks)
        self._trace_path = trace_path
        # Every verdict, for a result that lists them (keep_results); else only counted.
        self._results: dict[int, TaskResult] | None = (
            {r.index: r for r in earlier} if keep_results else None)
        self._verdicts = {"succeeded": 0, "failed": 0}
        for done in earlier:
            if done.status in self._verdicts:
                self._verdicts[done.status] += 1
        self._earlier = len(earlier)  # finished before this process (a resume)
        if source is None or sink is None:
            finished = {r.index for r in earlier}
            store = MemoryStore(t for t in self.tasks if t.index not in finished)
            source, sink = source or store, sink or store
        self._source: TaskSource = source
        self._sink: ResultSink = sink
        self._on_result = on_result
        # The shared context's prompt is laid out when a task first reads it: a volley whose
        # tasks each name their own documents (an eval's) never copies them all into one.
        self._shared: RequestLayout | None = None
        self._rlm: RlmTaskExecutor | None = None  # rlm tasks (a volley of mode rlm)
        self._contexts: dict[tuple[int, ...] | None, Context] = {}  # one object per context
        self._groups = _Groups(self.tasks, earlier)
        self._tally = TaskTally()
        self._runner: VolleyRunner | None = None
        self._gate: Gate | None = None
        self._started = 0.0
        self._interrupted = False
        self._bus: EventBus | None = None
        self._early: list[Event] = []  # recorded before the run's bus existed
        self._workers = 1  # live workers sharing the per-journal limits (share_limits)

    # -- control -----------------------------------------------------------------

    def interrupt(self) -> None:
        """Stop launching, cancel in-flight tasks; ``run`` returns an ``interrupted`` result."""
        self._interrupted = True
        if self._runner is not None:
            self._runner.interrupt()

    def kill_sandboxes(self) -> None:
        """Kill every sandbox of the ``rlm`` tasks now, synchronously (a second Ctrl-C)."""
        if self._launcher is not None:
            self._launcher.kill_all()

    @property
    def ledger(self) -> Budget:
        """The volley's budget ledger (a journal preloads what earlier attempts spent)."""
        return self._budget

    def record(self, event: Event) -> None:
        """Emit an event that happened outside the runner (the journal's ``stale_recovery``).

        Events recorded before the run starts are emitted right after ``volley_started``.
        """
        if self._bus is None:
            self._early.append(event)
        else:
            self._bus.emit(event)

    def share_limits(self, workers: int) -> None:
        """Give this process its share of per-journal limits, ``workers`` being live.

        ``--max-concurrent``, ``--rpm`` and ``--tpm`` are the provider's limits for
        everyone working on the volley: each live worker takes an equal part.  Told
        before the run starts, the share applies from its first request.  The share
        is a ceiling: the gate's adaptive control still owns the numbers in use, so
        a cut made because the provider pushed back stays cut.
        """
        if workers < 1:
            return
        self._workers = workers
        if self._gate is not None:
            self._gate.adaptive.share(self._share(), workers)
            self._gate.rate.share(workers)

    @property
    def concurrency(self) -> int:
        """Requests this process may send at once: its share of ``max_concurrent`` (a
        journal worker claims by it).  Not the window adaptive control has cut it to:
        a worker whose requests were all refused still holds fresh tasks to send
        when one gets through, so it keeps the slot it won."""
        return self._share()

    def _share(self) -> int:
        """This process's part of ``max_concurrent``, ``workers`` being live."""
        return max(1, self.config.max_concurrent // self._workers)

    @property
    def cut_short(self) -> frozenset[int]:
        """Tasks cancelled after they had sent something (interrupted, stopped)."""
        return frozenset(self._runner.cut_short) if self._runner else frozenset()

    def running_title(self, index: int) -> str | None:
        """The title of task ``index`` while it runs (None once it has ended)."""
        return self._runner.running_title(index) if self._runner else None

    def progress(self) -> VolleyProgress:
        runner, gate = self._runner, self._gate
        spent = self._budget.spent
        return VolleyProgress(
            total=self.total,
            succeeded=self._verdicts["succeeded"],
            failed=self._verdicts["failed"],
            running=runner.in_flight if runner else 0,
            concurrency=gate.limiter.sub_limit if gate else self.config.max_concurrent,
            retries=self._tally.retries,
            rate_limited=self._tally.rate_limited,
            tokens=spent.input_tokens + spent.output_tokens,
            cost=spent.cost,
            elapsed=trio.current_time() - self._started if self._started else 0.0,
        )

    # -- running -----------------------------------------------------------------

    async def run(self) -> VolleyResult:
        """Run every task not in ``earlier`` and return the whole volley's result."""
        events = EventBus(keep=False)
        trace = (TraceWriter(self._trace_path, content=self.config.trace_content)
                 if self._trace_path else None)
        events.add_sink(self._tally)
        if trace is not None:
            events.add_sink(trace)
        telemetry = open_telemetry(self.config)
        if telemetry is not None:
            events.add_sink(telemetry.spans)
        for sink in self._sinks:
            events.add_sink(sink)
        if self._stream is not None:
            events.add_stream(self._stream)
        self._started = trio.current_time()
        try:
            events.emit(
                VolleyStarted(
                    volley_id=self.volley_id,
                    tasks=self.total,
                    context_chars=sum(len(doc) for doc in self.context),
                    mode=self.options.mode,
                    cache_warm=self._warm(),
                    trace_content=self.config.trace_content,
                )
            )
            self._bus, early, self._early = events, self._early, []
            for event in early:
                events.emit(event)
            async with (
                self._open() as providers,
                open_cache(self.config) as cache,
                self._executor(providers, events, cache) as execute,
            ):
                self._runner = VolleyRunner(
                    source=self._source,
                    sink=self._sink,
                    execute=execute,
                    events=events,
                    tally=self._tally,
                    window=self._window(),
                    warm_first=self._warm(),
                    timeout=self.config.timeout,
                    on_result=self._accepted,
                    trace=self._trace_path,
                )
                if self._interrupted:
                    self._runner.interrupt()
                await self._runner.run()
            result = self._result(events.now())
            events.emit(
                VolleyFinished(
                    volley_id=self.volley_id,
                    status=result.status,
                    error=result.error,
                    summary=result.summary.to_dict(),
                )
            )
            return result
        finally:
            if trace is not None:
                trace.close()
            if telemetry is not None:
                await telemetry.aclose()

    def _window(self) -> int:
        """Tasks claimed and unfinished at most: never more than are left to run (each
        slot is a coroutine that claims, so 4,096 slots for one task would be 4,095 idle)."""
        if self.options.window:
            window = self.options.window
        else:
            cap = self.config.max_concurrent
            window = cap if self.options.mode == "rlm" else 2 * cap
        return max(1, min(window, self.total - self._earlier))

    @asynccontextmanager
    async def _executor(
        self, providers: Mapping[Lane, Provider], events: EventBus,
        cache: CompletionCache | None,
    ) -> AsyncIterator[TaskExecutor]:
        """The gate, and how a task runs: one completion, or (``rlm``) a root call
        whose sandbox comes from the volley's one launcher, serving until the end."""
        gate = self._gate = self._make_gate(providers, events, cache)
        if self._workers > 1:
            self.share_limits(self._workers)
        if self.options.mode != "rlm":
            yield self._complete
            return
        make: LauncherFactory = self._sandboxes or default_launcher
        # A factory is told the tools' names only when there are some (its documented call).
        named = {"tools": self._tools.names} if self._tools else {}
        launcher = self._launcher = make(self.config, events, **named)
        runtime = Runtime(self.config, gate=gate, budget=self._budget, events=events,
                          sandboxes=launcher, tools=self._tools)
        self._rlm = RlmTaskExecutor(runtime, context=self._context_of)
        async with launcher.serving():
            yield self._task

    async def _task(self, task: VolleyTask, call_id: str) -> str:
        """A task of a volley of rlm tasks: a root call, or a completion when it says so;
        neither starts once its group has spent what it may."""
        if task.mode == "completion":
            return await self._complete(task, call_id)
        if task.group_max_cost is not None:
            self._groups.check(task)
        assert self._rlm is not None
        return await self._rlm(task, call_id)

    def _context_of(self, task: VolleyTask) -> Context:
        """An rlm task's REPL context: the same object for every task over the same
        documents, so the launcher writes a large one to shared memory once."""
        found = self._contexts.get(task.context)
        if found is None:
            documents = self.context if task.context is None else (
                tuple(self.context[i] for i in task.context))
            found = self._contexts[task.context] = shared_context(documents)
        return found

    def _warm(self) -> bool:
        return (
            self.options.cache_warm
            and self.options.mode == "completion"
            and self._layout().cacheable
            and self.total - self._earlier > 1
        )

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[Mapping[Lane, Provider]]:
        if self._providers is not None:
            yield self._providers
        else:
            async with open_providers(self.config) as providers:
                yield providers

    def _make_gate(self, providers: Mapping[Lane, Provider], events: EventBus,
                   cache: CompletionCache | None) -> Gate:
        # A volley reserves no permits for root steps: its tasks are its roots.
        config = dataclasses.replace(self.config, root_permits=0)
        return build_gate(config, providers=providers, events=events, ledger=self._budget,
                          cache=cache, before_send=self._before_send)

    def _layout(self) -> RequestLayout:
        """The shared context's request layout, made on first use."""
        if self._shared is None:
            self._shared = RequestLayout(self.context, model=self.config.model,
                                         max_tokens=self.config.max_tokens)
        return self._shared

    async def _complete(self, task: VolleyTask, call_id: str) -> str:
        assert self._gate is not None
        if task.group_max_cost is not None:
            self._groups.check(task)
        if task.mode == "rlm":  # its sandbox would be the volley's, which has none
            raise RLMError("an rlm task in a volley of completion tasks: make the volley with "
                           "mode rlm (--rlm), where tasks may still be completions of their own")
        layout = self._layout() if task.context is None else RequestLayout(
            # Its own documents, laid out per task: only the tasks in flight hold theirs.
            [self.context[i] for i in task.context], model=self.config.model,
            max_tokens=self.config.max_tokens)
        request = layout.request(task, call_id)
        window = (task.settings or {}).get("context_window", self.config.context_window)
        request = fit_window(request, window)
        completion = await self._gate.complete(request)
        return completion.text

    def _accepted(self, result: TaskResult) -> None:
        if self._results is not None:
            self._results[result.index] = result
        self._verdicts[result.status] += 1
        self._groups.spent(result)
        if self._on_result is not None:
            self._on_result(result)

    # -- the result ----------------------------------------------------------------

    def _listed(self, results: dict[int, TaskResult]) -> tuple[TaskResult, ...]:
        """Every task's result in task order; a task without a verdict is cancelled."""
        cut_short = self._runner.cut_short if self._runner else set()
        return tuple(
            results.get(t.index)
            or TaskResult(
                index=t.index,
                prompt=t.prompt,
                status="cancelled",
                error="cancelled while running" if t.index in cut_short else "not started",
            )
            for t in self.tasks
        )

    def _result(self, duration: float) -> VolleyResult:
        runner = self._runner
        tasks = () if self._results is None else self._listed(self._results)
        succeeded, failed = self._verdicts["succeeded"], self._verdicts["failed"]
        stop = runner.stop if runner else None
        status: VolleyStatus
        if stop is not None:
            status = stop.status
        elif self._interrupted:
            status = "interrupted"
        else:
            status = "succeeded" if succeeded == self.total else "failed"
        spent = self._budget.spent
        priced = spent.cost > 0 or not self._budget.unpriced_calls
        summary = VolleySummary(
            total_tasks=self.total,
            succeeded=succeeded,
            failed=failed,
            cancelled=self.total - succeeded - failed,
            duration_sec=duration,
            tokens_input=spent.input_tokens,
            tokens_output=spent.output_tokens,
            tokens_cached=self._tally.cached_tokens,
            total_cost=spent.cost if priced else None,
            max_concurrent_used=self._tally.max_in_flight,
            total_retries=self._tally.retries,
            rate_limited=self._tally.rate_limited,
        )
        return VolleyResult(
            volley_id=self.volley_id,
            status=status,
            summary=summary,
            tasks=tasks,
            error=stop.message if stop is not None else None,
            answered_by=tuple(self._tally.answered_by),
            estimated_calls=self._budget.estimated_calls,
            # A resume that ran and sent nothing: every result is the journal's, which
            # keeps no peak in flight or 429s of the runs that gave them.
            read_back=0 < self._earlier == succeeded + failed and not self._tally.max_in_flight,
        )

    def settings(self) -> dict[str, Any]:
        """The volley's settings as recorded (never the API key)."""
        return {**public_settings(self.config), **self.options.stored()}


def _task_models(tasks: Collection[VolleyTask]) -> list[str]:
    """The models tasks name for themselves (their own root and sub models)."""
    models = [t.model for t in tasks if t.model]
    models += [t.settings["sub_model"] for t in tasks if t.settings and t.settings.get("sub_model")]
    return models


class GroupSpent(RLMError):
    """A task's group has spent its ``group_max_cost``: the task fails having sent nothing."""

    failure_kind = "budget"


class _Groups:
    """What each group of tasks (an eval's arm) has spent: a task of a group past its
    ``group_max_cost`` does not start.  Its finished tasks count (the earlier ones read
    once, when the first capped task starts: a volley without caps never reads them);
    tasks in flight count when they finish, so a group passes its cap by at most what
    they spend."""

    def __init__(self, tasks: Collection[VolleyTask], earlier: Collection[TaskResult]) -> None:
        self._tasks, self._earlier = tasks, earlier
        self._spent: dict[str, float] | None = None
        self._running: dict[int, str] = {}  # capped tasks started here, by index

    def check(self, task: VolleyTask) -> None:
        if self._spent is None:
            self._spent = self._spent_earlier()
        group, cap = task.group or "", task.group_max_cost
        spent = self._spent.get(group, 0.0)
        if cap is not None and spent >= cap:
            raise GroupSpent(f"{task.group}: its max cost ${cap:g} is spent (${spent:.4f} by its "
                             "finished tasks); this task sent nothing")
        self._running[task.index] = group

    def spent(self, result: TaskResult) -> None:
        group = self._running.pop(result.index, None)
        if group is not None and self._spent is not None:
            self._spent[group] = self._spent.get(group, 0.0) + (result.cost or 0.0)

    def _spent_earlier(self) -> dict[str, float]:
        groups = {t.index: t.group for t in self._tasks if t.group is not None}
        spent: dict[str, float] = {}
        for result in self._earlier:
            group = groups.get(result.index)
            if group is not None:
                spent[group] = spent.get(group, 0.0) + (result.cost or 0.0)
        return spent
