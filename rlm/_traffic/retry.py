"""When and how long to wait before retrying a failed request."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from rlm.errors import ProviderError, ProviderStatusError, RateLimitError

__all__ = ["RetryPolicy", "is_overload"]

#: Statuses that mean "the provider is overloaded": retry and shrink concurrency.
_OVERLOAD_STATUS = frozenset({429, 503, 529})


def is_overload(exc: ProviderError) -> bool:
    """429/503/529: push-back that should shrink adaptive capacity.

    Plain network errors and other 5xx are retried without shrinking.
    """
    return isinstance(exc, RateLimitError) or (
        isinstance(exc, ProviderStatusError) and exc.status in _OVERLOAD_STATUS
    )


@dataclass(slots=True)
class RetryPolicy:
    """Exponential backoff with equal jitter, capped; ``Retry-After`` wins when given.

    ``max_retries`` is retries, not attempts: 3 means up to 4 attempts.
    ``rng`` is seeded so a run's waits are reproducible.
    """

    max_retries: int = 3
    base_s: float = 1.0
    cap_s: float = 60.0
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    def should_retry(self, exc: ProviderError, attempt: int) -> bool:
        """``attempt`` is the 1-based number of the attempt that just failed."""
        return exc.retryable and attempt <= self.max_retries

    def delay(self, exc: ProviderError, attempt: int) -> float:
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            return min(float(retry_after), 3600.0)
        ceiling = min(self.cap_s, self.base_s * float(2 ** (attempt - 1)))
        return ceiling / 2 + self.rng.random() * ceiling / 2
