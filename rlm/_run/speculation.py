"""Auto-batching on the host: the speculative sub-queries of one code execution.

A sandbox whose loop can predict the prompts it is about to ask offers them
(``speculate``; see ``sandbox/rlm_sandbox/speculation.py``).  Each offer the
budget admits starts at once as its own ``llm_query``, in a task of this
execution's nursery, through the bridge and the gate like any other: counted
in the budget, paced, retried, traced (its bridge events say ``speculative``).
The host holds the sandbox to its window: offers past ``window`` calls
outstanding plus those already given up are not accepted.
``collect`` waits for one and answers as ``llm_query`` would; ``cancel``
cancels those the code will not use, where the provider has not answered yet.
When the execution ends, whatever is left is cancelled and every loop still
open is reported.  Each loop that sent calls ahead is one ``loop_batched``
event: how many, how many were used, how many cancelled, and the window.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from rlm._events import EventBus, LoopBatched
from rlm._run.schema import SchemaError
from rlm.errors import BudgetExceeded
from rlm_sandbox.protocol import (
    BridgeAnswer,
    CancelRequest,
    CollectRequest,
    QueryRequest,
    SpeculateRequest,
    answer,
    refusal,
)

if TYPE_CHECKING:
    from rlm._run.call import Call

__all__ = ["Speculation"]

#: Runs one admitted query (the bridge's ``llm_query`` path, admission done).
Ask = Callable[[QueryRequest], Awaitable[BridgeAnswer]]
#: Admits items (prompt, context) with a schema, after ``also`` admitted before them, or
#: raises BudgetExceeded.
Admit = Callable[[list[tuple[str, str | None]], str | None, int], Awaitable[None]]

_UNSENT = "the speculative call was not sent"


@dataclass(slots=True, eq=False)
class _Loop:
    line: int
    started: float
    calls: int = 0
    used: int = 0
    cancelled: int = 0


@dataclass(slots=True, eq=False)
class _Item:
    """One speculative call: its loop, its task's scope and, once done, its answer."""

    loop: _Loop
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    done: trio.Event = field(default_factory=trio.Event)
    reply: BridgeAnswer | None = None
    #: What asking it raised: raised where the code collects it, as its own call would.
    failure: Exception | None = None


class Speculation:
    """The speculative calls of one execution of ``call``'s code (see the module docstring).

    ``ask`` runs an admitted query; ``admit`` admits calls before they are
    offered; tasks run in ``nursery``, which must outlive the execution.
    """

    def __init__(self, call: Call, *, nursery: trio.Nursery, events: EventBus, window: int,
                 ask: Ask, admit: Admit) -> None:
        self._call = call
        self._nursery = nursery
        self._events = events
        self.window = window
        self._ask = ask
        self._admit = admit
        self._items: dict[int, _Item] = {}
        self._loops: dict[int, _Loop] = {}
        self._given_up = 0  # accepted, then cancelled unused

    async def speculate(self, request: SpeculateRequest) -> BridgeAnswer:
        """Start the offered calls the budget admits (in order); answer how many."""
        if self.window <= 0 or any(spec in self._items for spec in request.spec):
            return answer({"accepted": 0})
        loop = self._loops.setdefault(request.loop, _Loop(request.line, self._events.now()))
        accepted = 0
        for spec, prompt, context in zip(request.spec, request.prompts, request.contexts,
                                         strict=True):
            if len(self._items) + self._given_up >= self.window:
                break  # the sandbox's own bound, kept here whatever the sandbox does
            try:
                await self._admit([(prompt, context)], request.schema, accepted)
            except (BudgetExceeded, SchemaError, ValueError):
                break  # the code asks the rest itself, and meets the refusal there
            item = self._items[spec] = _Item(loop)
            query = QueryRequest(spec, False, [prompt], [context], request.schema)
            self._nursery.start_soon(self._run, item, query)
            accepted += 1
        loop.calls += accepted
        return answer({"accepted": accepted})

    async def _run(self, item: _Item, query: QueryRequest) -> None:
        with item.scope:
            try:
                item.reply = await self._ask(query)
            except Exception as exc:  # not the nursery's: the execution's, if it collects it
                item.failure = exc
        item.done.set()

    async def collect(self, request: CollectRequest) -> BridgeAnswer:
        """The answer of speculative call ``spec``, when it comes."""
        item = self._items.get(request.spec)
        if item is None:
            return refusal(_UNSENT, "unsent")
        await item.done.wait()
        del self._items[request.spec]
        if item.failure is not None:
            raise item.failure
        reply = item.reply
        if reply is None or reply["kind"] == "budget":
            return refusal(_UNSENT, "unsent")  # it never went: the code asks it itself
        item.loop.used += 1
        return reply

    def cancel(self, request: CancelRequest) -> BridgeAnswer:
        """Cancel calls the code will not use; report the loop if it is over."""
        cancelled = self._drop(request.spec)
        if request.end:
            self._report(request.loop)
        return answer({"cancelled": cancelled})

    def close(self) -> None:
        """The execution is over: cancel what is left, report the loops still open."""
        self._drop(list(self._items))
        for loop_id in list(self._loops):
            self._report(loop_id)

    def _drop(self, specs: list[int]) -> int:
        """Forget ``specs``, cancelling those not answered yet; how many were cancelled."""
        cancelled = 0
        for spec in specs:
            item = self._items.pop(spec, None)
            if item is None:
                continue
            self._given_up += 1
            if not item.done.is_set():
                item.scope.cancel()
                item.loop.cancelled += 1
                cancelled += 1
        return cancelled

    def _report(self, loop_id: int) -> None:
        loop = self._loops.pop(loop_id, None)
        if loop is None or not loop.calls:
            return
        call = self._call
        self._events.emit(LoopBatched(
            call_id=call.call_id, parent_id=call.parent_id, depth=call.depth, loop=loop_id,
            line=loop.line, calls=loop.calls, used=loop.used, cancelled=loop.cancelled,
            window=self.window, duration_s=round(self._events.now() - loop.started, 6),
        ))

