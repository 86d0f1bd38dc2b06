"""Volley scenarios for ``rlm bench``: independent tasks through the gate, against the ideal.

Each task is one completion answered by the in-process
:class:`~rlm.bench.provider.BenchProvider` (latencies given in dispatch order)
or by the fixture server over loopback.  T is the volley's makespan; T* is
the same latencies on C permits with nothing else — greedy list scheduling in
dispatch order, the best any runtime that sends tasks in order can do (see
:mod:`rlm.bench.limit`); behind a hidden concurrency cap it is the cap's limit,
⌈N/cap⌉·L.  ``rate`` is tasks per second of T.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Sequence

import trio

from rlm import RLM
from rlm.bench.provider import BenchProvider
from rlm.bench.run import ScenarioResult, efficiency, max_rss_mib, traced_peak
from rlm.bench.scenarios import VolleyScenario
from rlm.fixtures import lognormal_latencies
from rlm.testing.server import FixtureServer, FixtureServerOptions
from rlm.volley.records import VolleyResult

__all__ = ["list_schedule", "run_volley_scenario"]


def _latencies(s: VolleyScenario) -> list[float]:
    if s.sigma > 0:
        return lognormal_latencies(s.n, median=s.latency, sigma=s.sigma, seed=s.seed)
    return [s.latency] * s.n


def list_schedule(latencies: Sequence[float], permits: int) -> float:
    """Makespan of jobs started in order, each on the first permit to free."""
    free = [0.0] * permits
    end = 0.0
    for latency in latencies:
        start = heapq.heappop(free)
        heapq.heappush(free, start + latency)
        end = max(end, start + latency)
    return end


def _prompts(n: int) -> list[str]:
    return [f"classify record {i}" for i in range(1, n + 1)]


async def _in_process(s: VolleyScenario) -> VolleyResult:
    provider = BenchProvider(sub_latencies=_latencies(s))
    model = RLM(providers={"root": provider, "sub": provider}, max_concurrent=s.c,
                max_llm_calls=None)  # 10,000 tasks: past the default ceiling on purpose
    return await model.avolley(_prompts(s.n))


async def _over_http(s: VolleyScenario) -> VolleyResult:
    options = FixtureServerOptions(sub_latency=s.latency, max_concurrent=s.hidden_cap,
                                   retry_after=max(s.latency, 0.05))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(FixtureServer(options).serve)
        model = RLM(base_url=f"http://127.0.0.1:{port}/v1", api_key="bench", model="fixture",
                    max_concurrent=s.c, max_retries=10, max_llm_calls=None)
        result = await model.avolley(_prompts(s.n))
        nursery.cancel_scope.cancel()
    return result


def _one_run(s: VolleyScenario) -> VolleyResult:
    return trio.run(_over_http if s.hidden_cap else _in_process, s)


def run_volley_scenario(s: VolleyScenario) -> list[ScenarioResult]:
    """Run ``s`` (and a tracemalloc pass when it measures memory)."""
    started = time.perf_counter()
    result = _one_run(s)
    wall_s = time.perf_counter() - started
    peak = traced_peak(lambda: _one_run(s)) if s.memory else None
    if s.hidden_cap:
        t_star = math.ceil(s.n / s.hidden_cap) * s.latency
    else:
        t_star = list_schedule(_latencies(s), s.c)
    t = result.summary.duration_sec
    latency = f"ln({s.latency:g},{s.sigma:g})" if s.sigma > 0 else f"{s.latency:g}"
    summary = result.summary
    return [ScenarioResult(
        name=s.name, about=s.about, transport="http" if s.hidden_cap else "in-process",
        variant="volley", n=s.n, c=s.c,
        latency=latency, rpm=None, t=t, t_star=t_star, t_formula=None,
        t_lower=max(max(_latencies(s), default=0.0), sum(_latencies(s)) / s.c),
        # A volley starts no sandbox, so it has no teardown: η to return is η.
        root_s=0.0, eta=efficiency(t_star, t), eta_return=efficiency(t_star, t),
        overhead_ms=1000 * (t - t_star) / max(s.n, 1), rate=s.n / t if t > 0 else 0.0,
        t_seq=None, speedup=None,
        correct=result.status == "succeeded" and summary.succeeded == s.n,
        status=result.status, wall_s=wall_s,
        peak_mib=peak / 2**20 if peak is not None else None, max_rss_mib=max_rss_mib(),
        phases={"rate_limited": float(summary.rate_limited),
                "retries": float(summary.total_retries)},
        target_eta=s.target_eta, target_rate=s.target_rate,
    )]
