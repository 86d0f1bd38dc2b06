"""The traffic gate: the one path every LLM request takes.

For each attempt: take a permit in the request's lane (tiered limiter) → take
a pacing slot (rpm/tpm) → send once through the provider → record the outcome.
Between attempts the permit is released and the request backs off (the
provider's ``Retry-After`` when it gave one), never past the run's deadline;
a retry goes back through the limiter and the pacer like any request.
Overload answers (429/503/529) and attempts that timed out shrink the sub
lane's capacity (AIMD); successes grow it back.  A 429 whose cause is rate (its message says so, or
every request in flight was refused) slows the pacer instead, when a rate is
known (adaptive rate).  While a request backs off from an overload answer of
concurrency, the sub lane holds back one permit for it, so the permit it
released is not handed at once to a waiter the provider would refuse too.
The two controllers are the only writers of the limiter's and the pacer's
numbers: a volley worker's share of a journal's limits is a ceiling they move
within.  Every attempt,
retry, wait and capacity change is an event, so a trace alone explains where
the time went.

Every attempt is a request sent, so each one is reserved in the budget ledger
before it goes and settled after; the ledger is also where the run's usage is
counted (an unlimited ledger when the gate is given none).

When a live consumer is attached to the run's events (or the caller passes
``on_text``), providers that can stream do: each piece of text is published as
a ``text_delta`` event attributed to its call, request and attempt, and the
time to the first piece is recorded per attempt.  An attempt that fails after
some text was published is followed by ``stream_discarded``: its text is void,
and the retry streams the answer again from the start.

A send check, when given (``before_send``), is asked right before each attempt
goes out, once it holds its permit and pacing slot: it may refuse the attempt
by raising (a volley worker whose claim on the task was reopened while it was
paused raises :class:`~rlm.errors.ClaimLost`), and then nothing is sent,
reserved or recorded.

A response cache, when given, sits in front of all of it: a request it can
answer takes no permit, no pacing slot and no budget, is never sent, and is
recorded as ``llm_cached``; an answer that was sent is stored in it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from itertools import count
from typing import Any, Protocol

import trio

from rlm._events import (
    BudgetRefused,
    CapacityChanged,
    EventBus,
    LLMCached,
    LLMRequest,
    LLMResponse,
    LLMRetry,
    RateChanged,
    RateLimitLearned,
    StreamDiscarded,
    TextDelta,
)
from rlm._spelling import setting
from rlm._traffic.adaptive import AdaptiveCapacity
from rlm._traffic.adaptive_rate import AdaptiveRate
from rlm._traffic.budget import Budget, Ticket
from rlm._traffic.limiter import TieredLimiter
from rlm._traffic.metrics import TrafficMetrics
from rlm._traffic.pacer import Pacer
from rlm._traffic.retry import RetryPolicy, is_overload, refused_for_rate, waited_too_long
from rlm._traffic.usage import estimate_io, usage_or_estimate
from rlm.errors import (
    BudgetExceeded,
    ProviderError,
    ProviderResponseError,
    ProviderStatusError,
    RunTimeout,
)
from rlm.providers.base import (
    Completion,
    CompletionRequest,
    Lane,
    Provider,
    StreamingProvider,
)

__all__ = ["CompletionCache", "Gate", "PieceSink", "SendCheck", "estimate_tokens"]

#: What a caller of :meth:`Gate.complete` may get for each piece: (text, attempt).
#: A piece of a later attempt means every piece of the earlier ones is void.
PieceSink = Callable[[str, int], Awaitable[None]]

#: Asked right before each attempt is sent; raises to keep it from being sent.
SendCheck = Callable[[CompletionRequest], Awaitable[None]]

class CompletionCache(Protocol):
    """Answers a request from earlier runs, and keeps new answers (see rlm.journal.cache)."""

    async def get(self, provider: Provider, request: CompletionRequest) -> Completion | None: ...

    async def put(
        self, provider: Provider, request: CompletionRequest, completion: Completion
    ) -> None: ...


def estimate_tokens(request: CompletionRequest) -> int:
    """A request's tokens before sending: prompt chars / 4 plus the output allowance."""
    prompt, output = estimate_io(request)
    return prompt + output


#: What providers say when a reply stopped at the request's output cap.
_AT_THE_CAP = frozenset({"length", "max_tokens"})


def cut_before_text(provider: Provider, request: CompletionRequest,
                    completion: Completion) -> None:
    """Refuse a reply that the output cap stopped before any text: a reasoning model
    spends output tokens thinking, and an empty answer would pass for the model's own.
    Not retried: the same request stops at the same cap.  Its tokens are still paid."""
    if completion.text.strip() or completion.finish_reason not in _AT_THE_CAP:
        return
    cap = request.max_tokens
    where = getattr(provider, "url", "") or provider.name
    raise ProviderResponseError(
        f"{where} stopped its reply at the output cap "
        f"({setting('max_tokens', cap) if cap else 'its own'}) before writing any text "
        f"({completion.output_tokens:,} output tokens: a reasoning model spends them "
        f"thinking); raise {setting('max_tokens')}",
        url=str(where), brief="cut at the output cap",
    )


