"""What a volley will cost before anything is sent: tokens, dollars, time.

Tokens are characters / 4.  Every request carries the system prompt and the
shared context, so they count once per task; with prompt caching (a prefix
long enough to cache, and the warm-up on) every task after the first reads
that prefix at the cached rate.  Where the provider bills writing the prefix
to its cache (Anthropic), a task that is not expected to read it writes it at
the cache-write rate, as the budget reserves it.  Output is each task's ``max_tokens`` when
set, else an assumed ``ASSUMED_OUTPUT`` tokens.  Time assumes every task takes
``latency`` seconds and the volley runs at the configured concurrency and
rates.  ``--rlm`` tasks are estimated as two root steps each plus one pass of
sub-queries over the shared context (a floor: models may do more).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from rlm import prompts
from rlm._config import RunConfig
from rlm._durations import format_duration
from rlm._traffic.prices import PriceTable
from rlm.volley.layout import RequestLayout
from rlm.volley.records import VolleyTask

__all__ = ["ASSUMED_OUTPUT", "CONFIRM_TASKS", "CONFIRM_TOKENS", "Estimate", "estimate"]

ASSUMED_OUTPUT = 256  # output tokens per task when no max_tokens is set
CONFIRM_TASKS = 10  # more tasks than this: show the estimate and ask on a TTY
CONFIRM_TOKENS = 50_000  # or more estimated tokens than this


@dataclass(frozen=True)
class Estimate:
    tasks: int
    input_tokens: int
    cached_tokens: int  # the part of input_tokens expected to be read from a cache
    output_tokens: int
    output_assumed: bool
    cost: float | None  # None: some model has no price
    seconds: float
    latency: float
    written_tokens: int = 0  # the part of input_tokens expected to be written to a cache

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def large(self) -> bool:
        """Whether the volley is big enough to show the estimate and ask first."""
        return self.tasks > CONFIRM_TASKS or self.total_tokens > CONFIRM_TOKENS

    def lines(self) -> list[str]:
        rates = [f"{self.cached_tokens:,} at the cached rate"] if self.cached_tokens else []
        if self.written_tokens:
            rates.append(f"{self.written_tokens:,} at the cache-write rate")
        cached = f" ({', '.join(rates)})" if rates else ""
        assumed = f" (assuming {ASSUMED_OUTPUT} per task)" if self.output_assumed else ""
        cost = "unpriced" if self.cost is None else f"${self.cost:.4f}"
        return [
            f"estimate: {self.tasks:,} task{'' if self.tasks == 1 else 's'}",
            f"  tokens: ~{self.input_tokens:,} input{cached}, ~{self.output_tokens:,} "
            f"output{assumed}",
            f"  cost:   {cost}",
            f"  time:   ~{format_duration(self.seconds)} (assuming {self.latency:g}s per request)",
        ]


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
) -> Estimate:
    """The estimate for running ``tasks`` (one pass over them) over ``layout``'s shared
    prefix under ``config``.

    ``bills_cache_writes``: the provider bills writing a request's cacheable prefix
    (:func:`rlm.providers.open.bills_cache_writes`).
    """
    per_task_prefix = layout.prefix_chars // 4
    if rlm:
        system = len(prompts.load("system")) // 4
        per_task_prefix = 2 * system + layout.context_chars // 4
    caching = cache_warm and layout.cacheable and not rlm
    writing = bills_cache_writes and layout.cacheable and not rlm
    count = input_tokens = cached = written = output = 0
    cost: float | None = 0.0
    assumed = False
    for count, task in enumerate(tasks, 1):
        task_in = per_task_prefix + len(task.prompt) // 4
        task_cached = layout.prefix_chars // 4 if caching and count > 1 else 0
        # A request with a cache breakpoint that misses the cache writes its prefix.
        task_written = layout.prefix_chars // 4 if writing and not task_cached else 0
        max_tokens = task.max_tokens or config.max_tokens
        assumed = assumed or max_tokens is None
        task_out = max_tokens or ASSUMED_OUTPUT
        input_tokens += task_in
        cached += task_cached
        written += task_written
        output += task_out
        price = prices.lookup(task.model or config.model)
        if price is None or cost is None:
            cost = None
        else:
            cost += price.cost(task_in, task_out, task_cached, task_written)
    requests = count * (2 if rlm else 1)
    waves = math.ceil(requests / config.max_concurrent) * latency
    seconds = max(
        waves + (latency if caching else 0.0),
        requests * 60 / config.rpm if config.rpm else 0.0,
        (input_tokens + output) * 60 / config.tpm if config.tpm else 0.0,
    )
    return Estimate(
        count, input_tokens, cached, output, assumed, cost, seconds, latency, written
    )
