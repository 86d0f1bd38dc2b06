"""Adaptive rate: the one owner of the pacer's requests and tokens per minute.

The provider's limits are the configured ``--rpm``/``--tpm``, or, when none
was given, what its headers announce (learned once).  Workers sharing a
journal each pace at their share of those (:meth:`AdaptiveRate.share`), and
within the share at a *fraction* that rate 429s cut and successes grow back,
as adaptive concurrency does with permits:

- A 429 whose cause is rate (the provider says so, or every request in flight
  was refused) cuts the fraction by a fifth; when the rate had held for ten
  successes (a probe above the last cut, or a stray refusal of a rate that held)
  it steps back 5 % instead.  Refusals of
  requests paced before the last cut were paced too fast already and say
  nothing new.
- Successes grow the fraction back, ``patience`` times slower than 2 % of the
  share each while a refused rate is remembered; ``patience`` grows fourfold
  with each refused probe (up to 256).  So a provider enforcing a rate below
  the configured one refuses a probe now and then, rarer and rarer, not one
  request in a few; once the fraction holds 5 % above the refused rate, it
  grows at full speed again.

A provider that announces its limit also says how many requests it would take
now (``x-ratelimit-remaining-requests``): its bucket holds at least that many,
so with a learned rate the pacer lets the most it has said go back to back
(this worker's share of them) instead of spacing the first wave, and never more
than the last reply said are left (another client on the same key drains the
same bucket).  A rate 429 says the bucket, or a shorter window the provider
enforces, is smaller than that: the burst goes back to the configured one for
the rest of the run.

Every change of the pacer's rates and burst is reported through ``on_change``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import trio

from rlm._traffic.pacer import JITTER_MARGIN, Pacer

__all__ = ["AdaptiveRate"]

#: (limit, old, new, reason): ``limit`` is ``rpm`` or ``tpm``, rates per minute.
RateHook = Callable[[str, float | None, float, str], None]

_CUT = 0.8
_GROW = 0.02
_BAND = 0.05
_FLOOR = 0.01
_HELD = 10  # successes after a cut that say the cut was deep enough
_FIRST_PATIENCE = 4.0
_MAX_PATIENCE = 256.0


class AdaptiveRate:
    """Drives ``pacer``'s rates: the provider's limits, this worker's share, the cut."""

    def __init__(
        self, pacer: Pacer, *, enabled: bool = True, on_change: RateHook | None = None
    ) -> None:
        self._pacer = pacer
        self.enabled = enabled
        self._on_change = on_change
        self._limits: dict[str, float | None] = {"rpm": pacer.rpm, "tpm": pacer.tpm}
        # Given rates are paced with a margin for jitter, announced ones as announced
        # (see rlm._traffic.pacer).
        self._margins = {"rpm": JITTER_MARGIN, "tpm": JITTER_MARGIN}
        self._workers = 1
        self._burst_given = pacer.burst
        self._burst_seen = 0.0  # the most requests the provider said it would take now
        self._burst_refused = False  # a rate 429 since: back to the configured burst
        self._fraction = 1.0
        self._refused_at: float | None = None  # the fraction the provider last refused
        self._patience = _FIRST_PATIENCE
        self._cut_at = -math.inf  # when the fraction was last cut
        self._held = 0  # successes since the fraction was last cut (or since the start)
        self.cuts = 0

    @property
    def paced(self) -> bool:
        """Whether any rate is known (configured or learned): else there is nothing to cut."""
        return any(limit is not None for limit in self._limits.values())

    def share(self, workers: int) -> None:
        """``workers`` live workers share the provider's limits equally."""
        if workers >= 1 and workers != self._workers:
            self._workers = workers
            self._apply("share")
            self._apply_burst("share")

    def learned(self, limit: str, value: float) -> bool:
        """The provider announced ``limit`` (``rpm``/``tpm``); adopted when none is known."""
        if self._limits.get(limit, 0.0) is not None or not value > 0:
            return False
        self._limits[limit] = value
        self._margins[limit] = 0.0
        self._apply("learned")
        return True

    def remaining(self, requests: float) -> None:
        """The provider would take ``requests`` more requests now (a learned rate only:
        a configured one keeps the configured burst): the most it said is the burst,
        and the pacer lets no more than this worker's share of them go at once."""
        if self._limits["rpm"] is None or self._margins["rpm"] > 0 or not self.enabled:
            return
        if requests > self._burst_seen:
            self._burst_seen = requests
            self._apply_burst("learned")
        self._pacer.hold_to(requests / self._workers)

    def _apply_burst(self, reason: str) -> None:
        seen = 0 if self._burst_refused else int(self._burst_seen // self._workers)
        burst = max(self._burst_given, seen)
        old = self._pacer.burst
        if burst != old:
            self._pacer.set_burst(burst)
            if self._on_change is not None:
                self._on_change("burst", old, burst, reason)

    def refused(self, sent_at: float) -> bool:
        """A request sent at ``sent_at`` got a 429 whose cause is rate.

        Returns False when no rate is known (pacing cannot help: the caller
        treats it as an overload of concurrency); True when it was taken here.
        """
        if not self.paced:
            return False
        if not self.enabled or sent_at < self._cut_at:
            return True
        level = self._fraction
        if self._held >= _HELD:
            # The cut held, and a probe above it was refused: just below it holds.
            self._patience = min(_MAX_PATIENCE, self._patience * 4)
            self._fraction = max(_FLOOR, level * (1 - _BAND))
        else:
            self._fraction = max(_FLOOR, level * _CUT)
        self._refused_at, self._held = level, 0
        self._cut_at = trio.current_time()
        self.cuts += 1
        self._apply("rate_limited")
        self._burst_refused = True
        self._apply_burst("rate_limited")
        return True

    def on_success(self) -> None:
        self._held += 1
        if not self.enabled or self._fraction >= 1.0 or not self.paced:
            return
        refused = self._refused_at
        step = _GROW if refused is None else _GROW / self._patience
        self._fraction = min(1.0, self._fraction + step)
        if refused is not None and self._fraction >= refused * (1 + _BAND):
            self._refused_at, self._patience = None, _FIRST_PATIENCE  # that rate holds now
        self._apply("increase")

    def _apply(self, reason: str) -> None:
        # Whole percent steps of the share, so growing back is a few events, not one
        # per success.
        fraction = math.floor(self._fraction * 100 + 1e-9) / 100
        for limit, current, setter in (
            ("rpm", self._pacer.rpm, self._pacer.set_rpm),
            ("tpm", self._pacer.tpm, self._pacer.set_tpm),
        ):
            whole = self._limits[limit]
            if whole is None:
                continue
            new = whole / self._workers * fraction
            if current is not None and math.isclose(new, current):
                continue
            setter(new, margin=self._margins[limit])
            if self._on_change is not None:
                self._on_change(limit, current, new, reason)
