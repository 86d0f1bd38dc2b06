"""The budget ledger: exact call limits under any interleaving, bounded token overshoot."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from rlm._events import EventBus
from rlm._traffic.budget import Budget, BudgetLimits, SessionTotals
from rlm._traffic.gate import Gate
from rlm._traffic.limiter import TieredLimiter
from rlm._traffic.prices import PriceTable
from rlm._traffic.retry import RetryPolicy
from rlm.errors import BudgetExceeded, ProviderStatusError, UsageError
from rlm.providers.base import Completion, CompletionRequest
from rlm.testing.provider import FunctionProvider


def random_provider(
    rng: random.Random, fail_rate: float, output_tokens: int = 50
) -> FunctionProvider:
    """Random latency, random retryable failures, random output size."""

    async def reply(request: CompletionRequest) -> Completion:
        await trio.sleep(rng.random())
        if rng.random() < fail_rate:
            raise ProviderStatusError("flaky", status=500, retryable=True)
        return Completion(
            text="x",
            model=request.model,
            input_tokens=100,
            output_tokens=rng.randint(1, output_tokens),
        )

    return FunctionProvider(reply)


def sub_request(chars: int = 400, max_tokens: int | None = 50) -> CompletionRequest:
    return CompletionRequest(
        messages=[{"role": "user", "content": "y" * chars}],
        model="fixture",
        lane="sub",
        max_tokens=max_tokens,
    )


def run_batches(
    limits: BudgetLimits,
    batches: list[int],
    fail_rate: float,
    seed: int,
    retries: int,
    max_tokens: int | None = 50,
) -> tuple[Budget, FunctionProvider]:
    budget = Budget(limits=limits)
    provider = random_provider(random.Random(seed), fail_rate)

    async def main() -> None:
        gate = Gate(
            limiter=TieredLimiter(6, 1),
            providers={"root": provider, "sub": provider},
            events=EventBus(keep=False),
            retry=RetryPolicy(max_retries=retries, rng=random.Random(seed)),
            ledger=budget,
        )

        async def one() -> None:
            # Refused or failed for good: the ledger is what this test checks.
            with contextlib.suppress(BudgetExceeded, ProviderStatusError):
                await gate.complete(sub_request(max_tokens=max_tokens))

        async def batch(size: int) -> None:
            try:
                budget.check_batch(size)
            except BudgetExceeded:
                return
            async with trio.open_nursery() as nursery:
                for _ in range(size):
                    nursery.start_soon(one)

        async with trio.open_nursery() as nursery:
            for size in batches:
                nursery.start_soon(batch, size)
                await trio.sleep(0.1)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return budget, provider


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(1, 40),
    batches=st.lists(st.integers(1, 16), min_size=1, max_size=8),
    fail_rate=st.sampled_from([0.0, 0.2, 0.5]),
    retries=st.integers(0, 4),
    seed=st.integers(0, 10_000),
)
def test_call_limit_is_never_exceeded(
    limit: int, batches: list[int], fail_rate: float, retries: int, seed: int
) -> None:
    budget, provider = run_batches(
        BudgetLimits(max_llm_calls=limit), batches, fail_rate, seed, retries
    )
    assert len(provider.requests) <= limit
    assert budget.spent.calls == len(provider.requests)
    assert budget.reserved.calls == 0 and budget.reserved.input_tokens == 0


@settings(max_examples=40, deadline=None)
@given(
    limit=st.integers(200, 5_000),
    batches=st.lists(st.integers(1, 16), min_size=1, max_size=6),
    seed=st.integers(0, 10_000),
)
def test_token_overshoot_is_bounded_by_the_in_flight_estimate_error(
    limit: int, batches: list[int], seed: int
) -> None:
    # With max_tokens set, each request's estimate (100 prompt + 50 output) is an upper
    # bound of its real use (100 + at most 50), so the limit is never passed at all.
    budget, _ = run_batches(BudgetLimits(max_total_tokens=limit), batches, 0.0, seed, 0)
    assert budget.spent.input_tokens + budget.spent.output_tokens <= limit


def test_without_max_tokens_overshoot_stays_within_the_documented_bound() -> None:
    # Estimates say 1,024 output tokens; the provider returns at most 50, so estimates are
    # high and the real total stays under the limit; the bound is the sum of in-flight errors.
    budget, provider = run_batches(
        BudgetLimits(max_total_tokens=3_000), [16, 16], 0.0, 1, 0, max_tokens=None
    )
    used = budget.spent.input_tokens + budget.spent.output_tokens
    assert used <= 3_000 and len(provider.requests) >= 1


def test_a_batch_that_cannot_fit_is_refused_whole() -> None:
    budget = Budget(limits=BudgetLimits(max_llm_calls=5))
    with pytest.raises(BudgetExceeded, match="a batch of 16 sub-queries needs 16"):
        budget.check_batch(16)
    assert budget.spent.calls == 0
    budget.check_batch(5)


def test_reserve_names_the_limit_that_refused() -> None:
    budget = Budget(limits=BudgetLimits(max_input_tokens=150))
    ticket = budget.reserve(sub_request(chars=400))  # 100 tokens
    with pytest.raises(BudgetExceeded, match="max_input_tokens=150"):
        budget.reserve(sub_request(chars=400))
    budget.settle(ticket, Completion(text="", model="fixture", input_tokens=100))
    assert budget.remaining()["input_tokens"] == 50


def test_a_session_total_that_bounds_the_query_is_the_limit_named() -> None:
    # The query's limits are what is left of the session's totals: naming them
    # ("max_llm_calls=1 ... max_llm_calls=None lifts it") gave the wrong advice.
    totals = SessionTotals(max_total_llm_calls=3, max_total_cost=0.01, llm_calls_before=2)
    budget = Budget(limits=BudgetLimits(max_llm_calls=1, max_cost=0.0), session=totals)
    with pytest.raises(BudgetExceeded, match=r"max_total_cost=0.01 reached .*raise max_total_cost"):
        budget.reserve(
            CompletionRequest(messages=[{"role": "user", "content": "q"}], model="gpt-4o")
        )
    budget = Budget(limits=BudgetLimits(max_llm_calls=1), session=totals)
    with pytest.raises(BudgetExceeded, match="only 1 of max_total_llm_calls=3 remain"):
        budget.check_batch(2)
    budget.reserve(sub_request())
    with pytest.raises(BudgetExceeded, match=r"max_total_llm_calls=3 reached \(2 sent by the "):
        budget.reserve(sub_request())


def test_provider_reported_cost_wins_and_unknown_models_are_unpriced() -> None:
    budget = Budget()
    ticket = budget.reserve(sub_request())
    budget.settle(
        ticket, Completion(text="", model="fixture", input_tokens=10, metadata={"cost": 0.25})
    )
    unknown = CompletionRequest(messages=[{"role": "user", "content": "q"}], model="mystery-9")
    budget.settle(budget.reserve(unknown), Completion(text="", model="mystery-9", input_tokens=9))
    report = budget.usage_report()
    assert report["cost"] == 0.25 and report["unpriced_calls"] == 1
    assert report["by_model"]["mystery-9"]["unpriced_calls"] == 1


def test_max_cost_refuses_unpriced_models() -> None:
    budget = Budget(limits=BudgetLimits(max_cost=1.0))
    unknown = CompletionRequest(messages=[{"role": "user", "content": "q"}], model="mystery-9")
    with pytest.raises(BudgetExceeded, match="has no price"):
        budget.reserve(unknown)


def test_prices_match_by_prefix_and_provider_prefix() -> None:
    table = PriceTable.default()
    mini = table.lookup("gpt-4.1-mini")
    assert mini is not None
    assert table.lookup("gpt-4.1-mini-2025-04-14") == mini
    assert table.lookup("openai/gpt-4.1-mini") == mini
    assert table.lookup("no-such-model") is None


def test_a_broken_price_table_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "prices.json"
    bad.write_text('{\n  "m": {"input": 1e-6, "output": 2e-6},\n  "n": {"input": 1e-6,, }\n}\n')
    with pytest.raises(UsageError, match=r"prices\.json is not valid JSON: .* line 3"):
        PriceTable.load(bad)
    bad.write_text('{\n  "m": {"input": 1e-6, "output": 2e-6},\n  "n": {"input": -1}\n}\n')
    with pytest.raises(UsageError, match=r"prices\.json, line 3: 'n' needs non-negative"):
        PriceTable.load(bad)
