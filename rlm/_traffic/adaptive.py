"""Adaptive concurrency for limits nobody told us (AIMD on the sub lane).

Until the provider pushes back, the configured cap is used in full: a fan-out
never pays a slow start when nothing is wrong.  On overload (429/503/529) the
sub lane's capacity is halved — at most once per round-trip time, so one burst
of 429s from requests already in flight does not collapse it to 1 — and then
grows back by one permit per round trip of successes, never above the
configured cap.  Every change is reported through ``on_change``.
"""

from __future__ import annotations

from collections.abc import Callable

from rlm._traffic.limiter import TieredLimiter

__all__ = ["AdaptiveCapacity"]

ChangeHook = Callable[[int, int, str], None]


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
        self._last_decrease = -float("inf")
        self._on_change = on_change
        self.decreases = 0

    @property
    def capacity(self) -> int:
        return self._limiter.sub_limit

    def observe_latency(self, latency_s: float) -> None:
        """Feed a successful round trip (EWMA) so decreases are spaced by one RTT."""
        self._rtt = 0.8 * self._rtt + 0.2 * max(latency_s, 0.001)

    def on_success(self) -> None:
        if not self.enabled or self._window >= self._ceiling:
            return
        # +1 permit per window's worth of successes: one permit per round trip.
        self._window = min(float(self._ceiling), self._window + 1.0 / max(self._window, 1.0))
        self._apply("increase")

    def on_overload(self, now: float) -> None:
        if not self.enabled or now - self._last_decrease < self._rtt:
            return
        self._last_decrease = now
        self.decreases += 1
        self._window = max(1.0, self._window * self._factor)
        self._apply("overload")

    def _apply(self, reason: str) -> None:
        new = max(1, int(self._window))
        old = self._limiter.sub_limit
        if new != old:
            self._limiter.sub_limit = new
            if self._on_change is not None:
                self._on_change(old, new, reason)
