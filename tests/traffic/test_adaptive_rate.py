"""Pacing against a provider that enforces its rate strictly, in virtual time.

The fake is a strict token bucket with no burst (as some providers enforce per
second): a request that reaches it any earlier than one interval after the last
admitted one is refused, and the network delays each request by a different
amount.  Nothing here is tuned to rlm's pacer: the bucket is the provider's.
"""

from __future__ import annotations

import random

import pytest
import trio

from rlm._events import CapacityChanged, EventBus, RateChanged, RateLimitLearned
from rlm._traffic.adaptive_rate import AdaptiveRate
from rlm._traffic.gate import Gate
from rlm._traffic.limiter import TieredLimiter
from rlm._traffic.pacer import Pacer
from rlm._traffic.retry import RetryPolicy
from rlm.errors import RateLimitError
from rlm.providers.base import Completion, CompletionRequest
from rlm.testing.provider import FunctionProvider


class StrictBucket:
    """Admits one request per ``60 / rpm`` seconds, counted from each arrival; a
    request reaches it after a random network delay of up to ``jitter`` seconds."""

    def __init__(self, rpm: float, *, jitter: float, latency: float = 0.05) -> None:
        self.rpm, self.jitter, self.latency = rpm, jitter, latency
        self.next_free = -float("inf")
        self.requests = self.refused = 0
        self.random = random.Random(7)
        self.provider = FunctionProvider(self.reply, name="strict-bucket")

    async def reply(self, request: CompletionRequest) -> Completion:
        await trio.sleep(self.random.random() * self.jitter)
        now = trio.current_time()
        self.requests += 1
        if now < self.next_free:
            self.refused += 1
            raise RateLimitError(f"more than {self.rpm:g} requests per minute", status=429,
                                 retryable=True, retry_after=0.5)
        self.next_free = now + 60.0 / self.rpm
        await trio.sleep(self.latency)
        return Completion(text="ok", model=request.model, input_tokens=1, output_tokens=1)


def paced_gate(bucket: StrictBucket, rpm: float) -> tuple[Gate, EventBus]:
    events = EventBus()
    gate = Gate(limiter=TieredLimiter(16, 0), events=events, pacer=Pacer(rpm=rpm),
                providers={"root": bucket.provider, "sub": bucket.provider},
                retry=RetryPolicy(max_retries=5))
    return gate, events


REQUEST = CompletionRequest(messages=[{"role": "user", "content": "x"}], model="m", lane="sub")


async def fan_out(gate: Gate, n: int) -> float:
    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(gate.complete, REQUEST)
    return trio.current_time() - started


async def test_pacing_at_a_strict_buckets_rate_leaves_room_for_jitter(
    autojump_clock: trio.abc.Clock,
) -> None:
    # 2 requests a second, each delayed 0-20 ms on the way: spaced exactly 0.5 s
    # apart, every other one would arrive early.
    bucket = StrictBucket(rpm=120, jitter=0.02)
    gate, events = paced_gate(bucket, rpm=120)
    took = await fan_out(gate, 100)
    assert bucket.refused == 0 and bucket.requests == 100
    assert took <= 1.1 * 100 * 0.5
    assert not [e for e in events.events if isinstance(e, RateChanged)]


async def test_a_rate_20_percent_above_a_strict_buckets_is_found_with_few_429s(
    autojump_clock: trio.abc.Clock,
) -> None:
    bucket = StrictBucket(rpm=100, jitter=0.02)
    gate, events = paced_gate(bucket, rpm=120)
    took = await fan_out(gate, 200)
    assert bucket.requests - bucket.refused == 200  # every request answered
    assert bucket.refused <= 0.03 * bucket.requests, bucket.refused
    assert took <= 1.15 * 200 * 0.6  # near the bucket's own pace
    changes = [e for e in events.events if isinstance(e, RateChanged)]
    assert (changes[0].old, changes[0].new, changes[0].reason) == (120, 96, "rate_limited")
    assert {e.reason for e in changes} == {"rate_limited", "increase"}
    # A refusal for rate slows the pacer; the concurrency it takes is left alone.
    assert not [e for e in events.events if isinstance(e, CapacityChanged)]


async def test_the_rate_recovers_once_the_provider_takes_it_again(
    autojump_clock: trio.abc.Clock,
) -> None:
    bucket = StrictBucket(rpm=60, jitter=0.0)
    gate, events = paced_gate(bucket, rpm=120)
    await fan_out(gate, 40)
    assert gate.pacer.rpm is not None and gate.pacer.rpm < 80
    bucket.rpm = 1_000  # the provider's limit is back above the configured one
    await fan_out(gate, 200)
    assert gate.pacer.rpm == 120
    assert [e.reason for e in events.events if isinstance(e, RateChanged)][-1] == "increase"


async def test_refusals_of_requests_paced_before_a_cut_cut_nothing_more(
    autojump_clock: trio.abc.Clock,
) -> None:
    pacer = Pacer(rpm=600)
    cuts: list[float] = []
    rate = AdaptiveRate(pacer, on_change=lambda limit, old, new, why: cuts.append(new))
    await trio.sleep(1.0)
    assert rate.refused(sent_at=0.9)  # taken: the pacer is cut by a fifth
    for sent_at in (0.5, 0.95, 0.99):  # sent at the old pace, answered since
        assert rate.refused(sent_at)
    assert cuts == [480] and pacer.rpm == 480


