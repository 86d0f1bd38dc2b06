"""Serving bridge calls: ``llm_query``, ``llm_query_batched`` and host tools from sandbox code.

A batch arrives as one frame and fans out as a sliding window: as soon as one
item finishes the next one starts (no waiting for a whole chunk), and the gate
decides how many actually run at once.  Results keep input order.  An item
that fails holds ``"Error: …"``; an error that ends the run (credentials,
credit, a hard limit) aborts the run instead.

With ``max_depth`` 1 every item is a one-shot sub-query.  Deeper, an item from
a call at depth d becomes a child call at depth d + 1 while d + 1 < max_depth.

With a ``schema`` every item is a one-shot sub-query that asks the provider for
JSON (:attr:`CompletionRequest.response_schema`); the answer is parsed and
validated, an invalid one gets one repair request, and a slot that still does
not fit holds an error.  Structured results travel to the sandbox as JSON text
(one string, whatever the batch size).  A host tool call runs the tool under
its own limits (:mod:`rlm._run.tools`); its failure comes back as ToolError.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from rlm._config import RunConfig
from rlm._events import BridgeCallFinished, BridgeCallStarted, BudgetRefused, EventBus, ToolCalled
from rlm._run.schema import JsonSchema, SchemaError, normalise_schema, parse_json_answer
from rlm._run.schema import validation_error as schema_problem
from rlm._run.tools import ToolBox, ToolFailure
from rlm._traffic.budget import Budget
from rlm._traffic.gate import Gate
from rlm.errors import BudgetExceeded, RLMError
from rlm.providers.base import CompletionRequest, Message
from rlm_sandbox.protocol import (
    BridgeAnswer,
    BridgeRequest,
    BudgetRequest,
    CancelRequest,
    CollectRequest,
    QueryRequest,
    SpeculateRequest,
    ToolRequest,
    answer,
    refusal,
)

if TYPE_CHECKING:
    from rlm._run.call import Call
    from rlm._run.speculation import Speculation

__all__ = ["Bridge"]

_MAX_ITEMS = 100_000
#: The wait before answering a call's second and later budget refusals (s).
_REFUSAL_PAUSE = 0.1


class Bridge:
    """Answers the bridge frames of every sandbox in a run.

    Sub-queries go to ``gate``; child calls run in the task of the batch item
    that asked for them.  ``abort`` ends the run with an error that ends runs
    (credentials, credit); ``deadline`` is the run's, for ``budget()``.
    """

    def __init__(
        self,
        *,
        config: RunConfig,
        events: EventBus,
        gate: Gate,
        budget: Budget,
        abort: Callable[[RLMError], None],
        deadline: Callable[[], float],
        tools: ToolBox | None = None,
        call_limit: int | None = None,
    ) -> None:
        self._config = config
        # Requests this bridge may send in all (an ``--rlm`` volley task's own ceiling,
        # under the volley's shared ledger); None: the ledger alone decides.
        self._call_limit = call_limit
        self._items_sent = 0
        self._tools = tools or ToolBox()
        self._events = events
        self._gate = gate
        self._budget = budget
        self._abort = abort
        self._deadline = deadline
        self._ids = 0
        self._refusals: dict[str, int] = {}  # budget refusals per call_id

    async def serve(
        self, call: Call, request: BridgeRequest, speculation: Speculation | None = None
    ) -> BridgeAnswer:
        """The answer to one checked bridge request of ``call``'s sandbox; ``speculation``
        holds the execution's sub-queries sent ahead (auto-batching), if it has any."""
        match request:
            case BudgetRequest():
                return answer(self._budget_view(call))
            case ToolRequest(tool=name, arguments=arguments):
                return await self._call_tool(call, name, arguments)
            case QueryRequest():
                return await self._query(call, request)
            case SpeculateRequest() | CollectRequest() | CancelRequest() if speculation is None:
                return refusal("auto-batching is off for this execution", "usage")
            case SpeculateRequest():
                return await speculation.speculate(request)
            case CollectRequest():
                return await speculation.collect(request)
            case CancelRequest():
                return speculation.cancel(request)

    def window(self) -> int:
        """How many sub-queries an execution may send ahead: the sub lane's capacity."""
        return self._gate.capacities()["sub"] if self._config.auto_batch else 0

    async def admit(
        self, call: Call, items: list[tuple[str, str | None]], schema_text: str | None,
        also: int = 0,
    ) -> None:
        """Admit ``items`` of ``call`` to be sent (after ``also`` admitted and not sent
        yet), or raise BudgetExceeded: the call limits, as a batch of them would meet."""
        schema = None if schema_text is None else normalise_schema(json.loads(schema_text))
        children = call.depth + 1 < self._config.max_depth and schema is None
        sending = await self._to_send(call, items, schema, children=children)
        self._check_call_limit(sending)
        self._budget.check_batch(sending + also)
        self._items_sent += sending

    async def ask_admitted(self, call: Call, request: QueryRequest) -> BridgeAnswer:
        """``llm_query`` of an item :meth:`admit` let through, sent ahead: a budget
        refusal on its way is its answer (its code then asks it itself), not an event."""
        return await self._query(call, request, speculative=True)

    async def _query(
        self, call: Call, request: QueryRequest, *, speculative: bool = False
    ) -> BridgeAnswer:
        """``llm_query`` / ``llm_query_batched``: sub-queries or child calls, fanned out."""
        fn = "llm_query_batched" if request.batched else "llm_query"
        schema: JsonSchema | None = None
        if request.schema is not None:
            try:
                schema = normalise_schema(json.loads(request.schema))
            except (SchemaError, ValueError) as exc:
                return refusal(f"schema: {exc}", "usage")
        prompts, contexts = request.prompts, request.contexts
        if len(prompts) > _MAX_ITEMS:
            return refusal(
                f"a batch holds at most {_MAX_ITEMS:,} prompts; got {len(prompts):,}", "usage"
            )
        items: list[tuple[str, str | None]] = list(
            zip(prompts, contexts if contexts is not None else [None] * len(prompts), strict=True)
        )
        self._ids += 1
        bridge_id = self._ids
        ids: dict[str, Any] = {
            "call_id": call.call_id,
            "parent_id": call.parent_id,
            "depth": call.depth,
        }
        mode = "child-call" if call.depth + 1 < self._config.max_depth else "sub-query"
        events = self._events
        started = events.now()
        events.emit(
            BridgeCallStarted(**ids, bridge_id=bridge_id, fn=fn, items=len(items), mode=mode,
                              speculative=speculative)
        )
        failed = len(items)
        results: list[str] | None = None
        sent = finished = unsent = False
        try:
            # With a schema every item is a sub-query, at any depth (see _fan_out below).
            children = mode == "child-call" and schema is None
            if not speculative:  # a speculative item was admitted when it was offered
                sending = await self._to_send(call, items, schema, children=children)
                self._check_call_limit(sending)
                self._budget.check_batch(sending)
                self._items_sent += sending
            sent = True
            if schema is not None:
                structured = await self._fan_out(
                    call, items, one=lambda c, p, x: self._one_structured(c, p, x, schema)
                )
                failed = sum(1 for item in structured if "error" in item)
                results = [json.dumps(item) for item in structured]  # as the trace shows them
            else:
                results = await self._fan_out(call, items, one=self._one, children=children)
                failed = sum(1 for r in results if r.startswith("Error:"))
            finished = True
        except BudgetExceeded as exc:
            if speculative:
                unsent = True
                return refusal(str(exc), "budget")  # not sent: the code asks it itself
            refused = self._refusals.get(call.call_id, 0)
            self._refusals[call.call_id] = refused + 1
            if refused:
                # Code that swallows the refusal and asks again spins on it until
                # --exec-timeout (refusals count there in full): paced, that is a few
                # hundred refusals and their events, not millions.
                await trio.sleep(_REFUSAL_PAUSE)
            events.emit(
                BudgetRefused(
                    **ids,
                    scope="batch",
                    items=len(items),
                    lane="sub",
                    model=self._config.effective_sub_model,
                    reason=str(exc),
                )
            )
            return refusal(str(exc), "budget")
        finally:
            events.emit(
                BridgeCallFinished(
                    **ids,
                    bridge_id=bridge_id,
                    fn=fn,
                    items=len(items),
                    failed_items=failed,
                    duration_s=round(events.now() - started, 6),
                    # A batch refused whole sent nothing: its size is enough (a runaway
                    # loop may ask for 100,000 items at every step).
                    prompts=[prompt for prompt, _ in items] if sent else None,
                    contexts=[c for _, c in items] if sent and contexts is not None else None,
                    answers=results,
                    speculative=speculative,
                    cancelled=speculative and not (finished or unsent),
                )
            )
        if schema is not None:
            return answer(json.dumps(structured))
        assert results is not None
        return answer(results if request.batched else results[0])

    async def _to_send(
        self,
        call: Call,
        items: list[tuple[str, str | None]],
        schema: JsonSchema | None,
        *,
        children: bool,
    ) -> int:
        """The requests a batch will send, for the call limits to check before any is sent.

        Answers from the response cache never count against them, so with a cache and a
        call limit the items are looked up first.  A child call's later steps cannot be
        known before it runs: it counts as one request unless its first step is cached
        (each later step is checked when it is sent, and a cached one is free there too).
        """
        limited = self._call_limit is not None or self._budget.calls_left() is not None
        if not limited or self._gate.cache is None:
            return len(items)
        sending = 0
        for prompt, context in items:
            if children:
                request = call.child_request(prompt, _child_context(prompt, context))
            else:
                request = self._sub_request(call, prompt, context, schema)
            sending += not await self._gate.is_cached(request)
        return sending

    def _sub_request(
        self, call: Call, prompt: str, context: str | None, schema: JsonSchema | None
    ) -> CompletionRequest:
        """The request a sub-query item asks first (a structured one may add a repair)."""
        content = prompt if context is None else f"{prompt}\n\n{context}"
        return CompletionRequest(
            messages=[{"role": "user", "content": content}],
            model=self._config.effective_sub_model,
            lane="sub",
            max_tokens=self._config.max_tokens,
            call_id=call.call_id,
            depth=call.depth + 1,
            # Streamed text of a plain sub-query is attributed to the asker, as its child.
            parent_id=call.call_id if schema is None else None,
            response_schema=schema,
        )

    def _check_call_limit(self, items: int) -> None:
        limit = self._call_limit
        if limit is not None and self._items_sent + items > limit:
            left = max(0, limit - self._items_sent)
            raise BudgetExceeded(
                f"this task's ceiling of {limit:,} requests would be passed ({items:,} asked, "
                f"{left:,} left): each --rlm task is bounded like one rlm run"
            )

    async def _fan_out(
        self,
        call: Call,
        items: list[tuple[str, str | None]],
        *,
        one: Callable[[Call, str, str | None], Awaitable[_Result]],
        children: bool = False,
    ) -> list[_Result]:
        """Run every item; results in input order.

        Sub-queries queue FIFO at the gate, which is the sliding window: a
        freed permit goes straight to the next item.  Only a bounded look-ahead
        of items exists at once (:func:`_look_ahead`), so a batch of 100,000
        costs the host the memory of a few hundred requests, not of 100,000.
        Child calls each own a sandbox, so at most ``max_concurrent`` of one
        batch are alive at a time.
        """
        results: list[_Result | None] = [None] * len(items)
        ahead = self._config.max_concurrent if children else _look_ahead(self._config)
        window = trio.Semaphore(min(ahead, len(items)))
        exhausted: list[BudgetExceeded] = []

        async def run_item(index: int, prompt: str, context: str | None) -> None:
            try:
                if not exhausted:  # once the ledger is spent, send nothing more
                    results[index] = await one(call, prompt, context)
            except BudgetExceeded as exc:
                exhausted.append(exc)
            finally:
                window.release()

        async with trio.open_nursery() as nursery:
            for index, (prompt, context) in enumerate(items):
                await window.acquire()
                if exhausted:
                    window.release()
                    break
                nursery.start_soon(run_item, index, prompt, context)
        if exhausted:
            raise exhausted[0]  # the whole batch is refused: model code sees BudgetExceeded
        return [result for result in results if result is not None]

    async def _one(self, call: Call, prompt: str, context: str | None) -> str:
        config = self._config
        try:
            if call.depth + 1 < config.max_depth:
                return await _run_child(call, prompt, _child_context(prompt, context))
            completion = await self._gate.complete(self._sub_request(call, prompt, context, None))
            return completion.text
        except BudgetExceeded:
            raise  # the sandbox raises it in model code
        except RLMError as exc:
            if exc.ends_run:
                self._abort(exc)
            return f"Error: {type(exc).__name__}: {exc}"

    async def _one_structured(
        self, call: Call, prompt: str, context: str | None, schema: JsonSchema
    ) -> dict[str, object]:
        """One structured answer: ``{"value": data}``, or ``{"error": why}`` once a repair
        request did not fix it either."""
        first = self._sub_request(call, prompt, context, schema)
        messages: list[Message] = first.messages
        problem = ""
        for attempt in range(2):
            try:
                completion = await self._gate.complete(
                    dataclasses.replace(first, messages=messages)
                )
            except BudgetExceeded:
                raise
            except RLMError as exc:
                if exc.ends_run:
                    self._abort(exc)
                return {"error": f"{type(exc).__name__}: {exc}"}
            try:
                value = parse_json_answer(completion.text)
            except ValueError as exc:
                problem = f"the answer is not valid JSON ({exc})"
            else:
                found = schema_problem(value, schema)
                if found is None:
                    return {"value": value}
                problem = f"the answer does not fit the schema ({found})"
            if attempt == 0:
                messages = [
                    *messages,
                    {"role": "assistant", "content": completion.text},
                    {"role": "user", "content": _REPAIR.format(problem=problem)},
                ]
        return {"error": f"{problem}, even after one repair request"}

    async def _call_tool(self, call: Call, name: str, arguments: str) -> BridgeAnswer:
        """Run host tool ``name`` on JSON ``arguments``; its failure is a ``tool`` reply."""
        started = self._events.now()
        try:
            try:
                payload = json.loads(arguments)
                args, kwargs = payload["args"], payload["kwargs"]
            except (ValueError, KeyError, TypeError, RecursionError):  # nesting: the sandbox's
                raise ToolFailure(f"{name}: the arguments are not JSON data") from None
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise ToolFailure(f"{name}: the arguments are not JSON data")
            value = await self._tools.call(name, args, kwargs)
            try:
                text = json.dumps(value)
            except (TypeError, ValueError):
                raise ToolFailure(f"{name} returned data that is not JSON") from None
        except ToolFailure as exc:
            self._emit_tool(call, name, str(exc), started)
            return refusal(str(exc), "tool")
        self._emit_tool(call, name, None, started)
        return answer(text)

    def _emit_tool(self, call: Call, name: str, error: str | None, started: float) -> None:
        self._events.emit(
            ToolCalled(
                call_id=call.call_id,
                parent_id=call.parent_id,
                depth=call.depth,
                tool=name,
                ok=error is None,
                error=error,
                duration_s=round(self._events.now() - started, 6),
            )
        )

    def _budget_view(self, call: Call) -> dict[str, Any]:
        """What remains for ``call`` to plan with (returned by ``budget()`` in the sandbox)."""
        remaining = self._deadline() - trio.current_time()
        return {
            **self._budget.remaining(),
            "time_remaining_s": None if remaining == float("inf") else round(remaining, 3),
            "depth": call.depth,
            "depth_remaining": self._config.max_depth - call.depth - 1,
            "iterations_remaining": self._config.max_iterations - call.iteration,
        }


async def _run_child(parent: Call, query: str, context: str) -> str:
    """Run a child call in this task, to its end; its answer or an ``Error:`` string.

    Raises BudgetExceeded when the child ran out of budget, so the parent's
    code sees the exhaustion rather than a plain error string.
    """
    child = parent.child(query, context)
    outcome = await child.run()
    if outcome.answer is not None:
        return outcome.answer
    if outcome.status == "budget_exceeded":
        raise BudgetExceeded(outcome.error or "the budget is exhausted")
    if outcome.status == "iterations":
        return f"Error: child call {child.call_id} gave no answer in {outcome.iterations} steps"
    return f"Error: child call {child.call_id} failed: {outcome.error}"


def _child_context(prompt: str, context: str | None) -> str:
    """A child call's context: the item's own, else its prompt."""
    return prompt if context is None else context


_Result = TypeVar("_Result")


def _look_ahead(config: RunConfig) -> int:
    """How many items of a batch may exist at once: enough that the gate always has
    the next ones queued (retrying items hold a place too), few enough to be cheap."""
    return max(64, 4 * config.max_concurrent)

_REPAIR = (
    "Your answer could not be used: {problem}. Reply with only the corrected JSON, "
    "nothing else."
)


