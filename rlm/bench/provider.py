"""The fixture model in-process for ``rlm bench``, with scripted per-request latencies.

Like :class:`rlm.providers.fixture.FixtureProvider` (same replies, same rule:
a request carrying the RLM system prompt is a step and sleeps the root latency,
anything else is a sub-query), plus two things a benchmark needs:

- sub-query latencies may follow a list (e.g. lognormal draws), used in the
  order the requests reach the provider, i.e. dispatch order;
- every response records the latency it was given under
  ``metadata["nominal_latency_s"]``, so the trace alone yields T*.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence

import trio

from rlm.providers.base import Completion, CompletionRequest
from rlm.providers.fixture import FixtureProvider, is_root_request
from rlm.view.limit import NOMINAL_LATENCY_KEY

__all__ = ["BenchProvider"]


class BenchProvider:
    """See the module docstring.  ``sub_latencies`` wins over ``sub_latency`` and cycles.

    ``sleep`` waits out a latency: ``trio.sleep`` (virtual time in tests), or
    :func:`rlm.bench.timer.precise_sleep` for a measured run.
    """

    name = "fixture"

    def __init__(self, *, root_latency: float = 0.0, sub_latency: float = 0.0,
                 sub_latencies: Sequence[float] | None = None, chunks: int = 16,
                 sleep: Callable[[float], Awaitable[None]] = trio.sleep) -> None:
        if root_latency < 0 or sub_latency < 0 or any(x < 0 for x in sub_latencies or ()):
            raise ValueError("latencies must not be negative")
        self.root_latency = root_latency
        self.sub_latency = sub_latency
        self.sub_latencies = list(sub_latencies) if sub_latencies else None
        self._model = FixtureProvider(chunks=chunks)
        self._sleep = sleep
        self.sub_requests = 0

    def _latency(self, step: bool) -> float:
        if step:
            return self.root_latency
        k = self.sub_requests
        self.sub_requests += 1
        if self.sub_latencies:
            return self.sub_latencies[k % len(self.sub_latencies)]
        return self.sub_latency

    async def complete(self, request: CompletionRequest) -> Completion:
        latency = self._latency(is_root_request(request.messages))
        await self._sleep(latency)
        completion = await self._model.complete(request)  # zero latency: the reply only
        metadata = {**completion.metadata, NOMINAL_LATENCY_KEY: latency}
        return dataclasses.replace(completion, metadata=metadata)

    async def aclose(self) -> None:
        """Nothing to release."""
