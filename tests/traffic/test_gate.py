"""The traffic gate in virtual time: exact makespans, retries, lanes, adaptation.

The fake provider is an in-process ``FunctionProvider``; trio's autojump clock makes every
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
from rlm._traffic.pacer import JITTER_MARGIN, Pacer
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
from rlm.testing.provider import FunctionProvider

Failure = Callable[[int, float], ProviderError | None]

#: Requests go this much wider apart than the rate asks (jitter).
SPACING = 1 + JITTER_MARGIN


def fake_provider(
    latency: float,
    failure: Failure = lambda n, t: None,
    metadata: dict[str, object] | None = None,
) -> FunctionProvider:
    """Answers after ``latency`` seconds; ``failure(attempt_no, now)`` may raise instead."""

    async def reply(request: CompletionRequest) -> Completion:
        error = failure(len(provider.times), trio.current_time())
        if error is not None:
            raise error
        await trio.sleep(latency)
        return Completion(
            text="ok",
            model=request.model,
            input_tokens=10,
            output_tokens=2,
            metadata=dict(metadata or {}),
        )

    provider = FunctionProvider(reply, name="fake")
    return provider


def make_gate(
    provider: FunctionProvider,
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


async def test_100_requests_c10_2s_600rpm_take_20_9s_plus_the_margin(
    autojump_clock: trio.abc.Clock,
) -> None:
    provider = fake_provider(latency=2.0)
    gate, _, ledger = make_gate(provider, total=10, rpm=600)
    # Nine spacings into the last wave of ten, after nine waves of 2 s.
    assert await fan_out(gate, 100) == pytest.approx(18 + 9 * 0.1 * SPACING + 2)
    assert provider.peak["all"] == 10 and ledger.usage().llm_calls == 100
    gaps = [b - a for a, b in zip(provider.times, provider.times[1:], strict=False)]
    assert min(gaps) >= 0.1 * SPACING - 1e-9  # never faster than 600 rpm, with a margin


async def test_37_requests_c8_1_5s_take_7_5s_and_four_spacings(
    autojump_clock: trio.abc.Clock,
) -> None:
    provider = fake_provider(latency=1.5)
    gate, _, _ = make_gate(provider, total=8, rpm=100_000)
    assert await fan_out(gate, 37) == pytest.approx(7.5 + 4 * 0.0006 * SPACING)


async def test_without_limits_the_cap_is_the_only_bound(autojump_clock: trio.abc.Clock) -> None:
    gate, _, _ = make_gate(fake_provider(latency=0.5), total=8)
    assert await fan_out(gate, 32) == pytest.approx(2.0)  # ceil(32/8) * 0.5, no slow start


async def test_retry_after_7s_gives_attempts_at_0_7_14(autojump_clock: trio.abc.Clock) -> None:
    def limited(n: int, now: float) -> ProviderError | None:
        if n <= 2:
            return RateLimitError("slow down", status=429, retryable=True, retry_after=7.0)
        return None

    provider = fake_provider(latency=1.0, failure=limited)
    gate, events, ledger = make_gate(provider, total=4)
    await gate.complete(request())
    assert provider.times == [0.0, 7.0, 14.0]
    assert ledger.usage().llm_calls == 3
    retries = [e for e in events.events if isinstance(e, LLMRetry)]
    assert [(e.attempt, e.delay_s, e.retry_after) for e in retries] == [
        (2, 7.0, True),
        (3, 7.0, True),
    ]


async def test_root_step_waits_zero_while_50_subs_saturate(autojump_clock: trio.abc.Clock) -> None:
    provider = fake_provider(latency=1.0)
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
    provider = fake_provider(1.0, failure=lambda n, t: ProviderStatusError("bad", status=400))
    gate, _, ledger = make_gate(provider, total=2)
    with pytest.raises(ProviderStatusError):
        await gate.complete(request())
    assert ledger.usage().llm_calls == 1


async def test_refused_credentials_are_one_attempt(autojump_clock: trio.abc.Clock) -> None:
    provider = fake_provider(1.0, failure=lambda n, t: AuthenticationError("no", status=401))
    gate, _, ledger = make_gate(provider, total=2)
    with pytest.raises(AuthenticationError):
        await gate.complete(request())
    assert ledger.usage().llm_calls == 1 and provider.times == [0.0]


async def test_network_errors_retry_with_backoff_but_do_not_shrink(
    autojump_clock: trio.abc.Clock,
) -> None:
    provider = fake_provider(
        1.0, failure=lambda n, t: ProviderConnectionError("reset") if n <= 3 else None
    )
    gate, events, ledger = make_gate(provider, total=4, reserved=1, retries=3)
    await gate.complete(request())
    assert ledger.usage().llm_calls == 4
    delays = [
        b - a for a, b in zip(provider.times, provider.times[1:], strict=False)
    ]
    for attempt, delay in enumerate(delays, start=1):
        ceiling = 0.5 * 2.0 ** (attempt - 1)
        assert 0 <= delay <= ceiling  # full jitter
    assert not [e for e in events.events if isinstance(e, CapacityChanged)]


async def test_retries_give_up_after_max_retries(autojump_clock: trio.abc.Clock) -> None:
    provider = fake_provider(
        0.1, failure=lambda n, t: ProviderStatusError("boom", status=500, retryable=True)
    )
    gate, _, ledger = make_gate(provider, total=2, retries=2)
    with pytest.raises(ProviderStatusError):
        await gate.complete(request())
    assert ledger.usage().llm_calls == 3


async def test_a_retry_after_past_the_deadline_ends_the_run(autojump_clock: trio.abc.Clock) -> None:
    provider = fake_provider(
        0.1,
        failure=lambda n, t: RateLimitError("later", status=429, retryable=True, retry_after=120.0),
    )
    gate, _, _ = make_gate(provider, total=2, deadline=30.0)
    with pytest.raises(RunTimeout, match=r"asked to wait 2 min before retrying, past the 30 s"):
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

    provider = fake_provider(latency=1.0, failure=first_wave_limited)
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
    accepted = {"now": 0, "peak": 0}

    async def capped(request: CompletionRequest) -> Completion:
        if accepted["now"] >= 3:
            raise RateLimitError("too many", status=429, retryable=True, retry_after=None)
        accepted["now"] += 1
        accepted["peak"] = max(accepted["peak"], accepted["now"])
        try:
            await trio.sleep(1.0)
        finally:
            accepted["now"] -= 1
        return Completion(text="ok", model=request.model, input_tokens=10, output_tokens=2)

    gate, events, _ = make_gate(FunctionProvider(capped), total=9, reserved=1, retries=10)
    await fan_out(gate, 40)
    assert accepted["peak"] <= 3
    capacities = [e.new for e in events.events if isinstance(e, CapacityChanged)]
    assert capacities and min(capacities) <= 3
    rejected = sum(1 for e in events.events if getattr(e, "http_status", None) == 429)
    assert rejected <= 20  # adaptation keeps 429s well below one per request


async def test_even_spacing_by_default_and_burst_on_request(autojump_clock: trio.abc.Clock) -> None:
    spaced = fake_provider(latency=0.0)
    gate, _, _ = make_gate(spaced, total=10, rpm=60)
    await fan_out(gate, 3)
    assert spaced.times == pytest.approx([0.0, SPACING, 2 * SPACING])
    bursty = fake_provider(latency=0.0)
    gate, _, _ = make_gate(bursty, total=10, rpm=60, burst=3)
    start = trio.current_time()
    await fan_out(gate, 4)
    assert [t - start for t in bursty.times] == pytest.approx([0.0, 0.0, 0.0, SPACING])


async def test_tokens_per_minute_paces_by_estimate(autojump_clock: trio.abc.Clock) -> None:
    provider = fake_provider(latency=0.0)
    gate, _, _ = make_gate(provider, total=10, tpm=600)  # 10 tokens per second
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            # 40 chars → 10 prompt tokens + max_tokens 10 = 20 tokens = 2 s each
            nursery.start_soon(gate.complete, request(chars=40))
    assert provider.times == pytest.approx([0.0, 2 * SPACING, 4 * SPACING])


async def test_limits_are_learned_from_headers_when_not_given(
    autojump_clock: trio.abc.Clock,
) -> None:
    provider = fake_provider(latency=0.0, metadata={"ratelimit": {"requests_limit": 120.0}})
    gate, events, _ = make_gate(provider, total=10)
    await gate.complete(request())
    assert gate.pacer.rpm == 120.0
    assert [e.limit for e in events.events if isinstance(e, RateLimitLearned)] == ["rpm"]
    await fan_out(gate, 2)
    # Paced from the moment it was learned, as announced: no margin (see the pacer).
    assert provider.times[1:] == pytest.approx([0.0, 0.5])


async def test_a_reply_cut_at_the_output_cap_before_any_text_is_an_error_not_an_answer(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A reasoning model that spent the whole cap thinking answers "" with
    # finish_reason "length": that is not the model's answer, and sending it again
    # would stop at the same cap.
    async def reply(request: CompletionRequest) -> Completion:
        return Completion(text="", model=request.model, input_tokens=10, output_tokens=4096,
                          finish_reason="length")

    provider = FunctionProvider(reply, name="thinker")
    gate, _, ledger = make_gate(provider, total=4, retries=3)
    asked = CompletionRequest(messages=[{"role": "user", "content": "x"}], model="m",
                                lane="sub", max_tokens=4096)
    with pytest.raises(ProviderError, match=r"output cap \(max_tokens=4096\) before writing any "
                       r"text .*raise max_tokens"):
        await gate.complete(asked)
    assert len(provider.times) == 1  # not retried
    usage = ledger.usage()
    assert usage.llm_calls == 1 and usage.output_tokens == 4096  # paid for all the same

    # A reply cut at the cap after some text is the model's (partial) answer.
    async def partial(request: CompletionRequest) -> Completion:
        return Completion(text="half an answ", model=request.model, finish_reason="length")

    cut = await make_gate(FunctionProvider(partial), total=4)[0].complete(asked)
    assert cut.text == "half an answ"
