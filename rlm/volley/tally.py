"""Per-task usage from the gate's events: attempts, retries, 429s, tokens, cost.

The gate already reports every attempt as events stamped with the request's
``call_id``; a volley gives each task its own call id (``t<index>``, and
``t<index>.<n>`` for child calls of an ``--rlm`` task), so summing the events
by that prefix gives each task's usage without a second accounting path.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlm._events import Event, LLMRequest, LLMResponse, LLMRetry
from rlm.providers.fixture import answered_by

__all__ = ["TaskTally", "TaskUsage"]


@dataclass
class TaskUsage:
    """What one task has spent so far (every attempt, retries included)."""

    sent: int = 0
    retries: int = 0
    rate_limited: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0
    unpriced: int = 0
    #: Seconds its attempts took at the provider, summed (a permit is held that long).
    request_s: float = 0.0

    @property
    def priced_cost(self) -> float | None:
        """USD, or None when every priced-or-not answer came from an unpriced model."""
        return None if self.unpriced and not self.cost else self.cost


class TaskTally:
    """An event sink that sums the gate's events per task."""

    def __init__(self) -> None:
        self._tasks: dict[str, TaskUsage] = {}
        self.retries = 0
        self.rate_limited = 0
        self.cached_tokens = 0
        self.max_in_flight = 0
        self.answered_by: dict[str, None] = {}  # who wrote the answers, in order

    def __call__(self, event: Event) -> None:
        if not isinstance(event, LLMRequest | LLMResponse | LLMRetry):
            return
        key = event.call_id.partition(".")[0]
        usage = self._tasks.get(key)
        if usage is None:
            usage = self._tasks[key] = TaskUsage()
        if isinstance(event, LLMRequest):
            usage.sent += 1
            self.max_in_flight = max(self.max_in_flight, event.in_flight)
        elif isinstance(event, LLMRetry):
            usage.retries += 1
            self.retries += 1
        else:
            if event.http_status == 429:
                usage.rate_limited += 1
                self.rate_limited += 1
            usage.input_tokens += event.input_tokens
            usage.output_tokens += event.output_tokens
            usage.request_s += event.latency_s
            if event.status == "ok":
                self.answered_by[answered_by(event.provider, event.metadata)] = None
            cached = event.metadata.get("cached_tokens")
            if isinstance(cached, int):
                usage.cached_tokens += cached
                self.cached_tokens += cached
            if event.cost is None and event.status == "ok":
                usage.unpriced += 1
            else:
                usage.cost += event.cost or 0.0

    def sent(self, call_id: str) -> bool:
        """Whether any request of this task has gone out."""
        usage = self._tasks.get(call_id)
        return usage is not None and usage.sent > 0

    def pop(self, call_id: str) -> TaskUsage:
        """The task's usage, forgotten here (a finished task emits nothing more)."""
        return self._tasks.pop(call_id, None) or TaskUsage()
