"""One call: the RLM loop of a root or child call, top to bottom.

    start → generate → [execute] → generate → … → answered / iterations / error

A call runs in the task that awaits :meth:`Call.run`, and nowhere else: that
task is the call's partition.  Its steps run one after another in it (a call's
commands are ordered), while every other call runs in a task of its own (the
root in the runtime's, each child in the bridge task that asked for it), so a
slow call never delays another.

A call owns its history, its iteration count and its sandbox.  The sandbox is
spawned while the first step is generated, so its start-up is off the
critical path; after a crash or an execution timeout the next execution gets
a fresh one.

When the run streams (a live consumer, or ``config.stream``), a step's code
blocks run while its reply is still being written, each as soon as its fence
closes (:mod:`rlm._run.pipeline`); the step's execution then starts from what
already ran.
"""

from __future__ import annotations

import functools
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from rlm import prompts
from rlm._config import RunConfig
from rlm._events import CallFinished, CallStarted, CodeExecuted, EventBus, StepCompleted
from rlm._run.context import Context, context_chars, describe_context
from rlm._run.feedback import (
    FORCE_FINAL,
    REMINDER,
    format_execution,
    kept_reply,
    skipped_blocks,
)
from rlm._run.parsing import FinalDirective, find_code_blocks, find_final
from rlm._run.pipeline import BlockPipeline, Ran
from rlm._run.schema import JsonSchema, parse_json_answer, validation_error
from rlm._run.speculation import Speculation
from rlm._sandbox.interface import Launcher
from rlm._sandbox.process import ExecResult, SandboxIdentity
from rlm._sandbox.slot import SandboxSlot
from rlm._status import CallStatus
from rlm._traffic.gate import Gate
from rlm.errors import BudgetExceeded, RLMError
from rlm.providers.base import CompletionRequest, Lane, Message
from rlm_sandbox.protocol import BridgeAnswer, BridgeRequest

if TYPE_CHECKING:
    from rlm._run.bridge import Bridge

__all__ = ["Call", "CallOutcome", "CallParts", "CallStatus", "SessionCarry", "new_cache_key"]

@dataclass(frozen=True, slots=True, eq=False)
class CallOutcome:
    """How a call ended.

    ``candidate`` is the best answer it had without finishing (a FINAL before a
    later error, or its ``answer`` variable); ``last_output`` what its code
    printed last.
    """

    status: CallStatus
    answer: str | None
    iterations: int
    error: str | None = None
    last_reply: str | None = None
    candidate: str | None = None
    last_output: str | None = None


@dataclass(frozen=True, slots=True, eq=False)
class CallParts:
    """What every call of one run uses; the root and all its descendants share it.

    ``abort`` ends the whole run with an error (the first one wins).
    """

    config: RunConfig
    events: EventBus
    gate: Gate
    sandboxes: Launcher
    bridge: Bridge
    abort: Callable[[RLMError], None]
    #: The system prompt (the shipped one, plus the host tools' list when there are any).
    system_prompt: str = ""
    #: The root's final answer must be JSON fitting this schema (structured answers).
    answer_schema: JsonSchema | None = None
    #: Sent with every step of the run for providers that route by it (prompt caching).
    cache_key: str = ""


def new_cache_key() -> str:
    """A run's prompt-cache key: random, so it says nothing about the run or its keys."""
    return f"rlm-{secrets.token_hex(8)}"


@dataclass(slots=True, eq=False)
class SessionCarry:
    """What a session's root call keeps from one query to the next.

    The root's ``slot`` (its sandbox and namespace) lives in the session's
    ``nursery`` rather than the call's own, and ``history`` is the conversation
    so far (empty before the first query).
    """

    slot: SandboxSlot
    nursery: trio.Nursery
    history: list[Message] = field(default_factory=list)
    #: Past this many characters the older steps are compacted before the next query.
    max_history_chars: int | None = None
    #: The prompt-cache key of every query's steps: they share the conversation's prefix.
    cache_key: str = field(default_factory=new_cache_key)


@dataclass(frozen=True, slots=True, eq=False)
class _Step:
    reply: str
    blocks: list[str]
    final: FinalDirective | None
    forced: bool
    ran: tuple[Ran, ...] = ()  # its first blocks, run while the reply streamed

    @property
    def runs_code(self) -> bool:
        """Code blocks to run, or a ``FINAL_VAR`` to look up in the sandbox."""
        return bool(self.blocks) or (self.final is not None and self.final.variable is not None)


