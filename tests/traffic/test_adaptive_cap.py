"""Adaptive concurrency behind a hidden concurrency cap, in virtual time.

A refusal is a measurement: the requests served beside it are the cap.  The fake
provider is an in-process ``FunctionProvider`` under trio's autojump clock.
"""

from __future__ import annotations

import math

import trio

from rlm._events import CapacityChanged, EventBus, LLMResponse
from rlm._traffic.adaptive import AdaptiveCapacity
from rlm._traffic.gate import Gate
from rlm._traffic.limiter import TieredLimiter
from rlm._traffic.pacer import Pacer
from rlm._traffic.retry import RetryPolicy
from rlm.errors import RateLimitError
from rlm.providers.base import Completion, CompletionRequest
from rlm.testing.provider import FunctionProvider


def capped_provider(cap: int, latency: float, retry_after: float) -> tuple[FunctionProvider,
                                                                           dict[str, int]]:
    """Serves ``cap`` requests at once; any more are refused on arrival."""
    seen = {"now": 0, "peak": 0}

    async def reply(request: CompletionRequest) -> Completion:
        if seen["now"] >= cap:
            raise RateLimitError("busy", status=429, retryable=True, retry_after=retry_after)
        seen["now"] += 1
        seen["peak"] = max(seen["peak"], seen["now"])
        try:
            await trio.sleep(latency)
        finally:
            seen["now"] -= 1
        return Completion(text="ok", model=request.model, input_tokens=10, output_tokens=2)

    return FunctionProvider(reply, name="capped"), seen


async def run_volley_like(n: int, provider: FunctionProvider, configured: int) -> EventBus:
    events = EventBus()
    gate = Gate(
        limiter=TieredLimiter(configured, 0),
        providers={"root": provider, "sub": provider},
        events=events,
        pacer=Pacer(),
        retry=RetryPolicy(max_retries=10),
    )
    request = CompletionRequest(
        messages=[{"role": "user", "content": "task"}], model="m", lane="sub", max_tokens=10
    )
    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(gate.complete, request)
    return events


async def test_a_first_wave_over_a_hidden_cap_lands_on_the_cap_after_one_back_off(
    autojump_clock: trio.abc.Clock,
) -> None:
    provider, seen = capped_provider(cap=3, latency=1.0, retry_after=1.0)
    started = trio.current_time()
    events = await run_volley_like(100, provider, configured=16)
    makespan = trio.current_time() - started
    changes = [(e.old, e.new, e.reason) for e in events.events if isinstance(e, CapacityChanged)]
    # Halved at the first refusal; down to the measured cap when the back-off ended.
    assert changes[:2] == [(16, 8, "overload"), (8, 3, "overload")]
    # After that only a rare probe of 4, each answered by going back to 3.
    assert {new for _, new, _ in changes[2:]} <= {3, 4}
    responses = [e for e in events.events if isinstance(e, LLMResponse)]
    refused = sum(1 for e in responses if e.http_status == 429)
    assert seen["peak"] == 3 and sum(1 for e in responses if e.status == "ok") == 100
    assert refused <= 0.15 * len(responses)  # 13 of them are the first wave
    assert makespan <= 1.3 * math.ceil(100 / 3) * 1.0


async def test_a_burst_where_everyone_was_refused_measures_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A rate limit refusing every request in flight is not a cap of 0: it halves once."""
    refusing = {"until": 0.5}

    async def reply(request: CompletionRequest) -> Completion:
        if trio.current_time() < refusing["until"]:
            raise RateLimitError("slow down", status=429, retryable=True, retry_after=1.0)
        await trio.sleep(1.0)
        return Completion(text="ok", model=request.model, input_tokens=10, output_tokens=2)

    events = await run_volley_like(32, FunctionProvider(reply, name="limited"), configured=8)
    changes = [(e.old, e.new) for e in events.events if isinstance(e, CapacityChanged)]
    assert changes[0] == (8, 4) and min(new for _, new in changes) == 4


def test_a_share_moves_the_ceiling_and_never_undoes_a_cut() -> None:
    limiter = TieredLimiter(16, 0)
    changes: list[tuple[int, int, str]] = []
    adaptive = AdaptiveCapacity(limiter, on_change=lambda *change: changes.append(change))
    adaptive.share(8)  # never cut: the window follows its share down...
    assert (limiter.total, limiter.sub_limit) == (8, 8)
    adaptive.share(16)  # ...and back up
    assert limiter.sub_limit == 16
    adaptive.on_overload(now=0.0)  # the provider pushed back: 16 -> 8
    assert limiter.sub_limit == 8
    for _ in range(5):  # the journal recounts its workers every second: the cut holds
        adaptive.share(16)
    assert (limiter.total, limiter.sub_limit) == (16, 8)
    adaptive.share(4)  # a share below the cut lowers it
    assert (limiter.total, limiter.sub_limit) == (4, 4)
    assert changes == [(16, 8, "share"), (8, 16, "share"), (16, 8, "overload"),
                       (8, 4, "share")]


async def test_a_worker_that_joins_gets_room_where_the_limit_binds(
    autojump_clock: trio.abc.Clock,
) -> None:
    limiter = TieredLimiter(16, 0)
    adaptive = AdaptiveCapacity(limiter)
    adaptive.on_overload(now=0.0)
    adaptive.on_overload(now=10.0)  # cut to 4 behind the provider's limit
    assert limiter.sub_limit == 4
    adaptive.share(8, workers=2)  # another worker on the journal: one permit for it
    assert limiter.sub_limit == 3
    adaptive.share(8, workers=2)  # counted again: nothing more
    assert limiter.sub_limit == 3


async def test_refused_with_nothing_served_beside_it(autojump_clock: trio.abc.Clock) -> None:
    """Alone, that is a rate limit (the window is left to halving); with other workers on
    the provider, they may hold the whole cap: one request at a time until back in."""
    for workers, capacity in ((1, 8), (2, 1)):
        limiter = TieredLimiter(16, 0)
        adaptive = AdaptiveCapacity(limiter)
        adaptive.share(8, workers=workers)
        number = adaptive.sending()
        adaptive.refused(number, key="r1")
        adaptive.returned(number)
        await adaptive.answered("r1")  # nothing was beside it: measured at once
        assert adaptive.measure("r1")  # nobody was served
        assert limiter.sub_limit == capacity


async def test_a_refusal_is_measured_once_the_requests_beside_it_are_back(
    autojump_clock: trio.abc.Clock,
) -> None:
    limiter = TieredLimiter(8, 0)
    adaptive = AdaptiveCapacity(limiter)
    served = [adaptive.sending() for _ in range(3)]
    refused = adaptive.sending()
    adaptive.refused(refused, key="r")
    adaptive.returned(refused)
    with trio.move_on_after(1) as waiting:
        await adaptive.answered("r")
    assert waiting.cancelled_caught  # three are still being served
    for number in served:
        adaptive.returned(number)
    await adaptive.answered("r")
    assert not adaptive.measure("r") and limiter.sub_limit == 3
