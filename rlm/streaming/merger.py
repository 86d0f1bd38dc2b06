"""The stream merger: events from every active stream, in arrival order, bounded.

Every streaming request of a run (root steps, sub-queries, child calls, volley
tasks) publishes its text pieces into one merger, and one consumer (the CLI's
live display, ``RLM.astream``) reads them in the order they arrived: there is
no round-robin, so a slow stream never holds a fast one back.

Bounded: a published event waits while ``capacity`` events are buffered, so a
consumer that falls behind slows the producers (and, through them, the TCP
reads of their streams) instead of growing memory.  Waiting producers are
served first come, first served.  Events *emitted* synchronously (a code
block ran, a call finished, ...) cannot wait; they are added at once, in
order with the rest.  They are few per step and are kept by the run's event
bus anyway, so they never add unbounded memory of their own.

Why not a trio memory channel: one ordered buffer must take both awaited and
synchronous puts, and a full memory channel refuses ``send_nowait`` — the
synchronous event would be lost or reordered.  The waiting is trio's own
:class:`trio.lowlevel.ParkingLot`, the primitive trio's channels are built on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import trio

from rlm._events import Event

__all__ = ["StreamMerger", "drain"]


class StreamMerger:
    """Many producers, one consumer, at most ``capacity`` published events buffered.

    Iterate it (``async for event in merger``) until :meth:`close`; events put
    after ``close`` are dropped (the consumer has gone, and a producer must
    never block on it).  ``high_water`` is the most events ever buffered at
    once and ``producer_waits`` how often a producer had to wait for room.
    """

    def __init__(self, capacity: int = 256) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.high_water = 0
        self.producer_waits = 0
        self._items: deque[Event] = deque()
        self._room = trio.lowlevel.ParkingLot()  # producers waiting for a free slot
        self._ready = trio.lowlevel.ParkingLot()  # the consumer waiting for an event
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._items)

    async def put(self, event: Event) -> None:
        """Add ``event``, waiting while the buffer is full.

        Cancellation while waiting leaves the event out and the buffer as it was.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while len(self._items) >= self.capacity and not self._closed:
            self.producer_waits += 1
            await self._room.park()
        self._add(event)
        await trio.lowlevel.cancel_shielded_checkpoint()

    def put_nowait(self, event: Event) -> None:
        """Add ``event`` now, even past ``capacity`` (for synchronous emitters)."""
        self._add(event)

    def _add(self, event: Event) -> None:
        if self._closed:
            return
        self._items.append(event)
        self.high_water = max(self.high_water, len(self._items))
        self._ready.unpark()

    async def get(self) -> Event:
        """The oldest buffered event; raises ``trio.EndOfChannel`` once closed and empty.

        The event is taken with no schedule point after it, so the caller hands it
        on before any other task runs: nothing :meth:`take_nowait` returns in
        between can overtake it.
        """
        await trio.lowlevel.checkpoint()
        while not self._items:
            if self._closed:
                raise trio.EndOfChannel
            await self._ready.park()
        event = self._items.popleft()
        if len(self._items) < self.capacity:
            self._room.unpark()
        return event

    def take_nowait(self) -> list[Event]:
        """Every event buffered now, oldest first, taken out of the buffer.

        For a consumer that must catch up at once, before it writes something
        that has to come after them; waiting producers get the freed room.
        """
        taken = list(self._items)
        self._items.clear()
        self._room.unpark_all()
        return taken

    def close(self) -> None:
        """No more events: the consumer reads what is buffered, then the iteration ends.

        Producers waiting for room are released (their events are dropped).
        """
        self._closed = True
        self._room.unpark_all()
        self._ready.unpark_all()

    def __aiter__(self) -> StreamMerger:
        return self

    async def __anext__(self) -> Event:
        try:
            return await self.get()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None


async def drain(merger: StreamMerger, on_event: Callable[[Event], None]) -> None:
    """Hand every event of ``merger`` to ``on_event`` until it is closed and empty."""
    async for event in merger:
        on_event(event)