class Gate:
    """Sends completion requests under the run's limits."""

    def __init__(
        self,
        *,
        limiter: TieredLimiter,
        providers: Mapping[Lane, Provider],
        events: EventBus,
        pacer: Pacer | None = None,
        retry: RetryPolicy | None = None,
        adaptive: bool = True,
        deadline: Callable[[], float] = lambda: float("inf"),
        ledger: Budget | None = None,
        cache: CompletionCache | None = None,
        before_send: SendCheck | None = None,
    ) -> None:
        self.limiter = limiter
        self._before_send = before_send
        self.pacer = pacer or Pacer()
        self.retry = retry or RetryPolicy()
        self.metrics = TrafficMetrics()
        self.adaptive = AdaptiveCapacity(
            limiter, enabled=adaptive, on_change=self._capacity_changed
        )
        self.rate = AdaptiveRate(self.pacer, enabled=adaptive, on_change=self._rate_changed)
        self.ledger = ledger if ledger is not None else Budget()
        self._providers = dict(providers)
        self._events = events
        self._deadline = deadline
        self._ids = count(1)
        self._sent_at: dict[int, float] = {}  # per request: when its last attempt went
        self._held_back: set[int] = set()  # refused requests holding a sub permit back
        self.cache = cache
        self.cached_calls = 0  # requests answered by the cache, never sent

    async def complete(
        self, request: CompletionRequest, on_text: PieceSink | None = None
    ) -> Completion:
        """Send ``request``, retrying what is worth retrying.

        Raises the last ProviderError when the request fails for good, and
        RunTimeout when a wait would pass the run's deadline.  On cancellation
        the in-flight attempt is abandoned and its permit released.  With
        ``on_text`` (or a live consumer on the events) the answer is streamed.
        """
        provider = self._providers[request.lane]
        request_id = next(self._ids)
        if self.cache is None:
            return await self._send(provider, request, request_id, on_text)
        cached = await self.cache.get(provider, request)
        if cached is not None:
            if on_text is not None or self._events.streaming:
                # A replayed answer arrives as one piece, published like streamed text.
                await _Pieces(self._events, request, request_id, 1, on_text)(cached.text)
            self.cached_calls += 1
            self._events.emit(
                LLMCached(
                    call_id=request.call_id,
                    depth=request.depth,
                    request_id=request_id,
                    lane=request.lane,
                    model=request.model,
                    provider=provider.name,
                    input_tokens=cached.input_tokens,
                    output_tokens=cached.output_tokens,
                    metadata=dict(cached.metadata),
                )
            )
            return cached
        completion = await self._send(provider, request, request_id, on_text)
        await self.cache.put(provider, request, completion)
        return completion

    async def is_cached(self, request: CompletionRequest) -> bool:
        """Whether :meth:`complete` would answer ``request`` from the cache, sending nothing."""
        if self.cache is None:
            return False
        return await self.cache.get(self._providers[request.lane], request) is not None

    async def _send(
        self,
        provider: Provider,
        request: CompletionRequest,
        request_id: int,
        on_text: PieceSink | None,
    ) -> Completion:
        attempt = 0
        try:
            while True:
                attempt += 1
                try:
                    return await self._attempt(provider, request, request_id, attempt, on_text)
                except ProviderError as exc:
                    if not self.retry.should_retry(exc, attempt):
                        raise
                    await self._back_off(request, request_id, attempt, exc)
        finally:
            self.adaptive.forget(request_id)  # a refusal it never came back from
            self._give_back(request_id)
            self._sent_at.pop(request_id, None)

    async def _back_off(
        self, request: CompletionRequest, request_id: int, attempt: int, exc: ProviderError
    ) -> None:
        refusal = self.retry.too_long(exc)
        if refusal is not None:
            raise _failed_for_good(exc, refusal) from exc
        delay = self.retry.delay(exc, attempt)
        now = trio.current_time()
        if now + delay > self._deadline():
            left = max(0.0, self._deadline() - now)
            raise RunTimeout(waited_too_long(exc, delay, left)) from exc
        self.metrics.lane(request.lane).retries += 1
        self._events.emit(
            LLMRetry(
                call_id=request.call_id,
                depth=request.depth,
                request_id=request_id,
                lane=request.lane,
                attempt=attempt + 1,
                delay_s=round(delay, 6),
                reason=f"{type(exc).__name__}: {exc}"[:300],
                retry_after=getattr(exc, "retry_after", None) is not None,
                brief=exc.brief,
                task=request.task,
                task_title=request.task_title,
            )
        )
        end = now + delay
        if is_overload(exc):
            self.adaptive.backing_off(end)
        if request_id in self._held_back:
            # Its permit stays held back until the refusal is measured: the requests
            # beside it are all back (or the back-off is over), so the window is the
            # provider's.  When none of them was served, until the end: another
            # request now would be refused too.
            try:
                with trio.move_on_at(end):
                    await self.adaptive.answered(request_id)
                if self.adaptive.measure(request_id):  # everyone in flight refused: rate
                    self.rate.refused(self._sent_at.get(request_id, -float("inf")))
                    await trio.sleep_until(end)
            finally:
                self._give_back(request_id)
        await trio.sleep_until(end)

    def _give_back(self, request_id: int) -> None:
        if request_id in self._held_back:
            self._held_back.discard(request_id)
            self.limiter.give_back()

    async def _attempt(
        self,
        provider: Provider,
        request: CompletionRequest,
        request_id: int,
        attempt: int,
        on_text: PieceSink | None = None,
    ) -> Completion:
        lane = request.lane
        metrics = self.metrics.lane(lane)
        queued_at = trio.current_time()
        async with self.limiter.permit(lane):
            queue_wait = trio.current_time() - queued_at
            pace_wait = await self.pacer.wait(estimate_tokens(request), lane)
            if self._before_send is not None:
                await self._before_send(request)
            ticket = self._reserve(request, provider)
            metrics.attempts += 1
            metrics.in_flight += 1
            metrics.max_in_flight = max(metrics.max_in_flight, metrics.in_flight)
            metrics.queue_wait_total_s += queue_wait
            metrics.queue_wait_max_s = max(metrics.queue_wait_max_s, queue_wait)
            metrics.pace_wait_total_s += pace_wait
            self._events.emit(
                LLMRequest(
                    call_id=request.call_id,
                    depth=request.depth,
                    request_id=request_id,
                    lane=lane,
                    model=request.model,
                    provider=provider.name,
                    prompt_chars=sum(len(m["content"]) for m in request.messages),
                    queue_wait_s=round(queue_wait, 6),
                    pace_wait_s=round(pace_wait, 6),
                    attempt=attempt,
                    in_flight=sum(m.in_flight for m in self.metrics.lanes.values()),
                )
            )
            started = self._sent_at[request_id] = trio.current_time()
            completion: Completion | None = None
            cost: float | None = None
            piece = _Pieces(self._events, request, request_id, attempt, on_text)
            number = self.adaptive.sending() if lane == "sub" else 0
            try:
                # The cheap test first: a runtime Protocol check is the slow one.
                if (on_text is not None or self._events.streaming) and isinstance(
                    provider, StreamingProvider
                ):
                    completion = await provider.stream(request, piece)
                else:
                    completion = await provider.complete(request)
                completion = usage_or_estimate(request, completion)
                cut_before_text(provider, request, completion)
            except ProviderError as exc:
                # A refusal for rate slows the pacer; any other overload is concurrency's.
                rate = refused_for_rate(exc) and self.rate.refused(started)
                overload = is_overload(exc) and not rate
                if number and overload and self.adaptive.enabled:
                    self.adaptive.refused(number, request_id)
                    # Before its permit is released: not handed to a waiter that the
                    # provider would refuse too, while this one backs off.
                    self.limiter.hold_back()
                    self._held_back.add(request_id)
                self._record(
                    request, provider, request_id, attempt, started, None, exc, None, piece,
                    overload=overload,
                )
                piece.discard(exc)
                raise
            except trio.Cancelled:
                # The run is ending: the attempt was abandoned, and the trace says so.
                self._record(
                    request, provider, request_id, attempt, started, None, None, None, piece
                )
                raise
            finally:
                metrics.in_flight -= 1
                if number:
                    self.adaptive.returned(number)
                cost = self.ledger.settle(ticket, completion)
        self._record(request, provider, request_id, attempt, started, completion, None, cost, piece)
        return completion

    def _record(
        self,
        request: CompletionRequest,
        provider: Provider,
        request_id: int,
        attempt: int,
        started: float,
        completion: Completion | None,
        error: ProviderError | None,
        cost: float | None,
        piece: _Pieces | None = None,
        *,
        overload: bool = False,
    ) -> None:
        latency = trio.current_time() - started
        first = piece.first_at if piece is not None else None
        metrics = self.metrics.lane(request.lane)
        status = error.status if isinstance(error, ProviderStatusError) else None
        if completion is not None:
            metrics.ok += 1
            metrics.add_latency(latency)
            self.adaptive.observe_latency(latency)
            if request.lane == "sub":
                self.adaptive.on_success()
            self.rate.on_success()
            self._learn_limits(completion)
        elif error is not None:
            metrics.failed += 1
            if status == 429:
                metrics.rate_limited += 1
            if overload:
                self.adaptive.on_overload(trio.current_time())
        self._events.emit(
            LLMResponse(
                call_id=request.call_id,
                depth=request.depth,
                request_id=request_id,
                lane=request.lane,
                model=request.model,
                provider=provider.name,
                status="ok" if completion else ("error" if error else "cancelled"),
                http_status=200 if completion is not None else status,
                latency_s=round(latency, 6),
                input_tokens=completion.input_tokens if completion else 0,
                output_tokens=completion.output_tokens if completion else 0,
                attempt=attempt,
                cost=cost,
                error=f"{type(error).__name__}: {error}" if error else None,
                metadata=dict(completion.metadata) if completion else {},
                ttft_s=None if first is None else round(first - started, 6),
            )
        )

    def _reserve(self, request: CompletionRequest, provider: Provider) -> Ticket:
        """Reserve the attempt in the budget; a refusal is an event, then BudgetExceeded."""
        try:
            bills = getattr(provider, "bills_cache_writes", False) is True  # Anthropic
            writes = (request.cache_prefix > 0 or request.cache_end) and bills
            return self.ledger.reserve(request, cache_writes=writes)
        except BudgetExceeded as exc:
            self._events.emit(
                BudgetRefused(
                    call_id=request.call_id,
                    depth=request.depth,
                    scope="request",
                    items=1,
                    lane=request.lane,
                    model=request.model,
                    reason=str(exc),
                )
            )
            raise

    def _learn_limits(self, completion: Completion) -> None:
        """Adopt rpm/tpm from response headers when the user gave none, and the burst
        the provider says it would take."""
        limits = completion.metadata.get("ratelimit")
        if not isinstance(limits, dict):
            return
        for key, limit in (("requests_limit", "rpm"), ("tokens_limit", "tpm")):
            value = limits.get(key)
            if isinstance(value, int | float) and self.rate.learned(limit, float(value)):
                self._events.emit(
                    RateLimitLearned(
                        limit=limit,
                        value=float(value),
                        source=str(limits.get("source", "headers")),
                    )
                )
        remaining = limits.get("requests_remaining")
        if isinstance(remaining, int | float):
            self.rate.remaining(float(remaining))

    def _capacity_changed(self, old: int, new: int, reason: str) -> None:
        self.metrics.capacity_changes += 1
        self._events.emit(CapacityChanged(lane="sub", old=old, new=new, reason=reason))

    def _rate_changed(self, limit: str, old: float | None, new: float, reason: str) -> None:
        self._events.emit(RateChanged(limit=limit, old=old, new=round(new, 6), reason=reason))

    def traffic(self) -> dict[str, object]:
        """The ``traffic`` object of ``--json``."""
        return self.metrics.to_dict(self.capacities(), self.pacer.rpm, self.pacer.tpm)

    def capacities(self) -> dict[str, int]:
        return {"root": self.limiter.total, "sub": self.limiter.sub_limit}


