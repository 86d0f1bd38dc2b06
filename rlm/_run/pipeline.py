"""Pipelined execution: run a reply's code blocks while the reply still streams.

A block starts as soon as its closing fence arrives; later blocks of the same
reply run after it, in order, one at a time, in the call's sandbox.  No block
runs after one that called FINAL or lost the sandbox (the rules of a step
executed after the reply, see ``Call._on_execute``).

A retried stream: when an attempt fails part-way, the blocks it already ran
have run (their effects are in the namespace and cannot be undone).  The next
attempt's blocks are matched by position: a block with the same code as the
one already run at that position is not run again (a deterministic model
repeats itself); from the first block that differs, blocks run afresh.

The executor task lives in the call's nursery; :meth:`finish` waits for it and
hands back what ran, :meth:`cancel` stops it (the running block's sandbox is
then discarded by the slot, as for any cancelled execution).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from rlm._run.parsing import BlockSplitter
from rlm._sandbox.launcher import ExecResult
from rlm.errors import RLMError

__all__ = ["BlockPipeline", "Ran"]


@dataclass(frozen=True, slots=True, eq=False)
class Ran:
    """One block that ran: its code, its result, and whether the sandbox was lost in it."""

    code: str
    result: ExecResult
    lost: bool


#: Runs one block (1-based ``index`` in its reply); returns its result and whether
#: the sandbox was lost while it ran.
RunBlock = Callable[[int, str], Awaitable[tuple[ExecResult, bool]]]


class BlockPipeline:
    """Feeds on a streaming reply (``on_text``) and runs its blocks as they close."""

    def __init__(self, run_block: RunBlock) -> None:
        self._run_block = run_block
        self._splitter = BlockSplitter()
        self._attempt = 0
        self._found = 0  # blocks found in the current attempt
        self._send, self._receive = trio.open_memory_channel[tuple[int, int, str]](math.inf)
        self._scope = trio.CancelScope()
        self._drained = trio.Event()
        self._error: RLMError | None = None
        self.ran: list[Ran] = []

    def start(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self._execute)

    async def on_text(self, text: str, attempt: int) -> None:
        """A piece of the reply; a new ``attempt`` starts the reply over."""
        if attempt != self._attempt:
            self._attempt, self._found = attempt, 0
            self._splitter = BlockSplitter()
        for code in self._splitter.feed(text):
            self._send.send_nowait((attempt, self._found, code))
            self._found += 1

    async def finish(self) -> list[Ran]:
        """Wait until every block found so far has run (or was skipped); what ran, in order.

        Re-raises an RLMError a block raised (e.g. a call that lost too many sandboxes).
        """
        for code in self._splitter.close():  # a block closed by the reply's last line
            self._send.send_nowait((self._attempt, self._found, code))
            self._found += 1
        self._send.close()
        await self._drained.wait()
        if self._error is not None:
            raise self._error
        return list(self.ran)

    def cancel(self) -> None:
        """Stop the executor (the reply failed for good, or the call is ending)."""
        self._send.close()
        self._scope.cancel()

    async def _execute(self) -> None:
        try:
            with self._scope:
                async for attempt, index, code in self._receive:
                    if attempt == self._attempt and self._error is None:
                        await self._maybe_run(index, code)
        finally:
            self._receive.close()
            self._drained.set()

    async def _maybe_run(self, index: int, code: str) -> None:
        ran = self.ran
        if index < len(ran):
            if ran[index].code == code:
                return  # a retried stream repeated a block that already ran
            del ran[index:]  # the reply went another way: earlier results are void
        if index != len(ran) or (ran and (ran[-1].result.final is not None or ran[-1].lost)):
            return  # an earlier block ended the step (FINAL, lost sandbox) or did not run
        try:
            result, lost = await self._run_block(index + 1, code)
        except RLMError as exc:
            self._error = exc
            return
        ran.append(Ran(code, result, lost))
