"""Rate pacing: GCRA for requests per minute and tokens per minute.

The Generic Cell Rate Algorithm keeps a *theoretical arrival time* (TAT) per
limit.  A request reserves its slot first — moving the TAT forward by its
cost — and only then sleeps until the slot, so waiters start in the order they
arrived, evenly spaced, with no thundering herd when a limit frees up.

By default there is no burst: the provider's bucket size is unknown, so
requests are spread evenly at the configured rate.  ``burst`` (in requests)
lets that many go back to back before spacing applies.

Root-lane requests never queue behind sub-queries' reservations: they go at
once and still charge the limit, pushing later sub-queries back.  So the
configured rate can be passed by at most the root requests in flight.

With a known rate r and latency L, useful concurrency is r·L: more permits
than that only queue here.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

from rlm.providers.base import Lane

__all__ = ["Pacer", "PacerStatistics"]


@dataclass(frozen=True, slots=True, eq=False)
class PacerStatistics:
    rpm: float | None
    tpm: float | None
    burst: int
    waits: int
    total_wait_s: float


class _Cell:
    """One GCRA limit: ``rate`` units per second, ``tolerance`` seconds of burst."""

    def __init__(self, per_minute: float, burst_units: float) -> None:
        self.interval = 60.0 / per_minute
        self.tolerance = max(0.0, burst_units - 1.0) * self.interval
        self.tat = -float("inf")

    def reserve(self, now: float, units: float, *, queue: bool) -> float:
        """Charge ``units`` and return the time the request may start."""
        start = max(now, self.tat - self.tolerance) if queue else now
        self.tat = max(self.tat, start) + units * self.interval
        return start


class Pacer:
    """Spaces requests to stay under ``rpm`` and ``tpm``.  Either may be ``None``.

    The limits may be changed at run time (``set_rpm``/``set_tpm``), e.g. when
    response headers reveal them.
    """

    def __init__(self, *, rpm: float | None = None, tpm: float | None = None, burst: int = 1):
        self.burst = burst
        self._requests = _Cell(rpm, burst) if rpm else None
        self._tokens = _Cell(tpm, 0) if tpm else None
        self.rpm = rpm
        self.tpm = tpm
        self._waits = 0
        self._total_wait = 0.0

    def set_rpm(self, rpm: float) -> None:
        self._requests = _replace(self._requests, rpm, self.burst)
        self.rpm = rpm

    def set_tpm(self, tpm: float) -> None:
        self._tokens = _replace(self._tokens, tpm, 0)
        self.tpm = tpm

    async def wait(self, tokens: int, lane: Lane) -> float:
        """Reserve a slot for one request of about ``tokens`` tokens; sleep until it.

        Returns the seconds slept.  If cancelled while sleeping the slot stays
        spent (a conservative choice: the rate is never exceeded).
        """
        now = trio.current_time()
        queue = lane != "root"
        start = now
        if self._requests is not None:
            start = max(start, self._requests.reserve(now, 1, queue=queue))
        if self._tokens is not None:
            start = max(start, self._tokens.reserve(now, tokens, queue=queue))
        delay = start - now
        if delay > 0:
            self._waits += 1
            self._total_wait += delay
            await trio.sleep_until(start)
        else:
            await trio.lowlevel.checkpoint()
        return max(0.0, delay)

    def statistics(self) -> PacerStatistics:
        return PacerStatistics(self.rpm, self.tpm, self.burst, self._waits, self._total_wait)


def _replace(old: _Cell | None, per_minute: float, burst: float) -> _Cell:
    """A cell with a new rate that keeps the old one's schedule (no free burst on change)."""
    cell = _Cell(per_minute, burst)
    if old is not None:
        cell.tat = old.tat
    return cell
