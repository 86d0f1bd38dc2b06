"""Rate pacing: GCRA for requests per minute and tokens per minute.

The Generic Cell Rate Algorithm keeps a *theoretical arrival time* (TAT) per
limit.  Sub-queries wait their turn in arrival order (one FIFO queue); the
request at the head sleeps until its slot, charges it — moving the TAT forward
by its cost — and hands the turn on.  So requests start evenly spaced, with no
thundering herd when a limit frees up, and a rate changed meanwhile applies to
every request not yet on its way (slots reserved ahead would keep the old
pace for all that were queued).

A rate the user gave is paced a little wider than asked (``JITTER_MARGIN``): a
provider enforcing it strictly (a token bucket with no burst, as some do per
second) refuses a request that arrives a millisecond early, and the network,
or a busy machine, delays consecutive requests by different amounts.  A
request that goes later than the margin absorbs pushes the next one back by as
much, as the provider's bucket, which saw it late, does.  A rate the provider
announced in its headers is paced as announced, each request charged from its
slot however late it went: a limit per minute, counted in buckets far wider
than one request's jitter.

By default there is no burst: the provider's bucket size is unknown, so
requests are spread evenly at the configured rate.  ``burst`` (in requests)
lets that many go back to back before spacing applies; a provider that
announces its limit also says how many requests it would take at once
(``AdaptiveRate`` adopts that as the burst).

Root-lane requests never queue behind sub-queries: they go at once and still
charge the limit, pushing later sub-queries back.  So the configured rate can
be passed by at most the root requests in flight.

With a known rate r and latency L, useful concurrency is r·L: more permits
than that only queue here.

The rates are set by one owner (:class:`~rlm._traffic.adaptive_rate.
AdaptiveRate`: the configured or learned limit, this worker's share of it, cut
after rate 429s); nothing else calls ``set_rpm``/``set_tpm``/``set_burst``.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

from rlm.providers.base import Lane

__all__ = ["JITTER_MARGIN", "Pacer", "PacerStatistics"]

#: A rate the user gave is paced this fraction wider than asked.
JITTER_MARGIN = 0.05


@dataclass(frozen=True, slots=True, eq=False)
class PacerStatistics:
    rpm: float | None
    tpm: float | None
    burst: int
    waits: int
    total_wait_s: float


class _Cell:
    """One GCRA limit: ``per_minute`` units, ``burst_units`` of them back to back,
    spaced ``margin`` wider than the rate."""

    def __init__(self, per_minute: float, burst_units: float, margin: float) -> None:
        self.interval = 60.0 / per_minute * (1.0 + margin)
        # With a margin (a rate that may be enforced strictly), a request that goes
        # later than its slot by more than the margin absorbs pushes the next slot
        # back by as much, as the provider's bucket, which saw it late, does.
        # Without one (an announced per-minute limit), slots keep their schedule.
        self.slack = 60.0 / per_minute * margin if margin > 0 else float("inf")
        self.tolerance = max(0.0, burst_units - 1.0) * self.interval
        self.tat = -float("inf")
        self.last_units = 0.0  # what the last request charged

    def start(self, now: float) -> float:
        """The earliest time a request may go, charging nothing."""
        return max(now, self.tat - self.tolerance)

    def charge(self, slot: float, went: float, units: float) -> None:
        """A request of ``units`` took the slot at ``slot`` and went at ``went``."""
        self.tat = max(self.tat, slot, went - self.slack) + units * self.interval
        self.last_units = units


class Pacer:
    """Spaces requests to stay under ``rpm`` and ``tpm``.  Either may be ``None``.

    ``margin`` is how much wider than the rate requests are spaced (see the
    module docstring); ``set_rpm``/``set_tpm`` take their own.
    """

    def __init__(
        self,
        *,
        rpm: float | None = None,
        tpm: float | None = None,
        burst: int = 1,
        margin: float = JITTER_MARGIN,
    ) -> None:
        self.burst = burst
        self._requests = _Cell(rpm, burst, margin) if rpm else None
        self._tokens = _Cell(tpm, 0, margin) if tpm else None
        self.rpm = rpm
        self.tpm = tpm
        self._turn = trio.Lock()  # FIFO: one sub-query at a time waits for its slot
        self._waits = 0
        self._total_wait = 0.0

    def set_rpm(self, rpm: float, *, margin: float = JITTER_MARGIN) -> None:
        self._requests = _replace(self._requests, rpm, self.burst, margin)
        self.rpm = rpm

    def set_burst(self, burst: int) -> None:
        """Let ``burst`` requests go back to back (the schedule so far is kept)."""
        self.burst = burst
        if self._requests is not None:
            self._requests.tolerance = max(0.0, burst - 1.0) * self._requests.interval

    def hold_to(self, remaining: float) -> None:
        """Let no more than ``remaining`` requests (and one, for the count being a moment
        old) go at once from now: the provider says that is what its bucket holds, and
        other clients on the same key drain it too.  Never loosens the schedule."""
        cell = self._requests
        if cell is not None:
            now = trio.current_time()
            cell.tat = max(cell.tat, now + cell.tolerance - remaining * cell.interval)

    def set_tpm(self, tpm: float, *, margin: float = JITTER_MARGIN) -> None:
        self._tokens = _replace(self._tokens, tpm, 0, margin)
        self.tpm = tpm

    def _cells(self) -> list[_Cell]:
        return [cell for cell in (self._requests, self._tokens) if cell is not None]

    def _charge(self, slot: float, tokens: int) -> None:
        went = trio.current_time()
        if self._requests is not None:
            self._requests.charge(slot, went, 1)
        if self._tokens is not None:
            self._tokens.charge(slot, went, tokens)

    async def wait(self, tokens: int, lane: Lane) -> float:
        """Wait for a slot for one request of about ``tokens`` tokens, and charge it.

        Returns the seconds waited.  Cancelled while waiting, the request is not
        charged: only a request that goes counts against the rate.
        """
        if lane == "root" or not self._cells():
            self._charge(trio.current_time(), tokens)
            await trio.lowlevel.checkpoint()
            return 0.0
        queued = trio.current_time()
        async with self._turn:
            slot = max(cell.start(queued) for cell in self._cells())
            while slot > trio.current_time():
                await trio.sleep_until(slot)
                # A rate cut while this request slept moves its slot: look again (from
                # the slot: when this task woke late is the charge's business).
                slot = max(cell.start(slot) for cell in self._cells())
            self._charge(slot, tokens)
        waited = trio.current_time() - queued
        if waited > 0:
            self._waits += 1
            self._total_wait += waited
        return waited

    def statistics(self) -> PacerStatistics:
        return PacerStatistics(self.rpm, self.tpm, self.burst, self._waits, self._total_wait)


def _replace(old: _Cell | None, per_minute: float, burst: float, margin: float) -> _Cell:
    """A cell with a new rate that keeps the old one's schedule (no free burst on
    change): the last request is spaced from the next at the new rate."""
    cell = _Cell(per_minute, burst, margin)
    if old is not None:
        cell.tat = old.tat + old.last_units * (cell.interval - old.interval)
        cell.last_units = old.last_units
    return cell
