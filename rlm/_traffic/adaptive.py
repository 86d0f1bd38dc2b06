"""Adaptive concurrency for limits nobody told us (AIMD on the sub lane).

Until the provider pushes back, the configured cap is used in full: a fan-out
never pays a slow start when nothing is wrong.  On overload (429/503/529) the
sub lane's capacity is halved — at most once per round-trip time, so one burst
of 429s from requests already in flight does not collapse it to 1 — and then
grows back by one permit per round trip of successes, never above the
configured cap.  Every change is reported through ``on_change``.

Growing back stops short of the level that was refused: the last step up to
the window at which the provider pushed back is ``patience`` times slower, and
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
        self.decreases = 0

    @property
    def capacity(self) -> int:
        return self._limiter.sub_limit

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
        if refused is not None and self._window + step >= refused:
            step /= self._patience  # probing the level that was refused: slowly
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
