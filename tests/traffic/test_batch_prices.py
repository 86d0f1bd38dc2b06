"""Batch prices: the table's batch rates, a model without them unpriced, the estimate
showing both, and a ledger reserving what was sent before a stop."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm._config import RunConfig
from rlm._traffic.budget import Budget, BudgetLimits
from rlm._traffic.prices import PriceTable
from rlm.errors import BudgetExceeded, UsageError
from rlm.providers.base import CompletionRequest
from rlm.volley.estimate import estimate
from rlm.volley.layout import RequestLayout
from rlm.volley.records import VolleyTask


def test_every_shipped_model_has_batch_rates_at_half_the_live_ones() -> None:
    table = PriceTable.default()
    for model in ("gpt-4.1-mini", "claude-sonnet-4", "gpt-5", "fixture"):
        live, batch = table.lookup(model), table.batch().lookup(model)
        assert live is not None and batch is not None, model
        assert batch.input == pytest.approx(live.input / 2)
        assert batch.output == pytest.approx(live.output / 2)
        assert batch.cached_input == pytest.approx(live.cached_input / 2)
    assert table.batch().lookup("gpt-4.1-mini-2025-04-14") is not None  # by prefix, as live


def test_a_model_without_batch_rates_is_unpriced_there(tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text('{"mine": {"input": 1e-6, "output": 2e-6},\n'
                      ' "gpt-4.1": {"input": 3e-6, "output": 9e-6}}')
    table = PriceTable.load(prices, base=PriceTable.default())
    assert table.lookup("mine") is not None and table.batch().lookup("mine") is None
    # A file's entry replaces the shipped one whole: its batch rates go with it.
    assert table.batch().lookup("gpt-4.1") is None
    assert table.batch().lookup("gpt-4.1-mini") is not None
    bad = tmp_path / "bad.json"
    bad.write_text('{"m": {"input": 1, "output": 1, "batch_input": 1}}')
    with pytest.raises(UsageError, match="needs non-negative 'batch_input' and 'batch_output'"):
        PriceTable.load(bad)


def _tasks(n: int) -> list[VolleyTask]:
    return [VolleyTask(i, f"task {i} " * 20) for i in range(1, n + 1)]


def test_the_estimate_shows_the_batch_price_next_to_the_live_one() -> None:
    config = RunConfig(model="gpt-4.1-mini", max_tokens=100)
    layout = RequestLayout(["some context " * 50], model=config.model, max_tokens=100)
    table = PriceTable.default()
    live = estimate(_tasks(20), layout, config, table, cache_warm=False,
                    batch_prices=table.batch())
    assert live.cost is not None and live.batch_cost == pytest.approx(live.cost / 2)
    assert "(through the batch API, --batch-api: $" in live.lines()[2]
    sent = estimate(_tasks(20), layout, config, table, cache_warm=True,
                    batch_prices=table.batch(), batch_api=True)
    assert sent.lines()[2] == (f"  cost:   ${sent.batch_cost:.4f} at batch prices "
                               f"(live: ${sent.cost:.4f})")
    assert "up to 24 h" in sent.lines()[3]
    unpriced = estimate(_tasks(2), layout, RunConfig(model="mystery"), table,
                        cache_warm=False, batch_prices=table.batch(), batch_api=True)
    assert "unpriced at batch prices (live: unpriced)" in unpriced.lines()[2]


def test_what_was_sent_before_a_stop_is_reserved_whatever_the_limits() -> None:
    ledger = Budget(limits=BudgetLimits(max_llm_calls=1), prices=PriceTable.default())
    request = CompletionRequest(messages=[{"role": "user", "content": "x" * 400}],
                                model="gpt-4.1-mini", max_tokens=10)
    first = ledger.reserve(request)
    sent = ledger.reserve(request, sent=True)  # over the limit, but already sent
    assert ledger.reserved.calls == 2
    with pytest.raises(BudgetExceeded):
        ledger.reserve(request)
    ledger.release(first)  # never sent after all: no call counted
    ledger.settle(sent, None)
    assert ledger.spent.calls == 1 and ledger.reserved.calls == 0
