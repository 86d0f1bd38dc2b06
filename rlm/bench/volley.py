"""Volley scenarios for ``rlm bench``: independent tasks through the gate, against the ideal.

Each task is one completion answered by the in-process
:class:`~rlm.bench.provider.BenchProvider` (latencies given in dispatch order)
or by the fixture server over loopback, in a process of its own.  T is the
volley's makespan; T* is the same latencies on C permits with nothing else —
greedy list scheduling in dispatch order, the best any runtime that sends
tasks in order can do; behind a hidden concurrency cap it is the cap's limit,
⌈N/cap⌉·L.  ``rate`` is tasks per second of T.

A scenario with ``journal`` runs twice in the same process: without a journal
(the results kept in memory) and with a fresh SQLite journal made as ``rlm
volley`` makes it (tasks recorded, claimed in batches, verdicts group
committed, each result durable before it is reported).  Its η is the
journaled run's; what the journal costs is the journaled wall time (recording
the tasks included) against the other's.
"""

from __future__ import annotations

import heapq
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import trio

from rlm import RLM
from rlm._config import RunConfig
from rlm.bench.figures import Check, Figures
from rlm.bench.provider import BenchProvider
from rlm.bench.run import ScenarioResult, efficiency, max_rss_mib, traced_peak
from rlm.bench.scenarios import VolleyScenario
from rlm.bench.server import ServerShape, fixture_server
from rlm.fixtures import lognormal_latencies
from rlm.journal import open_store
from rlm.journal.volleys import record_volley, stored_settings
from rlm.journal.worker import JournalWorker
from rlm.volley.engine import Volley
from rlm.volley.records import VolleyResult, VolleyTask, new_volley_id

__all__ = ["list_schedule", "run_volley_scenario", "volley_figures"]


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


def _t_star(s: VolleyScenario) -> float:
    if s.hidden_cap:
        return math.ceil(s.n / s.hidden_cap) * s.latency
    return list_schedule(_latencies(s), s.c)


async def _in_process(s: VolleyScenario) -> VolleyResult:
    provider = BenchProvider(sub_latencies=_latencies(s))
    model = RLM(providers={"root": provider, "sub": provider}, max_concurrent=s.c,
                max_llm_calls=None)  # 10,000 tasks: past the default ceiling on purpose
    return await model.avolley(_prompts(s.n))


def _http_config(s: VolleyScenario, url: str) -> RunConfig:
    return RunConfig(provider="openai", base_url=url, api_key="bench", model="fixture",
                     max_concurrent=s.c, root_permits=0, max_retries=10, max_llm_calls=None)


def _tasks(s: VolleyScenario) -> list[VolleyTask]:
    return [VolleyTask(i, prompt) for i, prompt in enumerate(_prompts(s.n), start=1)]


async def _plain(s: VolleyScenario, url: str) -> tuple[VolleyResult, float]:
    """The volley with no journal (results kept in memory); its wall time."""
    started = time.perf_counter()
    result = await Volley(_http_config(s, url), _tasks(s)).run()
    return result, time.perf_counter() - started


async def _journaled(s: VolleyScenario, url: str, path: Path) -> tuple[VolleyResult, float]:
    """The volley with a fresh SQLite journal, as ``rlm volley`` runs one; its wall time,
    recording the tasks included."""
    started = time.perf_counter()
    store = await trio.to_thread.run_sync(open_store, str(path))
    try:
        config, tasks, volley_id = _http_config(s, url), _tasks(s), new_volley_id()
        await trio.to_thread.run_sync(
            record_volley, store, volley_id, stored_settings(config, {}), tasks, [])
        worker = JournalWorker(store, volley_id)
        run = Volley(config, tasks, volley_id=volley_id, source=worker, sink=worker)
        worker.capacity = lambda: run.concurrency
        worker.follow_ledger(run.ledger)
        async with worker.running():
            result = await run.run()
    finally:
        store.close()
    return result, time.perf_counter() - started