async def test_a_stray_refusal_of_a_rate_that_held_steps_back_a_little(
    autojump_clock: trio.abc.Clock,
) -> None:
    pacer = Pacer(rpm=600)
    rate = AdaptiveRate(pacer)
    rate.on_success()
    assert rate.refused(sent_at=0.0)  # at once: the rate is too high, a fifth off
    assert pacer.rpm == 480
    for _ in range(10):
        rate.on_success()
    held = pacer.rpm
    assert held is not None and held > 480  # growing back
    await trio.sleep(1.0)
    assert rate.refused(sent_at=1.0)  # it held ten times: about 5 % below
    assert pacer.rpm is not None and 0.93 * held <= pacer.rpm < held


def test_without_a_known_rate_a_rate_refusal_is_left_to_concurrency() -> None:
    rate = AdaptiveRate(Pacer())
    assert not rate.paced and not rate.refused(sent_at=0.0)


async def test_limits_are_learned_once_and_shared_among_workers(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def reply(request: CompletionRequest) -> Completion:
        return Completion(text="ok", model=request.model,
                          metadata={"ratelimit": {"requests_limit": 600.0, "source": "headers"}})

    provider = FunctionProvider(reply)
    events = EventBus()
    gate = Gate(limiter=TieredLimiter(8, 0), providers={"root": provider, "sub": provider},
                events=events)
    gate.rate.share(3)  # three workers on one journal: no rate known yet
    assert gate.pacer.rpm is None
    await gate.complete(REQUEST)
    assert gate.pacer.rpm == pytest.approx(200)  # the provider's 600, a third of it
    gate.rate.share(2)
    assert gate.pacer.rpm == pytest.approx(300)
    learned = [e for e in events.events if isinstance(e, RateLimitLearned)]
    assert [(e.limit, e.value) for e in learned] == [("rpm", 600.0)]
    changes = [(round(e.new), e.reason) for e in events.events if isinstance(e, RateChanged)]
    assert changes == [(200, "learned"), (300, "share")]


class AnnouncingBucket:
    """A GCRA bucket of ``rpm`` with room for ``burst`` requests at once, which announces
    its limit and how many requests it would take now (``x-ratelimit-*`` headers);
    ``claims`` overstates that room, as a provider enforcing a shorter window may."""

    def __init__(self, rpm: float, burst: int, *, claims: int | None = None) -> None:
        self.interval, self.burst, self.rpm = 60.0 / rpm, burst, rpm
        self.claims = claims
        self.tat = -float("inf")
        self.requests = self.refused = 0
        self.provider = FunctionProvider(self.reply, name="announcing-bucket")

    async def reply(self, request: CompletionRequest) -> Completion:
        now = trio.current_time()
        self.requests += 1
        tolerance = (self.burst - 1) * self.interval
        if now < max(self.tat, now) - tolerance:
            self.refused += 1
            raise RateLimitError(f"more than {self.rpm:g} requests per minute", status=429,
                                 retryable=True, retry_after=0.2)
        self.tat = max(self.tat, now) + self.interval
        room = int((now + tolerance - self.tat) // self.interval) + 1
        remaining = self.claims if self.claims is not None else max(0, room)
        await trio.sleep(0.2)
        limits = {"requests_limit": self.rpm, "requests_remaining": float(remaining),
                  "source": "headers"}
        return Completion(text="ok", model=request.model, input_tokens=1, output_tokens=1,
                          metadata={"ratelimit": limits})


async def test_the_burst_a_provider_announces_goes_at_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    # 600 rpm (one request per 0.1 s) with room for 10 at once.  Spread evenly, 30
    # requests after the first take 3.1 s; with the room announced after the first
    # request (9), 9 go at once.
    bucket = AnnouncingBucket(rpm=600, burst=10)
    events = EventBus()
    gate = Gate(limiter=TieredLimiter(32, 0), events=events,
                providers={"root": bucket.provider, "sub": bucket.provider})
    await gate.complete(REQUEST)  # learns the rate and the room
    await trio.sleep(1.0)  # the bucket fills again
    took = await fan_out(gate, 30)
    assert bucket.refused == 0
    assert took <= (30 - 9) * 0.1 + 0.2 + 0.05, took
    changes = [(e.limit, e.new, e.reason) for e in events.events if isinstance(e, RateChanged)]
    assert ("burst", 9, "learned") in changes


async def test_a_room_announced_too_large_is_dropped_at_the_first_refusal(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The provider says 20 would go now, and enforces one per 0.1 s: the first wave
    # is refused, and every request after it is paced evenly.
    bucket = AnnouncingBucket(rpm=600, burst=1, claims=20)
    events = EventBus()
    gate = Gate(limiter=TieredLimiter(16, 0), events=events, retry=RetryPolicy(max_retries=8),
                providers={"root": bucket.provider, "sub": bucket.provider})
    await gate.complete(REQUEST)
    await trio.sleep(1.0)
    await fan_out(gate, 60)
    assert bucket.requests - bucket.refused == 61  # every request answered
    assert bucket.refused <= 16, bucket.refused  # the first wave, no more
    changes = [(e.limit, e.new, e.reason) for e in events.events if isinstance(e, RateChanged)]
    assert ("burst", 20, "learned") in changes and ("burst", 1, "rate_limited") in changes


async def test_a_bucket_another_client_drained_is_not_taken_for_full(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Another client on the same key takes half the provider's room for 10: the next
    # reply says so, and the run sends no more at once than that reply allows.
    bucket = AnnouncingBucket(rpm=600, burst=10)
    gate = Gate(limiter=TieredLimiter(32, 0), events=EventBus(),
                providers={"root": bucket.provider, "sub": bucket.provider})
    await gate.complete(REQUEST)  # learns the rate and a room of 9
    await trio.sleep(1.0)  # the bucket fills again, and so does the run's own count
    bucket.tat = trio.current_time() + 5 * bucket.interval  # the neighbour took 5 of 10
    await gate.complete(REQUEST)  # its reply says how few are left
    await fan_out(gate, 20)
    assert bucket.refused == 0
