"""``RLM.astream`` / ``RLM.avolley_stream``: a run's events, live, for ``async for``.

The run executes in a task beside the consumer; its events pass through one
bounded :class:`~rlm.streaming.StreamMerger`, so a consumer that reads slowly
slows the run's streams down.  Leaving the ``async with`` block (``break``,
an exception, cancellation) cancels the run: every sandbox is killed and
every HTTP connection closed before the block is left.

Why ``async with ... as events`` and not a bare ``async for``: the run's
tasks need a nursery that outlives each ``yield``, and an async generator
cannot own one (PEP 789); :func:`trio.as_safe_channel` runs the generator in
its own task inside the ``async with``, which is what makes leaving early safe.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import NoReturn

import trio

from rlm._events import Event
from rlm.errors import RLMError
from rlm.streaming.merger import StreamMerger

__all__ = ["EventStream", "stream_events"]


@trio.as_safe_channel
async def stream_events(
    start: Callable[[StreamMerger], Awaitable[object]], capacity: int
) -> AsyncGenerator[Event, None]:
    """Yield every event of ``start(merger)`` (a run or a volley); re-raise its failure last."""
    merger = StreamMerger(capacity)
    failure: list[RLMError] = []

    async def run() -> None:
        try:
            await start(merger)
        except RLMError as exc:
            failure.append(exc)
        finally:
            merger.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        async for event in merger:
            yield event
    if failure:
        raise failure[0]


class EventStream(AbstractAsyncContextManager[trio.abc.ReceiveChannel[Event]]):
    """What ``astream``/``avolley_stream`` return: ``async with`` it for the events.

    ``async for`` straight over it (the form other libraries use) raises a
    TypeError that shows the ``async with`` form, instead of Python's bare
    "'async for' requires an object with __aiter__ method".
    """

    def __init__(
        self, entry: str, events: AbstractAsyncContextManager[trio.abc.ReceiveChannel[Event]]
    ) -> None:
        self._entry = entry
        self._events = events

    async def __aenter__(self) -> trio.abc.ReceiveChannel[Event]:
        return await self._events.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self._events.__aexit__(exc_type, exc, tb)

    def __aiter__(self) -> NoReturn:
        raise TypeError(
            f"{self._entry}(...) is used with async with (leaving the block ends the run "
            f"cleanly): `async with model.{self._entry.rpartition('.')[2]}(...) as events: "
            "async for event in events: ...`"
        )
