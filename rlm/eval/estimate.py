"""What an eval will cost before anything is sent: the volley estimate, item by item.

Each item's tasks are estimated over the item's own context, as a volley's
over its shared one (:func:`rlm.volley.estimate.estimate`: a direct task reads
the whole context once, an rlm task two root steps plus one pass of sub-queries
over it); a direct task its model's window cannot take sends nothing and costs
nothing.  Time assumes every request takes ``latency`` seconds at the eval's
concurrency and rates.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from rlm._config import RunConfig
from rlm._traffic.prices import PriceTable
from rlm.volley.estimate import Estimate, estimate
from rlm.volley.layout import RequestLayout
from rlm.volley.records import VolleyTask

__all__ = ["estimate_eval"]


def estimate_eval(tasks: Sequence[VolleyTask], documents: Sequence[str], config: RunConfig,
                  prices: PriceTable, *, latency: float) -> Estimate:
    """The estimate of ``tasks`` (an eval's: each over its own ``documents``)."""
    groups: dict[tuple[tuple[int, ...], bool], list[VolleyTask]] = defaultdict(list)
    for task in tasks:
        groups[(task.context or (), task.mode == "rlm")].append(task)
    parts: list[Estimate] = []
    requests = 0
    for (positions, rlm), members in groups.items():
        layout = RequestLayout([documents[i] for i in positions], model=config.model,
                               max_tokens=config.max_tokens)
        sent = [t for t in members if rlm or _fits(t, layout, config)]
        requests += len(sent) * (2 if rlm else 1)
        if sent:
            parts.append(estimate(sent, layout, config, prices, cache_warm=False, rlm=rlm,
                                  latency=latency))
    input_tokens = sum(p.input_tokens for p in parts)
    output = sum(p.output_tokens for p in parts)
    costs = [p.cost for p in parts]
    seconds = max(
        math.ceil(requests / config.max_concurrent) * latency,
        requests * 60 / config.rpm if config.rpm else 0.0,
        (input_tokens + output) * 60 / config.tpm if config.tpm else 0.0,
    )
    return Estimate(
        tasks=len(tasks), input_tokens=input_tokens, cached_tokens=0, output_tokens=output,
        output_assumed=any(p.output_assumed for p in parts),
        cost=None if None in costs else sum(c or 0.0 for c in costs), seconds=seconds,
        latency=latency,
    )


def _fits(task: VolleyTask, layout: RequestLayout, config: RunConfig) -> bool:
    window = (task.settings or {}).get("context_window", config.context_window)
    if window is None:
        return True
    # As the volley sends it (rlm.volley.layout.fit_window): a prompt that fits is sent,
    # its output cap lowered to the room left.
    return bool((layout.prefix_chars + len(task.prompt)) // 4 < window)