def _over_http(s: VolleyScenario) -> VolleyResult:
    shape = ServerShape(sub_latency=s.latency, hidden_cap=s.hidden_cap,
                        retry_after=max(s.latency, 0.05))
    with fixture_server(shape) as url:
        return trio.run(_plain, s, url)[0]


def _one_run(s: VolleyScenario) -> VolleyResult:
    return _over_http(s) if s.transport == "http" else trio.run(_in_process, s)


def _succeeded(s: VolleyScenario, result: VolleyResult) -> bool:
    return result.status == "succeeded" and result.summary.succeeded == s.n


def run_volley_scenario(s: VolleyScenario) -> list[ScenarioResult]:
    """Run a micro volley scenario ``s`` (and a tracemalloc pass when it measures memory)."""
    started = time.perf_counter()
    result = _one_run(s)
    wall_s = time.perf_counter() - started
    peak = traced_peak(lambda: _one_run(s)) if s.memory else None
    t_star = _t_star(s)
    t = result.summary.duration_sec
    latency = f"ln({s.latency:g},{s.sigma:g})" if s.sigma > 0 else f"{s.latency:g}"
    summary = result.summary
    return [ScenarioResult(
        name=s.name, about=s.about, transport=s.transport, variant="volley", n=s.n, c=s.c,
        latency=latency, rpm=None, t=t, t_star=t_star, t_formula=None,
        t_lower=max(max(_latencies(s), default=0.0), sum(_latencies(s)) / s.c),
        # A volley starts no sandbox, so it has no teardown: η to return is η.
        root_s=0.0, eta=efficiency(t_star, t), eta_return=efficiency(t_star, t),
        overhead_ms=1000 * (t - t_star) / max(s.n, 1), rate=s.n / t if t > 0 else 0.0,
        t_seq=None, speedup=None, correct=_succeeded(s, result),
        status=result.status, wall_s=wall_s,
        peak_mib=peak / 2**20 if peak is not None else None, max_rss_mib=max_rss_mib(),
        phases={"rate_limited": float(summary.rate_limited),
                "retries": float(summary.total_retries)},
        target_eta=s.target_eta, target_rate=s.target_rate,
    )]


def volley_figures(s: VolleyScenario) -> Figures:
    """A default-set volley over HTTP, with the journal and without, in this process."""
    with tempfile.TemporaryDirectory(prefix="rlm-bench-") as tmp, \
            fixture_server(ServerShape(sub_latency=s.latency)) as url:
        plain, plain_wall = trio.run(_plain, s, url)
        journaled, journal_wall = trio.run(_journaled, s, url, Path(tmp) / "journal.sqlite3")
    t_star, t = _t_star(s), journaled.summary.duration_sec
    eta = efficiency(t_star, t)
    cost = journal_wall / plain_wall - 1
    checks = [Check("η", eta, f"η {eta:.3f}" if eta else "η —",
                    f"η ≥ {s.target_eta:g}" if s.target_eta else None,
                    None if s.target_eta is None else eta is not None and eta >= s.target_eta)]
    if s.target_journal is not None:
        checks.append(Check("journal", cost, f"journal {cost:+.1%} of wall",
                            f"journal ≤ {s.target_journal:.0%}", cost <= s.target_journal))
    notes = (f"no journal: η {efficiency(t_star, plain.summary.duration_sec) or 0:.3f}, "
             f"wall {plain_wall:.2f} s against {journal_wall:.2f} s",)
    detail = {"journal_wall_s": round(journal_wall, 3), "plain_wall_s": round(plain_wall, 3),
              "plain_t": round(plain.summary.duration_sec, 6), "journal_cost": round(cost, 4),
              "retries": journaled.summary.total_retries}
    return Figures(s.name, s.about, s.n, s.c, t, t_star, tuple(checks),
                   _succeeded(s, plain) and _succeeded(s, journaled), notes, detail)
