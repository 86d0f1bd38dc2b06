"""One call: the RLM loop of a root or child call, driven by scheduler commands.

start → generate → execute → code_executed → generate → … → finish (or fail).
A call owns its history, its iteration count and its sandbox.  The sandbox is
spawned while the first step is generated, so its start-up is off the critical
path; after a crash or an execution timeout the next execution gets a fresh one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from rlm import prompts
from rlm._config import RunConfig
from rlm._events import CallFinished, CallStarted, CodeExecuted, EventBus, StepCompleted
from rlm._run.context import Context, context_chars, describe_context
from rlm._run.feedback import FORCE_FINAL, REMINDER, format_execution, skipped_blocks
from rlm._run.parsing import FinalDirective, find_code_blocks, find_final
from rlm._run.scheduler import Command
from rlm._sandbox.launcher import ExecResult, Sandbox, SandboxIdentity
from rlm._sandbox.slot import SandboxSlot
from rlm.errors import BudgetExceeded, RLMError
from rlm.providers.base import Completion, CompletionRequest, Lane, Message

__all__ = ["Call", "CallHost", "CallOutcome"]


class CallHost(Protocol):
    """What a call needs from the runtime around it."""

    config: RunConfig
    events: EventBus

    async def complete(self, request: CompletionRequest) -> Completion: ...

    async def open_sandbox(
        self, nursery: trio.Nursery, *, context: Context, owner: SandboxIdentity
    ) -> Sandbox: ...

    async def serve_bridge(self, call: Call, frame: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class CallOutcome:
    """How a call ended.

    ``status`` is ``answered``, ``iterations``, ``budget_exceeded``, ``error``
    or ``stopped`` (the run ended around it).  ``candidate`` is the best answer
    it had without finishing (a FINAL before a later error, or its ``answer``
    variable); ``last_output`` what its code printed last.
    """

    status: str
    answer: str | None
    iterations: int
    error: str | None = None
    last_reply: str | None = None
    candidate: str | None = None
    last_output: str | None = None


@dataclass(frozen=True)
class _Step:
    reply: str
    blocks: list[str]
    final: FinalDirective | None
    forced: bool


class Call:
    """One RLM invocation with its own sandbox, history and iteration count."""

    def __init__(
        self,
        host: CallHost,
        *,
        call_id: str,
        parent_id: str | None,
        depth: int,
        query: str,
        context: Context,
    ) -> None:
        self.host = host
        self.call_id = call_id
        self.parent_id = parent_id
        self.depth = depth
        self.query = query
        self.context = context
        self.iteration = 0
        self.children = 0
        self.done = trio.Event()
        self.outcome: CallOutcome | None = None
        self.history: list[Message] = [
            {"role": "system", "content": prompts.load("system")},
            {"role": "user", "content": f"{describe_context(context)}\n\nQuery: {query}"},
        ]
        self._started_at = 0.0
        self._slot = SandboxSlot(
            lambda nursery, ctx, owner: host.open_sandbox(nursery, context=ctx, owner=owner),
            context,
            SandboxIdentity(call_id, parent_id, depth),
        )
        self._last_reply: str | None = None
        self.candidate: str | None = None
        self.last_output: str | None = None

    @property
    def lane(self) -> Lane:
        return "root" if self.depth == 0 else "sub"

    @property
    def model(self) -> str:
        config = self.host.config
        return config.model if self.depth == 0 else config.effective_sub_model

    def command(self, kind: Any, payload: Any = None) -> Command:
        return Command(kind, self.call_id, payload)

    # -- the command handlers -------------------------------------------------

    async def handle(self, command: Command, nursery: trio.Nursery) -> list[Command]:
        handlers: dict[str, Callable[[Any, trio.Nursery], Awaitable[list[Command]]]] = {
            "start": self._on_start,
            "generate": self._on_generate,
            "execute": self._on_execute,
            "code_executed": self._on_code_executed,
            "finish": self._on_finish,
            "fail": self._on_fail,
        }
        try:
            return await handlers[command.kind](command.payload, nursery)
        except RLMError as exc:
            # A root call's failure is the run's failure: let the scheduler abort
            # with the exception itself.  A child's failure is its parent's data.
            if command.kind in ("finish", "fail") or self.depth == 0:
                raise
            if isinstance(exc, BudgetExceeded):
                return [self.command("fail", ("budget_exceeded", str(exc)))]
            if exc.ends_run:
                raise
            return [self.command("fail", ("error", f"{type(exc).__name__}: {exc}"))]

    async def _on_start(self, _: Any, nursery: trio.Nursery) -> list[Command]:
        events = self.host.events
        self._started_at = events.now()
        events.emit(
            CallStarted(
                **self._ids(),
                query=self.query[:500],
                model=self.model,
                context_chars=context_chars(self.context),
            )
        )
        self._slot.spawn(nursery)
        return [self.command("generate", False)]

    async def _on_generate(self, forced: bool, _: trio.Nursery) -> list[Command]:
        if not forced:
            self.iteration += 1
        request = CompletionRequest(
            messages=list(self.history),
            model=self.model,
            lane=self.lane,
            max_tokens=self.host.config.max_tokens,
            call_id=self.call_id,
            depth=self.depth,
        )
        completion = await self.host.complete(request)
        reply = completion.text
        self._last_reply = reply
        self.history.append({"role": "assistant", "content": reply})
        step = _Step(reply, find_code_blocks(reply), find_final(reply), forced)
        self.host.events.emit(
            StepCompleted(
                **self._ids(),
                iteration=self.iteration,
                model=completion.model or self.model,
                code_blocks=len(step.blocks),
                has_final=step.final is not None,
                forced_final=forced,
                input_tokens=completion.input_tokens,
                output_tokens=completion.output_tokens,
                reply_chars=len(reply),
            )
        )
        if step.blocks or (step.final is not None and step.final.variable is not None):
            return [self.command("execute", step)]
        if step.final is not None:
            return [self.command("finish", step.final.answer)]
        if forced:
            return [self.command("finish", None)]
        self.history.append({"role": "user", "content": REMINDER})
        return self._next_step()

    async def _on_execute(self, step: _Step, nursery: trio.Nursery) -> list[Command]:
        feedback: list[str] = []
        final: str | None = None
        blocks = list(step.blocks)
        for index, code in enumerate(blocks, start=1):
            losses = self._slot.losses
            result = await self._run_block(code, nursery)
            self._emit_executed(index, result)
            if result.output:
                self.last_output = result.output
            if result.final is not None:
                self.candidate = result.final
            feedback.append(format_execution(code, result, index, len(blocks)))
            if result.final is not None:
                final = result.final
                break
            if self._slot.losses > losses and index < len(blocks):
                # Later blocks would run in a fresh sandbox without this one's variables.
                feedback.append(skipped_blocks(len(blocks) - index))
                break
        if final is None and step.final is not None:
            if step.final.variable is not None:
                lookup = await self._run_block(f"FINAL_VAR({step.final.variable!r})", nursery)
                self._emit_executed(len(blocks) + 1, lookup)
                if lookup.final is not None:
                    final = lookup.final
                else:
                    failure = f"FINAL_VAR({step.final.variable}) failed: {lookup.error}"
                    if step.forced:
                        return [self.command("fail", ("error", failure))]
                    feedback.append(failure)
            else:
                final = step.final.answer
        return [self.command("code_executed", (step, feedback, final))]

    async def _on_code_executed(
        self, payload: tuple[_Step, list[str], str | None], _: trio.Nursery
    ) -> list[Command]:
        step, feedback, final = payload
        if final is not None:
            return [self.command("finish", final)]
        if step.forced:
            return [self.command("finish", None)]
        self.history.append({"role": "user", "content": "\n\n".join(feedback)})
        return self._next_step()

    async def _on_finish(self, answer: str | None, _: trio.Nursery) -> list[Command]:
        if answer is not None:
            self._conclude(self._outcome("answered", answer=answer))
        else:
            self._conclude(self._outcome("iterations"))
        return []

    async def _on_fail(self, payload: tuple[str, str], _: trio.Nursery) -> list[Command]:
        status, error = payload
        self._conclude(self._outcome(status, error=error))
        return []

    def _outcome(
        self, status: str, *, answer: str | None = None, error: str | None = None
    ) -> CallOutcome:
        return CallOutcome(
            status,
            answer,
            self.iteration,
            error=error,
            last_reply=self._last_reply,
            candidate=self.candidate,
            last_output=self.last_output,
        )

    # -- helpers ---------------------------------------------------------------

    def _next_step(self) -> list[Command]:
        if self.iteration >= self.host.config.max_iterations:
            self.history.append({"role": "user", "content": FORCE_FINAL.format(n=self.iteration)})
            return [self.command("generate", True)]
        return [self.command("generate", False)]

    def kill_sandbox(self) -> None:
        """Kill this call's sandbox at once (synchronous; reaping happens in aclose)."""
        self._slot.kill()

    async def _run_block(self, code: str, nursery: trio.Nursery) -> ExecResult:
        async def on_bridge(frame: dict[str, Any]) -> dict[str, Any]:
            return await self.host.serve_bridge(self, frame)

        return await self._slot.execute(code, nursery, on_bridge, self.host.config.exec_timeout)

    def _emit_executed(self, index: int, result: ExecResult) -> None:
        self.host.events.emit(
            CodeExecuted(
                **self._ids(),
                iteration=self.iteration,
                block=index,
                ok=result.ok,
                output=result.output[:2000],
                output_chars=result.output_chars,
                error=result.error,
                final=result.final is not None,
                duration_s=result.duration_s,
            )
        )

    def _conclude(self, outcome: CallOutcome) -> None:
        self.outcome = outcome
        self.host.events.emit(
            CallFinished(
                **self._ids(),
                status=outcome.status,
                iterations=outcome.iterations,
                answer=None if outcome.answer is None else outcome.answer[:2000],
                error=outcome.error,
                duration_s=round(self.host.events.now() - self._started_at, 6),
            )
        )
        self.done.set()

    def _ids(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "parent_id": self.parent_id, "depth": self.depth}

    async def aclose(self) -> None:
        """Kill the sandbox; if the call never concluded, conclude it as stopped.

        A root call stopped by a limit first looks for an ``answer`` variable in
        its sandbox (if the sandbox is idle), so the run can report it.
        """
        if self.outcome is None and self.depth == 0 and not self.candidate:
            self.candidate = await self._slot.peek("answer")
        await self._slot.discard()
        if self.outcome is None:
            self._conclude(self._outcome("stopped", error="the run ended before this call did"))
