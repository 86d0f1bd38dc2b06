"""Rate pacing: GCRA for requests per minute and tokens per minute.

The Generic Cell Rate Algorithm keeps a *theoretical arrival time* (TAT) per
limit.  Sub-queries wait their turn in arrival order (one FIFO queue); the
request at the head sleeps until its slot, then charges it — moving the TAT
forward by its cost from the moment it actually goes — and hands the turn on.
So requests start evenly spaced, with no thundering herd when a limit frees
up; a rate changed meanwhile applies to every request not yet on its way; and
a request that woke late (a busy machine) pushes the next one back by as much,
as the provider's own bucket, which saw it late, does.

Requests are spaced a little wider than the rate (``JITTER_MARGIN``): a
provider enforcing the rate strictly (a token bucket with no burst) refuses a
request that arrives a millisecond early, and the network delays consecutive
requests by different amounts.

By default there is no burst: the provider's bucket size is unknown, so
requests are spread evenly at the configured rate.  ``burst`` (in requests)
lets that many go back to back before spacing applies.

Root-lane requests never queue behind sub-queries: they go at once and still
charge the limit, pushing later sub-queries back.  So the configured rate can
be passed by at most the root requests in flight.

With a known rate r and latency L, useful concurrency is r·L: more permits
than that only queue here.

The rates are set by one owner (:class:`~rlm._traffic.adaptive_rate.
AdaptiveRate`: the configured or learned limit, this worker's share of it, cut
after rate 429s); nothing else calls ``set_rpm``/``set_tpm``.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

from rlm.providers.base import Lane

__all__ = ["JITTER_MARGIN", "Pacer", "PacerStatistics"]

#: Requests are spaced this fraction wider than the rate asks.
JITTER_MARGIN = 0.05


@dataclass(frozen=True, slots=True, eq=False)
class PacerStatistics:
    rpm: float | None
    tpm: float | None
    burst: int
    waits: int
    total_wait_s: float


class _Cell:
    """One GCRA limit: ``per_minute`` units, ``burst_units`` of them back to back."""

    def __init__(self, per_minute: float, burst_units: float) -> None:
        self.interval = 60.0 / per_minute * (1.0 + JITTER_MARGIN)
        self.tolerance = max(0.0, burst_units - 1.0) * self.interval
        self.tat = -float("inf")
        self.last_units = 0.0  # what the last request charged

    def start(self, now: float) -> float:
        """The earliest time a request may go, charging nothing."""
        return max(now, self.tat - self.tolerance)

    def charge(self, now: float, units: float) -> None:
        """A request of ``units`` goes at ``now``."""
        self.tat = max(self.tat, now) + units * self.interval
        self.last_units = units


class Pacer:
    """Spaces requests to stay under ``rpm`` and ``tpm``.  Either may be ``None``."""

    def __init__(self, *, rpm: float | None = None, tpm: float | None = None, burst: int = 1):
        self.burst = burst
        self._requests = _Cell(rpm, burst) if rpm else None
        self._tokens = _Cell(tpm, 0) if tpm else None
        self.rpm = rpm
        self.tpm = tpm
        self._turn = trio.Lock()  # FIFO: one sub-query at a time waits for its slot
        self._waits = 0
        self._total_wait = 0.0

    def set_rpm(self, rpm: float) -> None:
        self._requests = _replace(self._requests, rpm, self.burst)
        self.rpm = rpm

    def set_tpm(self, tpm: float) -> None:
        self._tokens = _replace(self._tokens, tpm, 0)
        self.tpm = tpm

    def _cells(self) -> list[_Cell]:
        return [cell for cell in (self._requests, self._tokens) if cell is not None]

    def _charge(self, now: float, tokens: int) -> None:
        if self._requests is not None:
            self._requests.charge(now, 1)
        if self._tokens is not None:
            self._tokens.charge(now, tokens)

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
            while True:  # a rate cut while this request slept moves its slot: look again
                now = trio.current_time()
                start = max(cell.start(now) for cell in self._cells())
                if start <= now:
                    break
                await trio.sleep_until(start)
            self._charge(now, tokens)
        waited = now - queued
        if waited > 0:
            self._waits += 1
            self._total_wait += waited
        return waited

    def statistics(self) -> PacerStatistics:
        return PacerStatistics(self.rpm, self.tpm, self.burst, self._waits, self._total_wait)


def _replace(old: _Cell | None, per_minute: float, burst: float) -> _Cell:
    """A cell with a new rate that keeps the old one's schedule (no free burst on
    change): the last request is spaced from the next at the new rate."""
    cell = _Cell(per_minute, burst)
    if old is not None:
        cell.tat = old.tat + old.last_units * (cell.interval - old.interval)
        cell.last_units = old.last_units
    return cell
