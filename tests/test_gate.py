"""The traffic gate in virtual time: exact makespans, retries, lanes, adaptation.

Fake providers are in-process objects; trio's autojump clock makes every
sleep instant and every time exact.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from rlm._events import CapacityChanged, EventBus, LLMRequest, LLMRetry, RateLimitLearned
from rlm._traffic.budget import Budget
from rlm._traffic.gate import Gate
from rlm._traffic.limiter import TieredLimiter
from rlm._traffic.pacer import Pacer
from rlm._traffic.retry import RetryPolicy
from rlm.errors import (
    AuthenticationError,
    ProviderConnectionError,
    ProviderError,
    ProviderStatusError,
    RateLimitError,
    RunTimeout,
)
from rlm.providers.base import Completion, CompletionRequest, Lane

Failure = Callable[[int, float], ProviderError | None]


class FakeProvider:
    """Answers after ``latency`` seconds; ``failure(attempt_no, now)`` may raise instead."""

    name = "fake"

    def __init__(
        self,
        latency: float,
        failure: Failure = lambda n, t: None,
        metadata: dict[str, object] | None = None,
    ) -> None:
        self.latency = latency
        self.failure = failure
        self.metadata = metadata or {}
        self.attempt_times: list[float] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def complete(self, request: CompletionRequest) -> Completion:
        self.attempt_times.append(trio.current_time())
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            error = self.failure(len(self.attempt_times), trio.current_time())
            if error is not None:
                raise error
            await trio.sleep(self.latency)
            return Completion(
                text="ok",
                model=request.model,
                input_tokens=10,
                output_tokens=2,
                metadata=dict(self.metadata),
            )
        finally:
            self.in_flight -= 1

    async def aclose(self) -> None:
        return None


def make_gate(
    provider: FakeProvider,
    *,
    total: int,
    reserved: int = 0,
    rpm: float | None = None,
    tpm: float | None = None,
    burst: int = 1,
    retries: int = 3,
    deadline: float = float("inf"),
) -> tuple[Gate, EventBus, Budget]:
    events = EventBus()
    gate = Gate(
        limiter=TieredLimiter(total, reserved),
        providers={"root": provider, "sub": provider},
        events=events,
        pacer=Pacer(rpm=rpm, tpm=tpm, burst=burst),
        retry=RetryPolicy(max_retries=retries),
        deadline=lambda: deadline,
    )
    return gate, events, gate.ledger


def request(lane: Lane = "sub", chars: int = 40) -> CompletionRequest:
    return CompletionRequest(
        messages=[{"role": "user", "content": "x" * chars}], model="m", lane=lane, max_tokens=10
    )


async def fan_out(gate: Gate, n: int) -> float:
    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(gate.complete, request())
    return trio.current_time()


async def test_100_requests_c10_2s_600rpm_take_20_9s(autojump_clock: trio.abc.Clock) -> None:
    provider = FakeProvider(latency=2.0)
    gate, _, ledger = make_gate(provider, total=10, rpm=600)
    assert await fan_out(gate, 100) == pytest.approx(20.9)
    assert provider.max_in_flight == 10 and ledger.usage().llm_calls == 100
    gaps = [b - a for a, b in zip(provider.attempt_times, provider.attempt_times[1:], strict=False)]
    assert min(gaps) >= 0.1 - 1e-9  # never faster than 600 rpm


async def test_37_requests_c8_1_5s_take_7_5024s(autojump_clock: trio.abc.Clock) -> None:
    provider = FakeProvider(latency=1.5)
    gate, _, _ = make_gate(provider, total=8, rpm=100_000)
    assert await fan_out(gate, 37) == pytest.approx(7.5024)


async def test_without_limits_the_cap_is_the_only_bound(autojump_clock: trio.abc.Clock) -> None:
    gate, _, _ = make_gate(FakeProvider(latency=0.5), total=8)
    assert await fan_out(gate, 32) == pytest.approx(2.0)  # ceil(32/8) * 0.5, no slow start


async def test_retry_after_7s_gives_attempts_at_0_7_14(autojump_clock: trio.abc.Clock) -> None:
    def limited(n: int, now: float) -> ProviderError | None:
        if n <= 2:
            return RateLimitError("slow down", status=429, retryable=True, retry_after=7.0)
        return None

    provider = FakeProvider(latency=1.0, failure=limited)
    gate, events, ledger = make_gate(provider, total=4)
    await gate.complete(request())
    assert provider.attempt_times == [0.0, 7.0, 14.0]
    assert ledger.usage().llm_calls == 3
    retries = [e for e in events.events if isinstance(e, LLMRetry)]
    assert [(e.attempt, e.delay_s, e.retry_after) for e in retries] == [
        (2, 7.0, True),
        (3, 7.0, True),
    ]


async def test_root_step_waits_zero_while_50_subs_saturate(autojump_clock: trio.abc.Clock) -> None:
    provider = FakeProvider(latency=1.0)
    gate, events, _ = make_gate(provider, total=8, reserved=1, rpm=6000)
    async with trio.open_nursery() as nursery:
        for _ in range(50):
            nursery.start_soon(gate.complete, request("sub"))
        await trio.sleep(0.5)
        nursery.start_soon(gate.complete, request("root"))
    root = [e for e in events.events if isinstance(e, LLMRequest) and e.lane == "root"]
    assert len(root) == 1
    assert root[0].t == pytest.approx(0.5)
    assert root[0].queue_wait_s == 0 and root[0].pace_wait_s == 0


async def test_client_errors_are_not_retried(autojump_clock: trio.abc.Clock) -> None:
    provider = FakeProvider(1.0, failure=lambda n, t: ProviderStatusError("bad", status=400))
    gate, _, ledger = make_gate(provider, total=2)
    with pytest.raises(ProviderStatusError):
        await gate.complete(request())
    assert ledger.usage().llm_calls == 1


async def test_refused_credentials_are_one_attempt(autojump_clock: trio.abc.Clock) -> None:
    provider = FakeProvider(1.0, failure=lambda n, t: AuthenticationError("no", status=401))
    gate, _, ledger = make_gate(provider, total=2)
    with pytest.raises(AuthenticationError):
        await gate.complete(request())
    assert ledger.usage().llm_calls == 1 and provider.attempt_times == [0.0]


async def test_network_errors_retry_with_backoff_but_do_not_shrink(
    autojump_clock: trio.abc.Clock,
) -> None:
    provider = FakeProvider(
        1.0, failure=lambda n, t: ProviderConnectionError("reset") if n <= 3 else None
    )
    gate, events, ledger = make_gate(provider, total=4, reserved=1, retries=3)
    await gate.complete(request())
    assert ledger.usage().llm_calls == 4
    delays = [
        b - a for a, b in zip(provider.attempt_times, provider.attempt_times[1:], strict=False)
    ]
    for attempt, delay in enumerate(delays, start=1):
        ceiling = 2.0 ** (attempt - 1)
        assert ceiling / 2 <= delay <= ceiling  # equal jitter
    assert not [e for e in events.events if isinstance(e, CapacityChanged)]


async def test_retries_give_up_after_max_retries(autojump_clock: trio.abc.Clock) -> None:
    provider = FakeProvider(
        0.1, failure=lambda n, t: ProviderStatusError("boom", status=500, retryable=True)
    )
    gate, _, ledger = make_gate(provider, total=2, retries=2)
    with pytest.raises(ProviderStatusError):
        await gate.complete(request())
    assert ledger.usage().llm_calls == 3


async def test_a_retry_after_past_the_deadline_ends_the_run(autojump_clock: trio.abc.Clock) -> None:
    provider = FakeProvider(
        0.1,
        failure=lambda n, t: RateLimitError("later", status=429, retryable=True, retry_after=120.0),
    )
    gate, _, _ = make_gate(provider, total=2, deadline=30.0)
    with pytest.raises(RunTimeout, match=r"asked to wait 120\.0 s"):
        await gate.complete(request())
    assert trio.current_time() == 0.0  # it did not sleep first


async def test_a_burst_of_429s_halves_capacity_once_then_it_grows_back(
    autojump_clock: trio.abc.Clock,
) -> None:
    def first_wave_limited(n: int, now: float) -> ProviderError | None:
        return (
            RateLimitError("busy", status=429, retryable=True, retry_after=1.0)
            if now < 0.5
            else None
        )

    provider = FakeProvider(latency=1.0, failure=first_wave_limited)
    gate, events, _ = make_gate(provider, total=9, reserved=1)
    await fan_out(gate, 64)
    changes = [e for e in events.events if isinstance(e, CapacityChanged)]
    assert changes[0].reason == "overload" and (changes[0].old, changes[0].new) == (8, 4)
    assert sum(1 for e in changes if e.reason == "overload") == 1
    assert changes[-1].new == 8  # grew back to the configured cap, never above
    assert max(e.new for e in changes) == 8


async def test_capacity_converges_under_a_hidden_concurrency_cap(
    autojump_clock: trio.abc.Clock,
) -> None:
    class CappedProvider(FakeProvider):
        async def complete(self, request: CompletionRequest) -> Completion:
            if self.in_flight >= 3:
                self.attempt_times.append(trio.current_time())
                raise RateLimitError("too many", status=429, retryable=True, retry_after=None)
            return await super().complete(request)

    provider = CappedProvider(latency=1.0)
    gate, events, _ = make_gate(provider, total=9, reserved=1, retries=10)
    await fan_out(gate, 40)
    assert provider.max_in_flight <= 3
    capacities = [e.new for e in events.events if isinstance(e, CapacityChanged)]
    assert capacities and min(capacities) <= 3
    rejected = sum(1 for e in events.events if getattr(e, "http_status", None) == 429)
    assert rejected <= 20  # adaptation keeps 429s well below one per request


async def test_even_spacing_by_default_and_burst_on_request(autojump_clock: trio.abc.Clock) -> None:
    spaced = FakeProvider(latency=0.0)
    gate, _, _ = make_gate(spaced, total=10, rpm=60)
    await fan_out(gate, 3)
    assert spaced.attempt_times == [0.0, 1.0, 2.0]
    bursty = FakeProvider(latency=0.0)
    gate, _, _ = make_gate(bursty, total=10, rpm=60, burst=3)
    start = trio.current_time()
    await fan_out(gate, 4)
    assert [t - start for t in bursty.attempt_times] == [0.0, 0.0, 0.0, 1.0]


async def test_tokens_per_minute_paces_by_estimate(autojump_clock: trio.abc.Clock) -> None:
    provider = FakeProvider(latency=0.0)
    gate, _, _ = make_gate(provider, total=10, tpm=600)  # 10 tokens per second
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            # 40 chars → 10 prompt tokens + max_tokens 10 = 20 tokens = 2 s each
            nursery.start_soon(gate.complete, request(chars=40))
    assert provider.attempt_times == [0.0, 2.0, 4.0]


async def test_limits_are_learned_from_headers_when_not_given(
    autojump_clock: trio.abc.Clock,
) -> None:
    provider = FakeProvider(latency=0.0, metadata={"ratelimit": {"requests_limit": 120.0}})
    gate, events, _ = make_gate(provider, total=10)
    await gate.complete(request())
    assert gate.pacer.rpm == 120.0
    assert [e.limit for e in events.events if isinstance(e, RateLimitLearned)] == ["rpm"]
    await fan_out(gate, 2)
    assert provider.attempt_times[1:] == [0.0, 0.5]  # paced from the moment it was learned
