"""Tiered permits: one global cap, with permits reserved for the root lane.

A total of ``total`` requests may be in flight.  Sub-queries may hold at most
``total - reserved_root`` of them, so ``reserved_root`` permits are always left
for root steps: a burst of sub-queries can never make the root loop wait
behind it.  A root step takes any free permit.  Waiters are served FIFO within
their lane, and a freed permit is handed directly to the next waiter (no
thundering herd, no barging).

Like ``trio.CapacityLimiter``, the limiter knows its holders: ``acquire``
hands back a :class:`Permit` that identifies the holding, and ``release``
takes exactly that permit back.  Releasing a permit twice, or one this limiter
never handed out, raises ``RuntimeError`` instead of silently freeing a
permit someone else holds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

from rlm.providers.base import Lane

__all__ = ["LimiterStatistics", "Permit", "TieredLimiter"]


@dataclass(frozen=True, slots=True, eq=False)
class Permit:
    """One permit held in ``lane``: give it back to :meth:`TieredLimiter.release` once.

    Compared by identity: two holdings in the same lane are different permits.
    """

    lane: Lane
    number: int


@dataclass(slots=True, eq=False)
class _Waiter:
    granted: trio.Event
    permit: Permit | None = None  # set when a freed permit is handed to this waiter


@dataclass(frozen=True, slots=True, eq=False)
class LimiterStatistics:
    total: int
    reserved_root: int
    in_flight: int
    in_flight_sub: int
    waiting_root: int
    waiting_sub: int
    sub_limit: int


class TieredLimiter:
    """A capacity limiter with a reserved root lane.

    ``total`` and ``sub_limit`` may be reassigned at run time (the hooks for
    adaptive limits and worker shares: :class:`~rlm._traffic.adaptive.
    AdaptiveCapacity` is the one writer of both).  Each setter changes its own
    number only: raising ``total`` never raises ``sub_limit``, which is at most
    ``total - reserved_root`` whatever was set.  Lowering either never revokes
    permits already held, it only delays new ones.
    """

    def __init__(self, total: int, reserved_root: int) -> None:
        if total < 1 or not 0 <= reserved_root < total:
            raise ValueError("need total >= 1 and 0 <= reserved_root < total")
        self._total = total
        self._reserved = reserved_root
        self._in_flight = 0
        self._in_flight_sub = 0
        self._sub_limit = total - reserved_root
        self._penalty = 0
        self._waiters: dict[Lane, deque[_Waiter]] = {"root": deque(), "sub": deque()}
        self._held: set[Permit] = set()
        self._handed = 0  # numbers the permits handed out

    @property
    def total(self) -> int:
        return self._total

    @total.setter
    def total(self, value: int) -> None:
        if value < 1 or self._reserved >= value:
            raise ValueError(f"total must exceed the {self._reserved} reserved root permits")
        self._total = value
        self._wake()

    @property
    def reserved_root(self) -> int:
        return self._reserved

    @property
    def sub_limit(self) -> int:
        """Permits the sub lane may hold: at most ``total - reserved_root``.

        Lowered by adaptive concurrency when the provider pushes back, and
        raised by it as the provider takes more.
        """
        return min(self._sub_limit, self._total - self._reserved)

    @sub_limit.setter
    def sub_limit(self, value: int) -> None:
        if value < 1:
            raise ValueError("the sub lane needs at least one permit")
        self._sub_limit = value
        self._wake()

    def statistics(self) -> LimiterStatistics:
        return LimiterStatistics(
            total=self._total,
            reserved_root=self._reserved,
            in_flight=self._in_flight,
            in_flight_sub=self._in_flight_sub,
            waiting_root=len(self._waiters["root"]),
            waiting_sub=len(self._waiters["sub"]),
            sub_limit=self.sub_limit,
        )

    def _free_for(self, lane: Lane) -> bool:
        if self._in_flight >= self._total:
            return False
        return lane == "root" or self._in_flight_sub + self._penalty < self.sub_limit

    def _take(self, lane: Lane) -> Permit:
        self._in_flight += 1
        if lane == "sub":
            self._in_flight_sub += 1
        self._handed += 1
        permit = Permit(lane, self._handed)
        self._held.add(permit)
        return permit

    def _wake(self) -> None:
        for lane in ("root", "sub"):
            waiters = self._waiters[lane]
            while waiters and self._free_for(lane):
                waiter = waiters.popleft()
                waiter.permit = self._take(lane)
                waiter.granted.set()

    async def acquire(self, lane: Lane) -> Permit:
        """Wait for a permit in ``lane`` and return it (for :meth:`release`).

        Cancellation-safe, like ``trio.CapacityLimiter.acquire_on_behalf_of``:
        a cancelled acquire never holds a permit.  Cancellation is checked
        before a free permit is taken, and the checkpoint after taking it is
        shielded, so no cancellation can land between the take and the return.
        On cancellation while waiting, the task leaves the queue; if a permit
        had already been handed to it, the permit is passed on.
        """
        waiters = self._waiters[lane]
        if not waiters and self._free_for(lane):
            await trio.lowlevel.checkpoint_if_cancelled()  # yields only to raise Cancelled
            permit = self._take(lane)
            await trio.lowlevel.cancel_shielded_checkpoint()
            return permit
        waiter = _Waiter(trio.Event())
        waiters.append(waiter)
        try:
            await waiter.granted.wait()
        except BaseException:
            if waiter.permit is not None:
                self.release(waiter.permit)
            else:
                waiters.remove(waiter)
            raise
        assert waiter.permit is not None  # granted is set only with a permit
        return waiter.permit

    def release(self, permit: Permit) -> None:
        """Give back ``permit``; the next waiter that fits gets it at once.

        Raises ``RuntimeError`` if this limiter does not hold ``permit`` (it was
        released already, or never acquired here): the counts stay as they were.
        """
        if permit not in self._held:
            raise RuntimeError(
                f"release of a {permit.lane}-lane permit this limiter does not hold "
                "(released twice, or never acquired here)"
            )
        self._held.remove(permit)
        self._in_flight -= 1
        if permit.lane == "sub":
            self._in_flight_sub -= 1
        self._wake()

    def hold_back(self) -> None:
        """Keep one sub permit from waiters until :meth:`give_back`.

        Called by a request refused as overload while it still holds its permit:
        the permit it then releases is not handed to a waiter that would only be
        refused too, while it backs off.
        """
        self._penalty += 1

    def give_back(self) -> None:
        """End one :meth:`hold_back`: the permit goes to the next waiter that fits."""
        if self._penalty < 1:
            raise RuntimeError("give_back without a hold_back")
        self._penalty -= 1
        self._wake()

    @asynccontextmanager
    async def permit(self, lane: Lane) -> AsyncIterator[Permit]:
        """Hold one permit in ``lane`` for the body of the ``async with``."""
        held = await self.acquire(lane)
        try:
            yield held
        finally:
            self.release(held)