@dataclass(frozen=True, slots=True, eq=False)
class _Executed:
    """What a step's code did: a final answer, feedback for the model, or a failure."""

    final: str | None
    feedback: list[str]
    failure: str | None = None


class Call:
    """One RLM invocation with its own sandbox, history and iteration count."""

    def __init__(
        self,
        parts: CallParts,
        *,
        call_id: str,
        parent_id: str | None,
        depth: int,
        query: str,
        context: Context,
        carry: SessionCarry | None = None,
        reaper: trio.Nursery | None = None,
        launcher_reaps: bool = False,
    ) -> None:
        self._parts = parts
        self._carry = carry
        # A child's sandbox is reaped here, in its parent's nursery, after its answer went up.
        self._reaper = reaper
        # The launcher serves this call alone (a run's root): when it ends, every sandbox
        # of the run is killed at once and the zygote let go, so their deaths and its exit
        # overlap the rest of the run's ending; the launcher reaps them all as it stops.
        self._launcher_reaps = launcher_reaps
        self._nursery: trio.Nursery | None = None  # this call's own, while it runs
        self.call_id = call_id
        self.parent_id = parent_id
        self.depth = depth
        self.query = query
        self.context = context
        self.iteration = 0
        self.children = 0
        self.outcome: CallOutcome | None = None
        #: When the outcome was known (``call_finished``): the kills after it are teardown.
        self.concluded_at: float | None = None
        self.history: list[Message] = carry.history if carry is not None else []
        if self.history:  # a session's follow-up: the context was described already
            self.history.append(
                {"role": "user", "content": f"{_schema_ask(parts, depth)}Query: {query}"}
            )
        else:
            self.history += _opening(parts, depth, query, context)
        self._started_at = 0.0
        self._sent = 0  # messages of this call's previous request (a step's request reuses them)
        self._slot = carry.slot if carry is not None else SandboxSlot(
            parts.sandboxes, context, SandboxIdentity(call_id, parent_id, depth)
        )
        #: The root's answer as data, when the run asked for structured answers.
        self.data: object = None
        self._last_reply: str | None = None
        self.candidate: str | None = None
        self.last_output: str | None = None

    @classmethod
    def root(
        cls, parts: CallParts, query: str, context: Context, carry: SessionCarry | None = None,
        *, launcher_reaps: bool = False,
    ) -> Call:
        return cls(
            parts, call_id="root", parent_id=None, depth=0, query=query, context=context,
            carry=carry, launcher_reaps=launcher_reaps,
        )

    def child(self, query: str, context: Context) -> Call:
        """A new call one level down, started by this call's code (not yet running)."""
        self.children += 1
        return Call(
            self._parts,
            call_id=f"{self.call_id}.{self.children}",
            parent_id=self.call_id,
            depth=self.depth + 1,
            query=query,
            context=context,
            reaper=self._nursery,
        )

    def child_request(self, query: str, context: Context) -> CompletionRequest:
        """The first step's request of the child :meth:`child` would start, without
        starting it: the bridge looks it up in the response cache (the call id it
        names is only a label, not part of the cache's digest)."""
        depth = self.depth + 1
        return _step_request(
            self._parts, _opening(self._parts, depth, query, context), depth,
            call_id=f"{self.call_id}.{self.children + 1}", parent_id=self.call_id,
        )

    @property
    def lane(self) -> Lane:
        return _lane(self.depth)

    @property
    def model(self) -> str:
        return _model(self._parts.config, self.depth)

    # -- the loop --------------------------------------------------------------

    async def run(self) -> CallOutcome:
        """Run the call to its end in the calling task; return how it ended.

        An error that ends the run (any error of the root call, or one whose
        ``ends_run`` is set) goes to ``abort``; a child's other errors are its
        outcome, data for its parent.  On every exit path, cancellation
        included, the sandbox is killed and reaped before this returns (killed only,
        with every other sandbox of the run, when the launcher reaps them: see
        ``launcher_reaps``), and a call that did
        not conclude concludes as ``stopped``.
        """
        async with trio.open_nursery() as own:  # the sandbox's helper tasks
            nursery = self._carry.nursery if self._carry is not None else own
            self._nursery = own  # children are reaped here, before this call returns
            try:
                self._conclude(await self._loop(nursery))
            except RLMError as exc:
                outcome = self._outcome_of_error(exc)
                if outcome is None:
                    self._parts.abort(exc)
                else:
                    self._conclude(outcome)
            finally:
                await self._close()
                own.cancel_scope.cancel()
        assert self.outcome is not None
        return self.outcome

    async def _loop(self, nursery: trio.Nursery) -> CallOutcome:
        self._started_at = self._parts.events.now()
        self._parts.events.emit(
            CallStarted(
                **self._ids(),
                query=self.query[:500],
                model=self.model,
                context_chars=context_chars(self.context),
            )
        )
        if not self._slot.started:
            self._slot.spawn(nursery)  # overlaps the first step
        forced = False
        while True:
            step = await self._generate(forced, nursery)
            if step.runs_code:
                executed = await self._execute(step, nursery)
                if executed.failure is not None:
                    return self._outcome("error", error=executed.failure)
                problem = self._answer_problem(executed.final)
                if problem is not None and forced:
                    return self._outcome("error", error=problem)
                if problem is None and (executed.final is not None or forced):
                    return self._finished(executed.final)
                feedback = [*executed.feedback, *([problem] if problem else [])]
                self.history.append({"role": "user", "content": "\n\n".join(feedback)})
            elif step.final is not None or forced:
                answer = step.final.answer if step.final else None
                problem = self._answer_problem(answer)
                if problem is None:
                    return self._finished(answer)
                if forced:
                    return self._outcome("error", error=problem)
                self.history.append({"role": "user", "content": problem})
            else:
                self.history.append({"role": "user", "content": REMINDER})
            forced = self.iteration >= self._parts.config.max_iterations
            if forced:
                self.history.append(
                    {"role": "user", "content": FORCE_FINAL.format(n=self.iteration)}
                )

    async def _generate(self, forced: bool, nursery: trio.Nursery) -> _Step:
        """One step: the model's next reply, parsed (its blocks run as they close)."""
        if not forced:
            self.iteration += 1
        request = _step_request(
            self._parts, list(self.history), self.depth,
            call_id=self.call_id, parent_id=self.parent_id,
        )
        sent_before, self._sent = self._sent, len(self.history)
        pipeline = self._pipeline(nursery)
        try:
            completion = await self._parts.gate.complete(
                request, None if pipeline is None else pipeline.on_text
            )
        except BaseException:
            if pipeline is not None:
                pipeline.cancel()
            raise
        reply = completion.text
        self._last_reply = reply
        # Every later step sends the conversation again: it keeps a bounded part of a reply.
        kept = kept_reply(reply, self._parts.config.max_reply_chars)
        self.history.append({"role": "assistant", "content": kept})
        blocks, final = find_code_blocks(reply), find_final(reply)
        self._parts.events.emit(
            StepCompleted(
                **self._ids(),
                iteration=self.iteration,
                model=completion.model or self.model,
                code_blocks=len(blocks),
                has_final=final is not None,
                forced_final=forced,
                input_tokens=completion.input_tokens,
                output_tokens=completion.output_tokens,
                cached_input_tokens=_tokens(completion.metadata.get("cached_tokens")),
                cache_write_tokens=_tokens(completion.metadata.get("cache_write_tokens")),
                reply_chars=len(reply),
                reply_cut_chars=len(reply) - min(len(reply), self._parts.config.max_reply_chars),
                reply=kept,
                request=request_delta(self.history[:-1], sent_before),
            )
        )
        ran = await pipeline.finish() if pipeline is not None else []
        # What ran are the reply's first blocks (a cut attempt may have run others).
        matched = 0
        while matched < min(len(ran), len(blocks)) and ran[matched].code == blocks[matched]:
            matched += 1
        return _Step(reply, blocks, final, forced, tuple(ran[:matched]))

    def _pipeline(self, nursery: trio.Nursery) -> BlockPipeline | None:
        """A pipeline for this step's blocks when the run streams, else None."""
        if not (self._parts.events.streaming or self._parts.config.stream):
            return None

        async def run(index: int, code: str) -> tuple[ExecResult, bool]:
            losses = self._slot.losses
            result = await self._run_block(code, nursery)
            self._emit_executed(index, result, code, pipelined=True)
            return result, self._slot.losses > losses

        pipeline = BlockPipeline(run)
        pipeline.start(nursery)
        return pipeline

    async def _execute(self, step: _Step, nursery: trio.Nursery) -> _Executed:
        """Run the step's code blocks in order, then its ``FINAL_VAR`` if it has one."""
        feedback: list[str] = []
        blocks = step.blocks
        for index, code in enumerate(blocks, start=1):
            if index <= len(step.ran):  # it ran while the reply streamed
                result, lost = step.ran[index - 1].result, step.ran[index - 1].lost
            else:
                losses = self._slot.losses
                result = await self._run_block(code, nursery)
                self._emit_executed(index, result, code)
                lost = self._slot.losses > losses
            if result.output:
                self.last_output = result.output
            # The code is the reply's, echoed: together within what a reply may keep.
            echo = self._parts.config.max_reply_chars // len(blocks)
            feedback.append(format_execution(code, result, index, len(blocks), echo))
            if result.final is not None:
                self.candidate = result.final
                return _Executed(result.final, feedback)
            if lost and index < len(blocks):
                # Later blocks would run in a fresh sandbox without this one's variables.
                feedback.append(skipped_blocks(len(blocks) - index))
                break
        final = step.final
        if final is None:
            return _Executed(None, feedback)
        if final.variable is None:
            return _Executed(final.answer, feedback)
        lookup_code = f"FINAL_VAR({final.variable!r})"
        lookup = await self._run_block(lookup_code, nursery)
        self._emit_executed(len(blocks) + 1, lookup, lookup_code)
        if lookup.final is not None:
            return _Executed(lookup.final, feedback)
        failure = f"FINAL_VAR({final.variable}) failed: {lookup.error}"
        if step.forced:
            return _Executed(None, feedback, failure=failure)
        return _Executed(None, [*feedback, failure])

    async def _run_block(self, code: str, nursery: trio.Nursery) -> ExecResult:
        """Run one block; the sub-queries its loops send ahead (auto-batching) live in a
        nursery of their own, and whatever of them is left is cancelled when it ends."""
        bridge = self._parts.bridge
        limit = self._parts.config.exec_timeout
        # A session's sandbox was started before this query's schema was known: the
        # execution itself says FINAL_VAR answers JSON (a run's sandboxes are told at start).
        answer_json = self._carry is not None and self._parts.answer_schema is not None
        failure: Exception | None = None
        async with trio.open_nursery() as ahead:
            speculation = Speculation(
                self, nursery=ahead, events=self._parts.events, window=bridge.window(),
                ask=functools.partial(bridge.ask_admitted, self),
                admit=functools.partial(bridge.admit, self),
            )

            async def on_bridge(request: BridgeRequest) -> BridgeAnswer:
                return await bridge.serve(self, request, speculation)

            try:
                return await self._slot.execute(code, nursery, on_bridge, limit,
                                                answer_json=answer_json,
                                                window=speculation.window)
            except Exception as exc:
                failure = exc  # raised below, as the sandbox raised it: not in a nursery's group
            finally:
                speculation.close()
        assert failure is not None
        raise failure

    def _answer_problem(self, answer: str | None) -> str | None:
        """Why a root answer does not fit the run's schema (None when it fits or no
        schema applies); keeps the parsed value in ``self.data`` when it fits."""
        schema = self._parts.answer_schema
        if answer is None or schema is None or self.depth != 0:
            return None
        try:
            value = parse_json_answer(answer)
        except ValueError as exc:
            return (f"Your final answer must be JSON fitting the schema, but it is not valid "
                    f"JSON ({exc}). Build the answer as a dict or list and use FINAL_VAR.")
        problem = validation_error(value, schema)
        if problem is not None:
            return (f"Your final answer does not fit the schema: {problem}. Fix it and "
                    "answer again.")
        self.data = value
        return None

    # -- endings ---------------------------------------------------------------

    def _finished(self, answer: str | None) -> CallOutcome:
        if answer is None:
            return self._outcome("iterations")
        return self._outcome("answered", answer=answer)

    def _outcome_of_error(self, exc: RLMError) -> CallOutcome | None:
        """A child's failure as its outcome, or None when ``exc`` ends the run."""
        if self.depth == 0:
            return None
        if isinstance(exc, BudgetExceeded):
            return self._outcome("budget_exceeded", error=str(exc))
        if exc.ends_run:
            return None
        return self._outcome("error", error=f"{type(exc).__name__}: {exc}")

    def _outcome(
        self, status: CallStatus, *, answer: str | None = None, error: str | None = None
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

    def _conclude(self, outcome: CallOutcome) -> None:
        self.outcome = outcome
        events = self._parts.events
        # The call ends when its call_finished event says so: the run's duration (the root's
        # answer) is that event's time, not a moment before the event was made.
        finished = events.emit(
            CallFinished(
                **self._ids(),
                status=outcome.status,
                iterations=outcome.iterations,
                answer=None if outcome.answer is None else outcome.answer[:2000],
                error=outcome.error,
                duration_s=round(events.now() - self._started_at, 6),
            )
        )
        self.concluded_at = finished.t

    async def _close(self) -> None:
        """Kill the sandbox; if the call never concluded, conclude it as stopped.

        A root call stopped by a limit first looks for an ``answer`` variable in
        its sandbox (if the sandbox is idle), so the run can report it; not a
        session's root, whose ``answer`` may be an earlier query's.
        """
        if self.outcome is None and self.depth == 0 and not self.candidate and not self._carry:
            self.candidate = await self._slot.peek("answer")
        # A session keeps its sandbox for the next query.
        if self._carry is None and self._launcher_reaps:
            finish = getattr(self._parts.sandboxes, "finish", None)  # optional (Launcher)
            if finish is not None:
                finish()
            else:
                self._slot.kill("closed")
        elif self._carry is None and not self._reap_later():
            await self._slot.discard()
        if self.outcome is None:
            self._conclude(self._outcome("stopped", error="the run ended before this call did"))

    def _reap_later(self) -> bool:
        """Leave the killed sandbox to the parent's nursery to reap, so the answer goes up
        now, not after the reaping.  The parent's nursery outlives the
        batch this call answers, and waits for the reaping before its own call ends."""
        if self._reaper is None:
            return False
        try:
            self._reaper.start_soon(self._slot.discard)
        except RuntimeError:  # the parent's nursery is closing: reap here after all
            return False
        return True

    # -- events ----------------------------------------------------------------

    def _emit_executed(
        self, index: int, result: ExecResult, code: str, *, pipelined: bool = False
    ) -> None:
        self._parts.events.emit(
            CodeExecuted(
                **self._ids(),
                iteration=self.iteration,
                block=index,
                ok=result.ok,
                output=result.output,
                output_chars=result.output_chars,
                error=result.error,
                final=result.final is not None,
                duration_s=result.duration_s,
                pipelined=pipelined,
                code=code,
            )
        )

    def _ids(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "parent_id": self.parent_id, "depth": self.depth}


def request_delta(messages: list[Message], reused: int) -> dict[str, Any]:
    """A step's request for the trace: the count of messages the call sent before, and the rest.

    The system prompt is in ``run_started`` and an assistant message is the
    previous step's reply (in its ``step_completed``), so both are references
    here; only the new user messages are written out.  A trace grows with the
    run, not with the square of its steps.
    """
    new: list[dict[str, Any]] = []
    for message in messages[reused:]:
        if message["role"] == "system" and message["content"] == prompts.load("system"):
            new.append({"role": "system", "ref": "system_prompt"})
        elif message["role"] == "assistant":
            new.append({"role": "assistant", "ref": "reply"})
        else:
            new.append({"role": message["role"], "content": message["content"]})
    return {"reused": reused, "new": new}


def _opening(parts: CallParts, depth: int, query: str, context: Context) -> list[Message]:
    """A new call's first messages: the system prompt, the context's description, the query."""
    ask = f"{describe_context(context)}\n\n{_schema_ask(parts, depth)}"
    return [
        {"role": "system", "content": parts.system_prompt or prompts.load("system")},
        {"role": "user", "content": f"{ask}Query: {query}"},
    ]


def _step_request(
    parts: CallParts, messages: list[Message], depth: int, *, call_id: str,
    parent_id: str | None,
) -> CompletionRequest:
    """A step's request at ``depth``: its conversation is sent again, and more, at the
    next step, so its end is worth caching."""
    config = parts.config
    return CompletionRequest(
        messages=messages,
        model=_model(config, depth),
        lane=_lane(depth),
        max_tokens=config.max_tokens,
        call_id=call_id,
        depth=depth,
        parent_id=parent_id,
        cache_end=True,
        cache_key=parts.cache_key or None,
    )


def _tokens(value: object) -> int:
    """A token count a provider put in a completion's metadata (0 when absent)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _lane(depth: int) -> Lane:
    return "root" if depth == 0 else "sub"


def _model(config: RunConfig, depth: int) -> str:
    """The root model at depth 0, the sub-model below."""
    return config.model if depth == 0 else config.effective_sub_model


def _schema_ask(parts: CallParts, depth: int) -> str:
    """What a root's query message says when the run wants a structured answer ('' else)."""
    if parts.answer_schema is None or depth != 0:
        return ""
    return (
        "Your final answer must be JSON that fits the schema below: build it as "
        "a dict or list and end with FINAL_VAR(its name).\n"
        f"Answer schema: {json.dumps(parts.answer_schema)}\n\n"
    )
