"""``--rlm`` tasks: each task is a whole RLM call over the volley's shared context (or the
documents the task names: an eval's item).

Every task's root call has the call id ``t<index>`` (its children
``t<index>.<n>``), its own sandbox, history and bridge, and the volley's one
gate and one budget ledger; the run settings a task carries (its model, depth,
iterations...) apply to its call alone.  All tasks open their sandboxes from one
launcher serving for the whole volley, and tasks over the same documents hand it
the *same* context object, so a large context is written to a sealed memfd once
and mapped by every sandbox (the launcher caches the memfd per context object),
not copied per task.

A task's failure is its own: an error that would end an ``rlm run`` (any
error of the root call) ends only this task — its cancel scope is cancelled
and the error is raised to the volley runner, which records the task as
failed and decides from the error's kind whether the volley stops too
(credentials refused, out of credit, a budget wall), exactly as for
completion tasks.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from rlm._config import DEFAULT_MAX_LLM_CALLS
from rlm._durations import format_duration
from rlm._run.context import Context
from rlm._run.runtime import Runtime
from rlm.errors import RLMError, RunTimeout
from rlm.volley.records import VolleyTask

__all__ = ["RlmTaskExecutor", "TaskCallFailed", "shared_context"]


class TaskCallFailed(RLMError):
    """An ``--rlm`` task's root call ended without an answer (the task fails, others go on).

    ``failure_kind`` says why, in the word a result's ``error_kind`` keeps."""

    def __init__(self, message: str, failure_kind: str = "no_answer") -> None:
        super().__init__(message)
        self.failure_kind = failure_kind


def shared_context(documents: tuple[str, ...]) -> Context:
    """The REPL ``context`` every task sees: one str, or a list of documents.

    Built once per volley: the launcher shares a large context by object
    identity, so every task must get this very object.
    """
    if not documents:
        return ""
    return documents[0] if len(documents) == 1 else list(documents)


class RlmTaskExecutor:
    """Runs one volley task as a root call (a :data:`~rlm.volley.runner.TaskExecutor`)
    through the volley's runtime: its gate, ledger and launcher are the volley's."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        context: Callable[[VolleyTask], Context],
        call_limit: int | None = DEFAULT_MAX_LLM_CALLS,
    ) -> None:
        """``context`` gives each task its REPL context (the same object for every task
        over the same documents, so the launcher writes a large one once);
        ``call_limit`` bounds the requests one task's code may send unless the task
        sets its own ``max_llm_calls`` (the volley's runner bounds each task's time
        by the run setting ``timeout``)."""
        self._runtime = runtime
        self._call_limit = call_limit
        self._context = context

    async def __call__(self, task: VolleyTask, call_id: str) -> str:
        """The task's answer; raises the error that ended its call, or TaskCallFailed."""
        config = task.run_config(self._runtime.config)
        own = task.settings or {}
        call_limit = own.get("max_llm_calls", self._call_limit)
        deadline = trio.current_effective_deadline()  # the runner's per-task timeout
        outcome = await self._runtime.run_root(
            task.prompt, self._context(task), call_id=call_id, config=config,
            deadline=deadline, call_limit=call_limit, extract=False,
        )
        if isinstance(outcome.error, RunTimeout):  # said as the runner says it
            limit = task.timeout or config.timeout or 0.0
            raise TaskCallFailed(f"timed out after {format_duration(limit)}", "timeout")
        if outcome.error is not None:
            raise outcome.error
        root = outcome.root
        if root is None:  # cannot happen: run_root concludes the call on every path
            raise TaskCallFailed("the task's call ended without an outcome", "error")
        if root.status == "answered" and root.answer is not None:
            return root.answer
        if root.status == "iterations":
            raise TaskCallFailed(
                f"no FINAL answer in {root.iterations} steps (raise --max-iterations)"
            )
        raise TaskCallFailed(root.error or f"the task's call ended as {root.status}")
