"""The traffic gate: the one path every LLM request takes.

Today the gate holds the tiered concurrency limit and accounts for usage; the
traffic issue plugs pacing, retries and adaptive capacity in here, in
``_send``, so no request can bypass them.  A permit is held only around one
HTTP attempt, never while a call waits for its children.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import count

from rlm._events import EventBus, LLMRequest, LLMResponse
from rlm._limiter import TieredLimiter
from rlm._usage import UsageMeter
from rlm.errors import ProviderError
from rlm.providers.base import Completion, CompletionRequest, Lane, Provider

__all__ = ["Gate"]


class Gate:
    """Sends completion requests under the run's limits.

    ``providers`` maps each lane to the provider that serves it (root steps may
    use another endpoint than sub-queries).
    """

    def __init__(
        self,
        *,
        limiter: TieredLimiter,
        providers: Mapping[Lane, Provider],
        events: EventBus,
        usage: UsageMeter,
    ) -> None:
        self.limiter = limiter
        self._providers = dict(providers)
        self._events = events
        self._usage = usage
        self._ids = count(1)

    async def complete(self, request: CompletionRequest) -> Completion:
        """Send ``request`` once it holds a permit in its lane.

        Raises the provider's :class:`ProviderError` on failure.  On
        cancellation the in-flight HTTP request is abandoned and its permit
        released.
        """
        provider = self._providers[request.lane]
        queued_at = self._events.now()
        async with self.limiter.permit(request.lane):
            return await self._send(provider, request, queue_wait=self._events.now() - queued_at)

    async def _send(
        self, provider: Provider, request: CompletionRequest, *, queue_wait: float
    ) -> Completion:
        request_id = next(self._ids)
        self._usage.count_request()
        self._events.emit(
            LLMRequest(
                call_id=request.call_id,
                depth=request.depth,
                request_id=request_id,
                lane=request.lane,
                model=request.model,
                provider=provider.name,
                prompt_chars=sum(len(m["content"]) for m in request.messages),
                queue_wait_s=round(queue_wait, 6),
                in_flight=self.limiter.statistics().in_flight,
            )
        )
        started = self._events.now()
        try:
            completion = await provider.complete(request)
        except ProviderError as exc:
            self._respond(request, provider, request_id, started, None, exc)
            raise
        self._usage.add_tokens(completion.input_tokens, completion.output_tokens)
        self._respond(request, provider, request_id, started, completion, None)
        return completion

    def _respond(
        self,
        request: CompletionRequest,
        provider: Provider,
        request_id: int,
        started: float,
        completion: Completion | None,
        error: ProviderError | None,
    ) -> None:
        self._events.emit(
            LLMResponse(
                call_id=request.call_id,
                depth=request.depth,
                request_id=request_id,
                lane=request.lane,
                model=request.model,
                provider=provider.name,
                status="ok" if completion is not None else "error",
                latency_s=round(self._events.now() - started, 6),
                input_tokens=completion.input_tokens if completion else 0,
                output_tokens=completion.output_tokens if completion else 0,
                error=f"{type(error).__name__}: {error}" if error else None,
                metadata=dict(completion.metadata) if completion else {},
            )
        )
