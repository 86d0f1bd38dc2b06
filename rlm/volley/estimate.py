"""What a volley will cost before anything is sent: tokens, dollars, time.

Tokens are characters / 4.  Every request carries the system prompt and the
shared context, so they count once per task; with prompt caching (a prefix
long enough to cache, and the warm-up on) every task after the first reads
that prefix at the cached rate.  Where the provider bills writing the prefix
to its cache (Anthropic), a task that is not expected to read it writes it at
the cache-write rate, as the budget reserves it.  Output is each task's cap
(its ``max_tokens``, else the setting's): what it may cost at most, as the budget
reserves it; a task sent with no cap counts the budget's own guess
(``DEFAULT_OUTPUT_ESTIMATE``).  Time assumes every task takes
``latency`` seconds and the volley runs at the configured concurrency and
rates.  ``--rlm`` tasks are estimated as two root steps each plus one pass of
sub-queries over the shared context (a floor: models may do more).

A completion volley's cost is also priced at the rates of the provider's batch
service (``--batch-api``: about half), with no prompt-cache reads counted (a batch
has no warm-up; a provider caches inside one at best effort).  A volley sent as
provider batches shows that price first and takes up to the batch window (24 h).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from rlm import prompts
from rlm._config import RunConfig
from rlm._durations import format_duration
from rlm._spelling import setting
from rlm._traffic.prices import PriceTable
from rlm._traffic.usage import DEFAULT_OUTPUT_ESTIMATE
from rlm.volley.layout import RequestLayout
from rlm.volley.records import VolleyTask

__all__ = ["CONFIRM_TASKS", "CONFIRM_TOKENS", "Estimate", "estimate"]

CONFIRM_TASKS = 10  # more tasks than this: show the estimate and ask on a TTY
CONFIRM_TOKENS = 50_000  # or more estimated tokens than this


@dataclass(frozen=True)
class Estimate:
    tasks: int
    input_tokens: int
    cached_tokens: int  # the part of input_tokens expected to be read from a cache
    output_tokens: int
    output_assumed: bool  # some task is sent with no cap: its output is a guess
    cost: float | None  # None: some model has no price
    seconds: float
    latency: float
    written_tokens: int = 0  # the part of input_tokens expected to be written to a cache
    #: What the tasks cost through the provider's batch service (None: unpriced there);
    #: ``batch_api``: the volley is sent that way.
    batch_cost: float | None = None
    batch_api: bool = False
    batch_priced: bool = False  # batch_cost was worked out (completion tasks only)
    output_cap: int | None = None  # every task's cap, when they share one

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def large(self) -> bool:
        """Whether the volley is big enough to show the estimate and ask first."""
        return self.tasks > CONFIRM_TASKS or self.total_tokens > CONFIRM_TOKENS

    def _output(self) -> str:
        """The output part of the tokens line: at most the caps, or a guess without one."""
        name = setting("max_tokens")
        if self.output_assumed:
            return (f"~{self.output_tokens:,} output (a task with no {name} cap counts "
                    f"{DEFAULT_OUTPUT_ESTIMATE:,})")
        each = f"{self.output_cap:,} per task" if self.output_cap else "each task's cap"
        return f"at most {self.output_tokens:,} output ({each}: {name})"

    def lines(self) -> list[str]:
        rates = [f"{self.cached_tokens:,} at the cached rate"] if self.cached_tokens else []
        if self.written_tokens:
            rates.append(f"{self.written_tokens:,} at the cache-write rate")
        cached = f" ({', '.join(rates)})" if rates else ""
        live = _dollars(self.cost)
        if self.batch_api:
            cost = f"{_dollars(self.batch_cost)} at batch prices (live: {live})"
            time = "up to 24 h (the provider's batch window; often much sooner)"
        else:
            # Every output capped (the tokens line says so): the live cost is a ceiling.
            capped = self.cost is not None and not self.output_assumed
            cost = live + (" at most" if capped else "")
            if self.batch_priced:
                cost += f" (through the batch API, --batch-api: {_dollars(self.batch_cost)})"
            time = f"~{format_duration(self.seconds)} (assuming {self.latency:g}s per request)"
        return [
            f"estimate: {self.tasks:,} task{'' if self.tasks == 1 else 's'}",
            f"  tokens: ~{self.input_tokens:,} input{cached}, {self._output()}",
            f"  cost:   {cost}",
            f"  time:   {time}",
        ]


def _dollars(cost: float | None) -> str:
    return "unpriced" if cost is None else f"${cost:.4f}"


def estimate(
    tasks: Iterable[VolleyTask],
    layout: RequestLayout,
    config: RunConfig,
    prices: PriceTable,
    *,
    cache_warm: bool,
    rlm: bool = False,
    latency: float = 2.0,
    bills_cache_writes: bool = False,
    batch_prices: PriceTable | None = None,
    batch_api: bool = False,
) -> Estimate:
    """The estimate for running ``tasks`` (one pass over them) over ``layout``'s shared
    prefix under ``config``.

    ``bills_cache_writes``: the provider bills writing a request's cacheable prefix
    (:func:`rlm.providers.open.bills_cache_writes`).  ``batch_prices``: the batch
    service's rates (``PriceTable.batch``), to price the tasks at them too; ``batch_api``:
    the volley goes through the batch service (no warm-up, no cache reads counted).
    """
    per_task_prefix = layout.prefix_chars // 4
    if rlm:
        system = len(prompts.load("system")) // 4
        per_task_prefix = 2 * system + layout.context_chars // 4
    caching = cache_warm and layout.cacheable and not rlm and not batch_api
    writing = bills_cache_writes and layout.cacheable and not rlm
    count = input_tokens = cached = written = output = 0
    cost: float | None = 0.0
    batch_cost: float | None = 0.0
    batched = batch_prices is not None and not rlm
    assumed = False
    caps: set[int] = set()  # the caps seen, up to two (shared, or not)
    for count, task in enumerate(tasks, 1):
        task_in = per_task_prefix + len(task.prompt) // 4
        task_cached = layout.prefix_chars // 4 if caching and count > 1 else 0
        # A request with a cache breakpoint that misses the cache writes its prefix.
        task_written = layout.prefix_chars // 4 if writing and not task_cached else 0
        max_tokens = task.max_tokens or config.max_tokens
        assumed = assumed or max_tokens is None
        if max_tokens is not None and len(caps) < 2:
            caps.add(max_tokens)
        task_out = max_tokens or DEFAULT_OUTPUT_ESTIMATE
        input_tokens += task_in
        cached += task_cached
        written += task_written
        output += task_out
        price = prices.lookup(task.model or config.model)
        if price is None or cost is None:
            cost = None
        else:
            cost += price.cost(task_in, task_out, task_cached, task_written)
        if batched and batch_prices is not None:
            batch_price = batch_prices.lookup(task.model or config.model)
            if batch_price is None or batch_cost is None:
                batch_cost = None
            else:  # no cache reads counted: a batch has no warm-up
                batch_written = layout.prefix_chars // 4 if writing else 0
                batch_cost += batch_price.cost(task_in, task_out, 0, batch_written)
    requests = count * (2 if rlm else 1)
    waves = math.ceil(requests / config.max_concurrent) * latency
    seconds = max(
        waves + (latency if caching else 0.0),
        requests * 60 / config.rpm if config.rpm else 0.0,
        (input_tokens + output) * 60 / config.tpm if config.tpm else 0.0,
    )
    shared = next(iter(caps)) if len(caps) == 1 and not assumed else None
    return Estimate(
        count, input_tokens, cached, output, assumed, cost, seconds, latency, written,
        batch_cost=batch_cost if batched else None, batch_api=batch_api, batch_priced=batched,
        output_cap=shared,
    )
