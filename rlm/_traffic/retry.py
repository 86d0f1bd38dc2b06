"""When and how long to wait before retrying a failed request.

Without a ``Retry-After`` the wait is *full jitter* (a uniform draw between 0
and a ceiling that starts at ``base_s`` and doubles per attempt, up to
``cap_s``): requests refused together spread out instead of coming back
together, and a short outage costs a fraction of a second, not seconds.  The
draw comes from ``rng``, which tests inject so waits are reproducible.

A provider's ``Retry-After`` (seconds, ``retry-after-ms`` or an HTTP date,
already turned into seconds by the provider) is honoured as given up to
``max_wait_s``; a longer one is not waited out at all: :meth:`RetryPolicy.
too_long` says why in words a user can act on, and the request fails at once.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from rlm._spelling import setting
from rlm.errors import ProviderError, ProviderStatusError, ProviderTimeout, RateLimitError

__all__ = ["RetryPolicy", "is_overload", "refused_for_rate", "waited_too_long"]

#: Statuses that mean "the provider is overloaded": retry and shrink concurrency.
_OVERLOAD_STATUS = frozenset({429, 503, 529})

#: How providers word a refusal for rate ("... on requests per min (RPM)", "your
#: per-minute rate limit", "more than 120 requests per minute"), not concurrency.
_RATE_WORDS = re.compile(
    r"\bper[ -]?(?:min(?:ute)?|sec(?:ond)?|hour|day)\b|\b(?:[rt]p[msd])\b", re.IGNORECASE
)


def is_overload(exc: ProviderError) -> bool:
    """429/503/529, and an attempt that timed out: push-back that should shrink adaptive
    capacity (a server that does not answer in time has more requests than it works on:
    a local one with a slot or two queues the rest, and a retry joins the same queue).

    Plain network errors and other 5xx are retried without shrinking.
    """
    return isinstance(exc, RateLimitError | ProviderTimeout) or (
        isinstance(exc, ProviderStatusError) and exc.status in _OVERLOAD_STATUS
    )


def refused_for_rate(exc: ProviderError) -> bool:
    """A 429 whose message says the limit passed is a rate (requests or tokens per
    unit of time), not how many requests are in flight."""
    return isinstance(exc, ProviderStatusError) and exc.status == 429 and bool(
        _RATE_WORDS.search(str(exc))
    )


def retry_after(exc: ProviderError) -> float | None:
    """The seconds the provider asked to wait, if it said."""
    value = getattr(exc, "retry_after", None)
    return None if value is None else float(value)


@dataclass(slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter, capped; ``Retry-After`` wins when given.

    ``max_retries`` is retries, not attempts: 3 means up to 4 attempts.
    Attempt n's back-off is drawn from ``[0, min(cap_s, base_s * 2**(n-1))]``.
    ``rng`` is seeded so a run's waits are reproducible.
    """

    max_retries: int = 3
    base_s: float = 0.5
    cap_s: float = 30.0
    max_wait_s: float = 300.0  # the longest Retry-After waited out
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    def should_retry(self, exc: ProviderError, attempt: int) -> bool:
        """``attempt`` is the 1-based number of the attempt that just failed."""
        return exc.retryable and attempt <= self.max_retries

    def delay(self, exc: ProviderError, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (check :meth:`too_long` first)."""
        asked = retry_after(exc)
        if asked is not None:
            return min(asked, self.max_wait_s)
        ceiling = min(self.cap_s, self.base_s * float(2 ** (attempt - 1)))
        return self.rng.random() * ceiling

    def too_long(self, exc: ProviderError) -> str | None:
        """Why the provider's ``Retry-After`` is not waited out, or None when it is."""
        asked = retry_after(exc)
        if asked is None or asked <= self.max_wait_s:
            return None
        return (
            f"{_who(exc)} asked to wait {_span(asked)} before retrying, longer than rlm "
            f"waits for a retry (at most {_span(self.max_wait_s)}), so the request failed "
            f"without waiting: {_advice(asked)} (it said: {exc})"
        )


def waited_too_long(exc: ProviderError, wait: float, left: float) -> str:
    """The message when a wait of ``wait`` seconds would pass the run's deadline."""
    timeout = setting("timeout")
    asked = retry_after(exc)
    if asked is not None:
        return (
            f"{_who(exc)} asked to wait {_span(asked)} before retrying, past the "
            f"{_span(left)} left of the run's {timeout}, so the run stopped without waiting: "
            f"{_advice(asked)}, or give a longer {timeout} (last error: {exc})"
        )
    return (
        f"the next retry would come after a {_span(wait)} back-off, past the {_span(left)} "
        f"left of the run's {timeout} (last error: {exc})"
    )


def _who(exc: ProviderError) -> str:
    return exc.url or "the provider"


def _advice(asked: float) -> str:
    if asked >= 3600:
        return "a quota for the hour or the day is probably spent: run again once it resets"
    return (
        f"try again later, or lower {setting('rpm')} or {setting('max_concurrent')} "
        "so it asks less often"
    )


def _span(seconds: float) -> str:
    """``0.07 s``, ``42 s``, ``12 min``, ``27.8 h``: a wait as a person reads it."""
    if seconds < 10:
        return f"{seconds:.2g} s" if seconds < 1 else f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