def _failed_for_good(exc: ProviderError, message: str) -> ProviderError:
    """``exc`` again (same type and status), with ``message`` and not retryable."""
    if isinstance(exc, ProviderStatusError):
        return type(exc)(message, url=exc.url, status=exc.status, retry_after=exc.retry_after)
    return type(exc)(message, url=exc.url)


class _Pieces:
    """One attempt's text pieces: published as ``text_delta`` and handed to the caller."""

    def __init__(
        self,
        events: EventBus,
        request: CompletionRequest,
        request_id: int,
        attempt: int,
        on_text: PieceSink | None,
    ) -> None:
        self._events = events
        self._request = request
        self._request_id = request_id
        self._attempt = attempt
        self._on_text = on_text
        self.first_at: float | None = None
        self.chars = 0

    async def __call__(self, text: str) -> None:
        if self.first_at is None:
            self.first_at = trio.current_time()
        self.chars += len(text)
        title = self._request.task_title
        await self._events.publish(TextDelta(**self._labels(), text=text, task_title=title))
        if self._on_text is not None:
            await self._on_text(text, self._attempt)

    def discard(self, error: ProviderError) -> None:
        """The attempt failed: say that its text, if any, is void."""
        if not self.chars:
            return
        reason = f"{type(error).__name__}: {error}"[:300]
        self._events.emit(StreamDiscarded(**self._labels(), chars=self.chars, reason=reason))

    def _labels(self) -> dict[str, Any]:
        request = self._request
        return {
            "call_id": request.call_id,
            "parent_id": request.parent_id,
            "depth": request.depth,
            "lane": request.lane,
            "request_id": self._request_id,
            "attempt": self._attempt,
            "task": request.task,
        }
