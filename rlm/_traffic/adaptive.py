"""Adaptive concurrency for limits nobody told us (AIMD on the sub lane).

Until the provider pushes back, the configured cap is used in full: a fan-out
never pays a slow start when nothing is wrong.  On overload (429/503/529) the
sub lane's capacity is halved — at most once per round-trip time, so one burst
of 429s from requests already in flight does not collapse it to 1 — and then
grows back by one permit per round trip of successes, never above the
configured cap.  Every change is reported through ``on_change``.

A refusal is also a measurement.  The requests that were in flight beside it
and were *not* refused themselves by the time its back-off ends were being
served while the provider refused: behind a hidden concurrency cap that is the
cap.  So when a refused request's back-off ends (before it asks for a permit
again) the capacity drops to that count, if lower, and the level above it is
remembered as refused.  A first wave of 16 against a cap of 3 therefore comes
back at 3, not 8 — and a burst where every request in flight was refused (a
rate limit, not a cap) measures nothing and only halves.

Growing back stops short of the level that was refused: the last permit up to
the window at which the provider pushed back grows ``patience`` times slower, and
``patience`` grows fourfold each time that level is refused again (up to 256), and
such a refused probe steps back one permit instead of halving.  Behind a
hidden concurrency cap C this settles at C instead of cycling C+1 → C/2 → C+1
(one 429 every few round trips); once the old level holds, probing speeds up
again.  The RTT starts as the first measured round trip, not a guess.
"""

from __future__ import annotations

from collections.abc import Callable

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
        self.decreases = 0

    @property
    def capacity(self) -> int:
        return self._limiter.sub_limit

    def sending(self) -> int:
        """A sub request goes out: its number, to hand back to ``returned``."""
        self._sent += 1
        self._out.add(self._sent)
        return self._sent

    def returned(self, number: int) -> None:
        self._out.discard(number)

    def refused(self, number: int, key: object) -> None:
        """Sub request ``number`` was refused as overload; ``measure(key)`` when its
        back-off ends (or ``forget(key)`` when it is not retried)."""
        self._refused.add(number)
        self._beside[key] = frozenset(self._out - {number})

    def forget(self, key: object) -> None:
        self._beside.pop(key, None)
        if not self._beside:
            self._refused.clear()

    def measure(self, key: object) -> None:
        """A refused request's back-off ended: those in flight beside it that were not
        refused too were served — the capacity goes down to their count."""
        beside = self._beside.get(key)
        self.forget(key)
        if beside is None or not self.enabled:
            return
        served = sum(1 for number in beside if number not in self._refused)
        if served < 1:
            return  # everyone was refused: a rate limit, not a concurrency cap
        level = float(served + 1)
        if self._refused_at is None or level < self._refused_at:
            self._refused_at = level
        if served < self._window:
            self._window = float(served)
            self._unheeded = 0  # the measurement accounts for the refusals it saw
            self._apply("overload")

    def observe_latency(self, latency_s: float) -> None:
        """Feed a successful round trip (EWMA) so decreases are spaced by one RTT."""
        sample = max(latency_s, 0.001)
        self._rtt = 0.8 * self._rtt + 0.2 * sample if self._measured else sample
        self._measured = True

    def on_success(self) -> None:
        if not self.enabled or self._window >= self._ceiling:
            return
        # +1 permit per window's worth of successes: one permit per round trip.
        step = 1.0 / max(self._window, 1.0)
        refused = self._refused_at
        if refused is not None and self._window + 1.0 >= refused:
            # The whole last permit up to the refused level, not just the step that
            # crosses it, comes ``patience`` times slower: a probe every few round trips.
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

    def _apply(self, reason: str) -> None:
        new = max(1, int(self._window))
        old = self._limiter.sub_limit
        if new != old:
            self._limiter.sub_limit = new
            if self._on_change is not None:
                self._on_change(old, new, reason)
