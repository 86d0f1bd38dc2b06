"""``--rlm`` tasks: each task is a whole RLM call over the volley's shared context.

Every task's root call has the call id ``t<index>`` (its children
``t<index>.<n>``), its own sandbox, history and bridge, and the volley's one
gate and one budget ledger.  All tasks open their sandboxes from one launcher
serving for the whole volley, and they all hand it the *same* context object,
so a large context is written to a sealed memfd once and mapped by every
sandbox (the launcher caches the memfd per context object), not copied per
task.

A task's failure is its own: an error that would end an ``rlm run`` (any
error of the root call) ends only this task — its cancel scope is cancelled
and the error is raised to the volley runner, which records the task as
failed and decides from the error's kind whether the volley stops too
(credentials refused, out of credit, a budget wall), exactly as for
completion tasks.
"""

from __future__ import annotations

import dataclasses

import trio

from rlm._config import DEFAULT_MAX_LLM_CALLS, RunConfig
from rlm._events import EventBus
from rlm._run.bridge import Bridge
from rlm._run.call import Call, CallParts
from rlm._run.context import Context
from rlm._run.runtime import root_system_prompt
from rlm._run.tools import ToolBox
from rlm._sandbox.interface import Launcher
from rlm._traffic.budget import Budget
from rlm._traffic.gate import Gate
from rlm.errors import RLMError
from rlm.volley.records import VolleyTask

__all__ = ["RlmTaskExecutor", "TaskCallFailed", "shared_context"]


class TaskCallFailed(RLMError):
    """An ``--rlm`` task's root call ended without an answer (the task fails, others go on)."""


def shared_context(documents: tuple[str, ...]) -> Context:
    """The REPL ``context`` every task sees: one str, or a list of documents.

    Built once per volley: the launcher shares a large context by object
    identity, so every task must get this very object.
    """
    if not documents:
        return ""
    return documents[0] if len(documents) == 1 else list(documents)


class RlmTaskExecutor:
    """Runs one volley task as a root call (a :data:`~rlm.volley.runner.TaskExecutor`)."""

    def __init__(
        self,
        config: RunConfig,
        *,
        events: EventBus,
        gate: Gate,
        budget: Budget,
        sandboxes: Launcher,
        context: Context,
        call_limit: int | None = DEFAULT_MAX_LLM_CALLS,
        tools: ToolBox | None = None,
    ) -> None:
        """``call_limit`` bounds the requests one task's code may send (the volley's
        runner bounds each task's time by the run setting ``timeout``);
        ``tools`` are the host tools every task's code may call (the ``sandboxes``
        launcher must have been told their names)."""
        self._call_limit = call_limit
        self._config = config
        self._events = events
        self._gate = gate
        self._budget = budget
        self._sandboxes = sandboxes
        self._context = context
        self._tools = tools or ToolBox()
        self._system = root_system_prompt(self._tools)

    async def __call__(self, task: VolleyTask, call_id: str) -> str:
        """The task's answer; raises the error that ended its call, or TaskCallFailed."""
        config = self._config
        if task.model or task.max_tokens:
            config = dataclasses.replace(
                config,
                model=task.model or config.model,
                max_tokens=task.max_tokens or config.max_tokens,
            )
        errors: list[RLMError] = []
        scope = trio.CancelScope()

        def abort(exc: RLMError) -> None:
            # The first error wins and ends this task only.
            if not errors:
                errors.append(exc)
            scope.cancel()

        deadline = trio.current_effective_deadline()  # the runner's per-task timeout
        bridge = Bridge(
            config=config,
            events=self._events,
            gate=self._gate,
            budget=self._budget,
            abort=abort,
            deadline=lambda: deadline,
            call_limit=self._call_limit,
            tools=self._tools,
        )
        parts = CallParts(
            config, self._events, self._gate, self._sandboxes, bridge, abort,
            system_prompt=self._system,
        )
        call = Call(
            parts, call_id=call_id, parent_id=None, depth=0, query=task.prompt,
            context=self._context,
        )
        with scope:
            await call.run()
        if errors:
            raise errors[0]
        outcome = call.outcome
        if outcome is None:  # cannot happen: run() concludes the call on every path
            raise TaskCallFailed("the task's call ended without an outcome")
        if outcome.status == "answered" and outcome.answer is not None:
            return outcome.answer
        if outcome.status == "iterations":
            raise TaskCallFailed(
                f"no FINAL answer in {outcome.iterations} steps (raise --max-iterations)"
            )
        raise TaskCallFailed(outcome.error or f"the task's call ended as {outcome.status}")
