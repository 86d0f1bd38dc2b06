"""The volley runner: claim tasks, run each through the one gate, hand verdicts to a sink.

Scheduling is the gate's (permits, pacing, adaptive concurrency, retries,
budget); the runner only decides *which* task runs next and when a volley
stops.  ``window`` workers each claim a task and run it, so at most that many
tasks are claimed and unfinished — more than the gate's permits, so a task
backing off from a 429 never idles a permit, few enough that claims stay close
to when the work happens (the journal's heartbeat has little to cover).

Stopping, first reason wins:

- ``interrupt()`` and refused credentials (401/403) are *hard* stops: nothing
  more is launched and every running task is cancelled at once;
- out of credit is hard too (every further request would fail the same way);
- a budget wall (``BudgetExceeded``) is *soft*: nothing new starts, tasks that
  have not sent anything yet are cancelled, requests already in flight finish.

A task that gets no verdict is released back to the source (inside a shielded
scope); so is one whose request the gate's send check refused because its claim
was lost (:class:`~rlm.errors.ClaimLost`): the worker that holds it now gives
its verdict.  A verdict goes to the sink's ``keep`` and is reported (``on_result``,
the ``task_finished`` event) only once the sink says it is kept; the worker
does not wait for that (a journal's group commit) and takes its next task.
``run`` returns once every verdict is kept and reported.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass

import trio

from rlm._durations import format_duration
from rlm._events import EventBus
from rlm.errors import (
    AuthenticationError,
    BudgetExceeded,
    ClaimLost,
    LimitExceeded,
    ProviderError,
    RLMError,
    RunTimeout,
    SandboxError,
)
from rlm.volley.events import TaskFinished, task_call_id
from rlm.volley.records import TaskResult, TaskStatus, VolleyStatus, VolleyTask, prompt_title
from rlm.volley.store import ResultSink, TaskSource
from rlm.volley.tally import TaskTally

__all__ = ["Stop", "TaskExecutor", "VolleyRunner", "failure_kind"]

#: Runs one task to its output text (raises an RLMError when it fails).
#: The second argument is the task's call id, to stamp on its requests.
TaskExecutor = Callable[[VolleyTask, str], Awaitable[str]]


def failure_kind(exc: RLMError) -> str:
    """The word a failed task's ``error_kind`` says for ``exc``: an error may name its own
    (``failure_kind``: ``no_answer``, ``context_window``...), else its family's."""
    own = getattr(exc, "failure_kind", None)
    if isinstance(own, str):
        return own
    for family, kind in ((RunTimeout, "timeout"), (BudgetExceeded, "budget"),
                         (LimitExceeded, "limit"), (ProviderError, "provider"),
                         (SandboxError, "sandbox")):
        if isinstance(exc, family):
            return kind
    return "error"


@dataclass(frozen=True)
class Stop:
    """Why a volley stopped before running every task."""

    status: VolleyStatus
    message: str
    hard: bool


@dataclass
class _Running:
    task: VolleyTask
    scope: trio.CancelScope
    started: float


