"""The Python side of volleys, behind ``RLM.volley`` / ``avolley`` / ``iter_volley``."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import trio

from rlm._config import VolleyOptions
from rlm._run.context import Context
from rlm.errors import UsageError
from rlm.volley.engine import Volley
from rlm.volley.records import TaskResult, VolleyResult
from rlm.volley.tasks import TaskInput, number_tasks

__all__ = ["VolleyStream", "make_volley", "stream_volley"]


def make_volley(
    tasks: Iterable[TaskInput],
    context: Context | None,
    *,
    timeout: float | None = None,
    cache_warm: bool = True,
    rlm: bool = False,
    on_result: Callable[[TaskResult], None] | None = None,
    **engine: Any,
) -> Volley:
    """A Volley from API arguments (``engine`` are Volley's own keyword arguments).

    ``rlm`` makes every task a whole RLM call over ``context`` (``rlm volley --rlm``).
    """
    if isinstance(tasks, str):
        raise UsageError("tasks must be a list of prompts (or task mappings), not one string")
    documents = [] if context is None else [context] if isinstance(context, str) else context
    if not all(isinstance(doc, str) for doc in documents):
        raise UsageError("context must be a str or a list of str")
    options = VolleyOptions(cache_warm=cache_warm, mode="rlm" if rlm else "completion")
    if timeout is not None:  # each task's limit: the run setting, for this volley
        engine["config"] = dataclasses.replace(engine["config"], timeout=timeout)
    return Volley(
        tasks=number_tasks(tasks, none="no tasks: give a list of at least one prompt that is "
                                        "not blank (or task mappings with a 'prompt')"),
        context=documents,
        options=options,
        on_result=on_result,
        **engine,
    )


class VolleyStream:
    """Task results in completion order; ``result`` is the whole volley once it ended."""

    def __init__(self, receive: trio.MemoryReceiveChannel[TaskResult]) -> None:
        self._receive = receive
        self.result: VolleyResult | None = None

    def __aiter__(self) -> VolleyStream:
        return self

    async def __anext__(self) -> TaskResult:
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None


@asynccontextmanager
async def stream_volley(build: Callable[[Callable[[TaskResult], None]], Volley],
                        ) -> AsyncIterator[VolleyStream]:
    """Run the volley ``build(on_result)`` makes in the background and yield its results.

    Leaving the ``async with`` before the volley ended interrupts it (in-flight
    tasks are cancelled) and waits for it to stop.  Results are buffered without
    bound: each is small, and the whole volley's result holds them anyway.
    """
    send, receive = trio.open_memory_channel[TaskResult](math.inf)
    run = build(send.send_nowait)
    stream = VolleyStream(receive)

    async def drive() -> None:
        async with send:
            stream.result = await run.run()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drive)
        try:
            yield stream
        finally:
            if stream.result is None:
                run.interrupt()
