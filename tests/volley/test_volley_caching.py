"""Volley prompt caching at the provider boundary: the breakpoint and what is counted."""

from __future__ import annotations

import json

import httpx2
import trio

from rlm._traffic.budget import Budget, BudgetLimits
from rlm._traffic.prices import ModelPrice, PriceTable
from rlm.providers.anthropic import AnthropicProvider
from rlm.volley import VolleyTask
from rlm.volley.layout import RequestLayout

BIG = "the magic number is 7. " * 400


def _anthropic(bodies: list[dict[str, object]], *, fresh: int, output: int, read: int,
               written: int) -> AnthropicProvider:
    """Anthropic's provider over a mock transport that keeps each request body and
    answers with this usage."""

    def handler(req: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(req.content))
        usage = {"input_tokens": fresh, "output_tokens": output,
                 "cache_read_input_tokens": read, "cache_creation_input_tokens": written}
        return httpx2.Response(200, json={"model": "claude-sonnet-4", "usage": usage,
                                          "content": [{"type": "text", "text": "ok"}]})

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return AnthropicProvider(client, "https://api.anthropic.com", api_key="k")


async def test_anthropic_marks_the_end_of_the_shared_context_and_counts_cache_writes() -> None:
    bodies: list[dict[str, object]] = []

    provider = _anthropic(bodies, fresh=5, output=3, read=2000, written=40)
    layout = RequestLayout([BIG], model="claude-sonnet-4")
    done = await provider.complete(layout.request(VolleyTask(1, "the task"), "t1"))
    body = bodies[0]
    messages = body["messages"]
    assert isinstance(messages, list)
    context, task = messages
    assert context["content"] == [{"type": "text", "text": layout.prefix[1]["content"],
                                   "cache_control": {"type": "ephemeral"}}]
    assert task == {"role": "user", "content": "the task"}
    assert isinstance(body["system"], str)  # the breakpoint is after the context, not here
    assert done.input_tokens == 5 + 2000 + 40 and done.metadata["cached_tokens"] == 2000


async def test_a_short_prefix_gets_no_breakpoint() -> None:
    layout = RequestLayout(["tiny"], model="m")
    assert layout.request(VolleyTask(1, "t"), "t1").cache_prefix == 0
    assert RequestLayout([BIG], model="m").request(VolleyTask(1, "t"), "t1").cache_prefix == 2


async def test_anthropic_cache_writes_are_priced_at_1_25_times_the_input_rate() -> None:
    provider = _anthropic([], fresh=100, output=10, read=1000, written=2000)
    request = RequestLayout([BIG], model="claude-sonnet-4").request(VolleyTask(1, "t"), "t1")
    done = await provider.complete(request)
    assert done.metadata["cache_write_tokens"] == 2000 and done.input_tokens == 3100
    prices = PriceTable.default()
    price = prices.lookup("claude-sonnet-4")
    assert price is not None
    ledger = Budget(limits=BudgetLimits(), prices=prices)
    cost = ledger.settle(ledger.reserve(request), done)
    written = 2000 * 1.25 * price.input  # a cache write costs a quarter more than input
    expected = 100 * price.input + 1000 * price.cached_input + written + 10 * price.output
    assert cost is not None and abs(cost - expected) < 1e-12
    # A table entry may name its own write rate.
    own = PriceTable({"m": ModelPrice(1e-6, 2e-6, 1e-7, cache_write_input=3e-6)}).lookup("m")
    assert own is not None and abs(own.cost(100, 0, 0, 100) - 3e-4) < 1e-15


async def test_max_cost_holds_when_every_request_writes_the_prompt_cache(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Worst case for the wall: each request writes the shared prefix to the cache
    # (Anthropic bills it at 1.25 x input), and the provider reports exactly the
    # tokens that were estimated.  Reserved at the plain input rate, the requests let
    # in flight together would pass --max-cost; reserved at the write rate, never.
    from rlm import RLM

    layout = RequestLayout([BIG], model="claude-sonnet-4", max_tokens=10)
    request = layout.request(VolleyTask(1, "task 1"), "t1")
    total = sum(len(m["content"]) for m in request.messages) // 4
    prefix = sum(len(m["content"]) for m in request.messages[: request.cache_prefix]) // 4

    async def handler(req: httpx2.Request) -> httpx2.Response:
        await trio.sleep(1.0)  # every request of the wave is in flight at once
        usage = {"input_tokens": total - prefix, "output_tokens": 10,
                 "cache_read_input_tokens": 0, "cache_creation_input_tokens": prefix}
        return httpx2.Response(200, json={"model": "claude-sonnet-4", "usage": usage,
                                          "content": [{"type": "text", "text": "ok"}]})

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    provider = AnthropicProvider(client, "https://api.anthropic.com", api_key="k")
    price = PriceTable.default().lookup("claude-sonnet-4")
    assert price is not None
    limit = 4 * price.cost(total, 10) + 1e-9  # four requests, at the plain input rate
    model = RLM(providers={"root": provider, "sub": provider}, model="claude-sonnet-4",
                max_cost=limit, max_tokens=10, max_concurrent=8)
    result = await model.avolley([f"task {i}" for i in range(1, 9)], context=BIG,
                                 cache_warm=False)  # all at once
    assert result.status == "budget_exceeded"
    assert result.summary.total_cost is not None
    assert 0 < result.summary.total_cost <= limit


def test_the_estimate_prices_cache_writes_at_the_rate_the_budget_reserves() -> None:
    # The budget reserves a cache-writing request's prefix at the write rate (1.25 x input
    # on Anthropic); an estimate at the plain input rate promised less than it would cost.
    from rlm import RLM
    from rlm.providers.open import bills_cache_writes
    from rlm.volley.estimate import estimate

    config = RLM(provider="anthropic", model="claude-sonnet-4", max_tokens=10).config
    assert bills_cache_writes(config)
    assert not bills_cache_writes(RLM(provider="fixture").config)
    layout = RequestLayout([BIG], model="claude-sonnet-4", max_tokens=10)
    tasks = [VolleyTask(i, f"task {i}") for i in range(1, 5)]
    prices = PriceTable.default()
    price = prices.lookup("claude-sonnet-4")
    assert price is not None and layout.cacheable
    prefix = layout.prefix_chars // 4
    for warm, writers in ((True, 1), (False, 4)):  # warmed: only the first task writes
        est = estimate(tasks, layout, config, prices, cache_warm=warm, bills_cache_writes=True)
        plain = estimate(tasks, layout, config, prices, cache_warm=warm)
        assert est.written_tokens == writers * prefix and plain.written_tokens == 0
        assert est.cost is not None and plain.cost is not None
        extra = writers * prefix * (1.25 - 1) * price.input
        assert abs(est.cost - plain.cost - extra) < 1e-12
        assert f"{writers * prefix:,} at the cache-write rate" in est.lines()[1]
