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

import math
from collections.abc import Sequence

import trio

from rlm._bench_limit import NOMINAL_LATENCY_KEY
from rlm.errors import ProviderStatusError
from rlm.providers.base import Completion, CompletionRequest
from rlm.providers.fixture import estimate_tokens, fixture_reply, is_root_request

__all__ = ["BenchProvider"]


class BenchProvider:
    """See the module docstring.  ``sub_latencies`` wins over ``sub_latency`` and cycles."""

    name = "fixture"

    def __init__(self, *, root_latency: float = 0.0, sub_latency: float = 0.0,
                 sub_latencies: Sequence[float] | None = None, chunks: int = 16) -> None:
        if root_latency < 0 or sub_latency < 0 or any(x < 0 for x in sub_latencies or ()):
            raise ValueError("latencies must not be negative")
        self.root_latency = root_latency
        self.sub_latency = sub_latency
        self.sub_latencies = list(sub_latencies) if sub_latencies else None
        self.chunks = chunks
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
        if latency > 0:
            await trio.sleep(latency)
        else:
            await trio.lowlevel.checkpoint()
        try:
            text = fixture_reply(request.messages, request.model, self.chunks)
        except ValueError as exc:
            raise ProviderStatusError(str(exc), url="fixture:", status=400) from exc
        prompt_chars = sum(len(m["content"]) for m in request.messages)
        return Completion(
            text=text,
            model=request.model,
            input_tokens=math.ceil(prompt_chars / 4),
            output_tokens=estimate_tokens(text),
            finish_reason="stop",
            metadata={"fixture": True, NOMINAL_LATENCY_KEY: latency},
        )

    async def aclose(self) -> None:
        """Nothing to release."""
