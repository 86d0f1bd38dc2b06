"""Adaptive concurrency for limits nobody told us (AIMD on the sub lane).

Until the provider pushes back, the configured cap is used in full: a fan-out
never pays a slow start when nothing is wrong.  On overload (429/503/529, or an
attempt that timed out: a server with one slot queues the rest) the
sub lane's capacity is halved — at most once per round-trip time, so one burst
of 429s from requests already in flight does not collapse it to 1 — and then
grows back by one permit per round trip of successes, never above the
configured cap.  Every change is reported through ``on_change``.

It is the one writer of the limiter's numbers.  Workers sharing a journal's
``--max-concurrent`` give each process a *share* (:meth:`AdaptiveCapacity.share`):
that moves the ceiling the window grows within, never the window above where
the controller put it, so a cut made behind a hidden cap survives every
recount of the live workers.

A refusal is also a measurement.  The requests that were in flight beside it
and were *not* refused themselves were being served while the provider
refused: behind a hidden concurrency cap that is the cap.  So once every one
of them has come back (or its back-off ends first, whichever is sooner; it
asks for a permit again only after) the capacity drops to that count, if
lower, and the level above it is remembered as refused.  A first wave of 16
against a cap of 3 therefore comes back at 3, not 8, as soon as the first 3
are answered — and a burst where every request in flight was refused (a rate
limit, not a cap) measures nothing and only halves.

Growing back stops short of the level that was refused: the last permit up to
the window at which the provider pushed back grows ``patience`` times slower, and
``patience`` grows fourfold each time that level is refused again (up to 256), and
such a refused probe steps back one permit instead of halving.  Behind a
hidden concurrency cap C this settles at C instead of cycling C+1 → C/2 → C+1
(one 429 every few round trips); once the old level holds, probing speeds up
again.  Nothing grows while a refused request backs off (:meth:`backing_off`):
the permits it and the others refused with it left are not free room, they
come back for them.  The RTT starts as the first measured round trip, not a
guess.

Several workers behind one hidden cap see only their own requests, and one of
them can lose every request of a wave to the others, which then hold the whole
cap for good (its retries find it full; theirs never are).  So with other
workers on the provider: a worker refused with nothing of its own served sends
one request at a time until it gets back in; and a worker makes room for each
worker that joins — at once when the provider's limit already binds (kept a
back-off long, for the newcomer's retries), else at its first measurement.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from rlm._traffic.limiter import TieredLimiter

__all__ = ["AdaptiveCapacity"]

ChangeHook = Callable[[int, int, str], None]

_FIRST_PATIENCE = 4.0
_MAX_PATIENCE = 256.0


class AdaptiveCapacity:
    """Drives ``limiter.sub_limit`` from request outcomes."""

    def __init__(
        self,
        limiter: TieredLimiter,
        *,
        enabled: bool = True,
        decrease_factor: float = 0.5,
        on_change: ChangeHook | None = None,
    ) -> None:
        self._limiter = limiter
        self.enabled = enabled
        self._factor = decrease_factor
        self._ceiling = limiter.total - limiter.reserved_root
        self._window = float(self._ceiling)  # fractional capacity; the limiter gets floor()
        self._rtt = 1.0
        self._measured = False
        self._last_decrease = -float("inf")
        self._on_change = on_change
        self._refused_at: float | None = None  # the window the provider last pushed back at
        self._patience = _FIRST_PATIENCE
        self._unheeded = 0  # overloads within a round trip of the last decrease
        self._sent = 0  # numbers sub requests in flight, for the refusal measurement
        self._out: set[int] = set()  # sub requests in flight
        self._refused: set[int] = set()  # refused requests some pending measurement may name
        self._beside: dict[object, frozenset[int]] = {}  # per refusal: who was in flight beside
        # Per refusal: those beside it still in flight, and set once none is.
        self._awaited: dict[object, tuple[set[int], trio.Event]] = {}
        self.decreases = 0
        self._workers = 1  # processes sharing the provider (see share)
        self._owed = 0  # permits to leave to workers that joined, at the next measurement
        self._quiet_until = -float("inf")  # no growth while refused requests back off
        self._hold = 1.0  # how long the last refused request backed off

    @property
    def capacity(self) -> int:
        return self._limiter.sub_limit

    def share(self, total: int, workers: int = 1) -> None:
        """Make ``total`` permits this process's part of the configured ones.

        The limiter's total becomes ``total`` and the sub lane's ceiling follows.
        A window the provider never cut (or that grew all the way back) follows the
        ceiling up or down; a cut window only comes down to a lower ceiling, and
        grows back as before, one permit per round trip of successes.
        """
        limiter = self._limiter
        joined, self._workers = max(0, workers - self._workers), max(1, workers)
        total = max(total, limiter.reserved_root + 1)
        ceiling = total - limiter.reserved_root
        uncut = self._window >= self._ceiling
        before = limiter.sub_limit  # a lower total lowers it at once
        limiter.total = total
        self._ceiling = ceiling
        if uncut:
            self._window = float(ceiling)
            self._owed += joined  # left at the first measurement
        else:
            # The provider's limit binds: make room for the new workers now, and keep
            # it for them a back-off long (their first requests come back for it).
            self._window = max(1.0, min(self._window - joined, float(ceiling)))
            if joined:
                self._quiet_until = max(self._quiet_until, trio.current_time() + self._hold)
        self._apply("share", before)

    def sending(self) -> int:
        """A sub request goes out: its number, to hand back to ``returned``."""
        self._sent += 1
        self._out.add(self._sent)
        return self._sent

    def returned(self, number: int) -> None:
        self._out.discard(number)
        for still_out, all_back in self._awaited.values():
            still_out.discard(number)
            if not still_out:
                all_back.set()

    def refused(self, number: int, key: object) -> None:
        """Sub request ``number`` was refused as overload; ``measure(key)`` once
        :meth:`answered` returns or its back-off ends (or ``forget(key)`` when it is
        not retried)."""
        self._refused.add(number)
        beside = self._beside[key] = frozenset(self._out - {number})
        all_back = trio.Event()
        if not beside:
            all_back.set()
        self._awaited[key] = (set(beside), all_back)

    async def answered(self, key: object) -> None:
        """Wait until every request in flight beside refusal ``key`` has come back."""
        awaited = self._awaited.get(key)
        if awaited is not None:
            await awaited[1].wait()

    def forget(self, key: object) -> None:
        self._beside.pop(key, None)
        self._awaited.pop(key, None)
        if not self._beside:
            self._refused.clear()

    def backing_off(self, until: float) -> None:
        """A refused request backs off until ``until``: grow nothing before then.

        The permits it (and others refused with it, here or in other workers)
        left are not free room: they come back for them.
        """
        self._quiet_until = max(self._quiet_until, until)
        self._hold = max(until - trio.current_time(), 0.0)

    def measure(self, key: object) -> bool:
        """Those in flight beside refusal ``key`` that were not refused too were
        served — the capacity goes down to their count.

        Returns True when no one beside it was served: a rate limit, not a
        concurrency cap, and the capacity is left as it is — unless other workers
        share the provider: they may hold all of it, so this one sends one request
        at a time until it gets back in.
        """
        beside = self._beside.get(key)
        self.forget(key)
        if beside is None or not self.enabled:
            return False
        served = sum(1 for number in beside if number not in self._refused)
        if served < 1:
            if self._workers > 1 and self._window > 1:
                self._window, self._unheeded = 1.0, 0
                self._apply("overload")
            return True  # everyone was refused: a rate limit, or the others' cap
        level = float(served + 1)
        # Room owed to workers that joined: the first wave of each may have lost every
        # request to this one, and would never get back in.
        served, self._owed = max(1, served - self._owed), 0
        if self._refused_at is None or level < self._refused_at:
            self._refused_at = level
        if served < self._window:
            self._window = float(served)
            self._unheeded = 0  # the measurement accounts for the refusals it saw
            self._apply("overload")
        return False

    def observe_latency(self, latency_s: float) -> None:
        """Feed a successful round trip (EWMA) so decreases are spaced by one RTT."""
        sample = max(latency_s, 0.001)
        self._rtt = 0.8 * self._rtt + 0.2 * sample if self._measured else sample
        self._measured = True

    def on_success(self) -> None:
        if not self.enabled or self._window >= self._ceiling:
            return
        if trio.current_time() < self._quiet_until:
            return
        # +1 permit per window's worth of successes: one permit per round trip.
        step = 1.0 / max(self._window, 1.0)
        refused = self._refused_at
        if refused is not None and self._window + 1.0 >= refused:
            # The whole last permit up to the refused level, not just the step that
            # crosses it, comes ``patience`` times slower: a probe every few round trips
            # (from all the workers sharing the provider together, not from each).
            step /= self._patience
        self._window = min(float(self._ceiling), self._window + step)
        if refused is not None and self._window >= refused + 1:
            self._refused_at, self._patience = None, _FIRST_PATIENCE  # that level holds now
        self._apply("increase")

    def on_overload(self, now: float) -> None:
        if not self.enabled:
            return
        if now - self._last_decrease < self._rtt:
            self._unheeded += 1
            return
        first = self._last_decrease == -float("inf")
        self._last_decrease = now
        self.decreases += 1
        level = float(int(self._window))
        if self._refused_at is not None and level >= self._refused_at:
            # A slow probe of a level refused before was refused again: step back
            # below it (the level under it held) and probe it a quarter as often.
            self._patience = min(_MAX_PATIENCE, self._patience * 4)
            self._window = max(1.0, level - 1.0)
        else:
            window = self._window * self._factor
            if not first:
                # Still refused one round trip after a decrease: the refusals not
                # acted on since say how far over the limit the window still is.
                window = min(window, self._window - self._unheeded)
            self._window = max(1.0, window)
        self._unheeded = 0
        self._refused_at = level
        self._apply("overload")

    def _apply(self, reason: str, old: int | None = None) -> None:
        new = max(1, int(self._window))
        old = self._limiter.sub_limit if old is None else old
        self._limiter.sub_limit = new
        if new != old and self._on_change is not None:
            self._on_change(old, new, reason)