class VolleyRunner:
    """Runs the tasks of ``source`` with ``execute``; see the module docstring."""

    def __init__(
        self,
        *,
        source: TaskSource,
        sink: ResultSink,
        execute: TaskExecutor,
        events: EventBus,
        tally: TaskTally,
        window: int,
        warm_first: bool = False,
        timeout: float | None = None,
        on_result: Callable[[TaskResult], None] | None = None,
        trace: str | None = None,
    ) -> None:
        """``trace``: the trace file the volley's events go to, named in each result."""
        if window < 1:
            raise ValueError("the window must hold at least one task")
        self._source = source
        self._sink = sink
        self._execute = execute
        self._events = events
        self._tally = tally
        self._window = window
        self._warm_first = warm_first
        self._timeout = timeout
        self._on_result = on_result
        self._trace = trace
        self._running: dict[str, _Running] = {}
        self._claiming: set[trio.CancelScope] = set()  # claims under way (a stop ends them)
        self.stop: Stop | None = None
        self.finished = 0  # verdicts kept by the sink (and reported)
        self._unkept = 0  # verdicts handed to the sink, not kept yet
        self._all_kept: trio.Event | None = None  # set when _unkept drops to 0 at the end
        self.cut_short: set[int] = set()  # tasks cancelled after sending something
        # One bound method for every keep: a sink may hold it until a commit, and a new
        # one per task would be one more object per task for the collector to promote.
        self._kept_once = self._kept

    @property
    def in_flight(self) -> int:
        """Tasks claimed and not finished (waiting for a permit, sending, backing off)."""
        return len(self._running)

    def running_title(self, index: int) -> str | None:
        """The title of task ``index`` while it runs here (None otherwise)."""
        running = self._running.get(task_call_id(index))
        return None if running is None else running.task.title

    async def run(self) -> None:
        """Run until the source is empty or a stop; returns when every task has ended."""
        if self._warm_first and self.stop is None:
            # Warm the provider's prompt cache: the first task alone, the rest after it.
            await self._work(once=True)
        async with trio.open_nursery() as nursery:
            for _ in range(self._window):
                nursery.start_soon(self._work)
        if self._unkept:
            self._all_kept = trio.Event()
            await self._all_kept.wait()

    async def _work(self, *, once: bool = False) -> None:
        """One worker: claim a task, run it to its verdict, repeat.

        Long-lived workers instead of a task per volley task: no spawn per task, and
        nothing between a claim's return and the gate's FIFO queue can switch tasks,
        so tasks are sent in the order they were claimed.
        """
        while self.stop is None:
            # A claim may wait long (other workers hold the rest): a stop ends the wait.
            with trio.CancelScope() as claiming:
                self._claiming.add(claiming)
                try:
                    task = await self._source.claim()
                finally:
                    self._claiming.discard(claiming)
            if claiming.cancelled_caught:
                return
            if task is None:
                return
            if self.stop is not None:  # stopped while claiming: give it back untouched
                with trio.CancelScope(shield=True):
                    await self._source.release(task)
                return
            if task_call_id(task.index) in self._running:
                # Claimed again while this worker still runs it (its claim was reopened
                # as stale, as when the process was paused): the run under way gives
                # the verdict, so the task is neither run twice here nor given back.
                continue
            await self._run_one(task)
            if once:
                return

    def interrupt(self) -> None:
        """Stop launching and cancel every running task (Ctrl-C)."""
        self._stop(Stop("interrupted", "interrupted", hard=True))

    def _stop(self, stop: Stop) -> None:
        if self.stop is None:
            self.stop = stop
        for claiming in self._claiming:
            claiming.cancel()
        for call_id, running in self._running.items():
            if stop.hard or not self._tally.sent(call_id):
                running.scope.cancel()

    async def _run_one(self, task: VolleyTask) -> None:
        call_id = task_call_id(task.index)
        running = _Running(task, trio.CancelScope(), trio.current_time())
        self._running[call_id] = running
        result: TaskResult | None = None
        try:
            with running.scope:
                result = await self._verdict(task, call_id, running.started)
        finally:
            del self._running[call_id]
            if result is None:
                if self._tally.sent(call_id):
                    self.cut_short.add(task.index)
                self._tally.pop(call_id)  # what it spent stays in the ledger's totals
            if result is None:
                with trio.CancelScope(shield=True):
                    await self._source.release(task)
            else:
                self._unkept += 1
                self._sink.keep(result, self._kept_once)

    def _kept(self, result: TaskResult) -> None:
        self._unkept -= 1
        self.finished += 1
        self._report(result)
        if self._unkept == 0 and self._all_kept is not None:
            self._all_kept.set()

    async def _verdict(self, task: VolleyTask, call_id: str, started: float) -> TaskResult | None:
        """Run the task to a result, or None when it got no verdict (stopped, refused)."""
        timeout = task.timeout or self._timeout
        status: TaskStatus = "succeeded"
        output: str | None = None
        error: str | None = None
        kind: str | None = None
        try:
            with trio.fail_after(timeout) if timeout else nullcontext():
                output = await self._execute(task, call_id)
        except trio.TooSlowError:
            status, error = "failed", f"timed out after {format_duration(timeout or 0)}"
            kind = "timeout"
        except ClaimLost:
            return None  # another worker holds the task now: its verdict is that one's
        except BudgetExceeded as exc:
            self._stop(Stop("budget_exceeded", str(exc), hard=False))
            if not self._tally.sent(call_id):
                return None  # refused before anything was sent: the task did not run
            status, error, kind = "failed", str(exc), "budget"
        except RLMError as exc:
            if isinstance(exc, AuthenticationError):
                self._stop(Stop("credentials_refused", str(exc), hard=True))
            elif exc.ends_run:
                hard = not isinstance(exc, LimitExceeded)
                self._stop(Stop("budget_exceeded", str(exc), hard=hard))
            status, error, kind = "failed", str(exc), failure_kind(exc)
        return self._result(task, call_id, started, status, output, error, kind)

    def _result(
        self,
        task: VolleyTask,
        call_id: str,
        started: float,
        status: TaskStatus,
        output: str | None,
        error: str | None,
        kind: str | None = None,
    ) -> TaskResult:
        usage = self._tally.pop(call_id)
        return TaskResult(
            index=task.index,
            prompt=task.prompt,
            status=status,
            duration_sec=trio.current_time() - started,
            tokens_input=usage.input_tokens,
            tokens_output=usage.output_tokens,
            tokens_cached=usage.cached_tokens,
            cost=usage.priced_cost,
            retries=usage.retries,
            request_sec=usage.request_s,
            output=output,
            error=error,
            calls=usage.sent,
            error_kind=kind,
            trace=self._trace,
        )

    def _report(self, result: TaskResult) -> None:
        self._events.emit(
            TaskFinished(
                call_id=task_call_id(result.index),
                index=result.index,
                status=result.status,
                duration_s=round(result.duration_sec, 6),
                input_tokens=result.tokens_input,
                output_tokens=result.tokens_output,
                cached_tokens=result.tokens_cached,
                cost=result.cost,
                retries=result.retries,
                error=result.error,
                output=result.output,
                title=prompt_title(result.prompt),
                prompt=result.prompt,
            )
        )
        if self._on_result is not None:
            self._on_result(result)
