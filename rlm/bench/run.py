"""Running one bench scenario and measuring it against its physical limit.

Each run is a fresh ``trio.run`` of ``RLM.acompletion`` on a generated needle
context — in-process (:class:`~rlm.bench.provider.BenchProvider`) or against a
:class:`~rlm.testing.server.FixtureServer` on 127.0.0.1 in a process of its own
(``rlm fixture-server``).  T is the run's ``duration_s`` (run start until its answer was
known, so sandbox start counts; the teardown after it, which the run still waits for
before it returns, is reported as the ``teardown_s`` phase); T* comes from replaying
the run's own trace on the ideal runtime (:mod:`rlm.view.limit`).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import resource
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

from rlm._api import RLM
from rlm._result import RunResult
from rlm._run.assembly import default_launcher
from rlm._sandbox.early import EarlyZygote
from rlm._sandbox.interface import LauncherFactory
from rlm.bench.figures import Check, Figures
from rlm.bench.provider import BenchProvider
from rlm.bench.scenarios import Scenario
from rlm.bench.server import ServerShape, drawn_latency, fixture_server
from rlm.bench.timer import precise_sleep
from rlm.fixtures import generate_needle, lognormal_latencies
from rlm.providers._http import load_http_transport
from rlm.view.limit import (
    clairvoyant_bound,
    formula_limit,
    ideal_makespan,
    metadata_latency,
    work_from_trace,
)
from rlm.view.phases import time_phases

__all__ = [
    "Run",
    "ScenarioResult",
    "efficiency",
    "max_rss_mib",
    "measure",
    "one_run",
    "run_figures",
    "run_scenario",
    "server_shape",
    "traced_peak",
]


@dataclass(frozen=True)
class ScenarioResult:
    """What ``rlm bench`` reports for one scenario.  Times in seconds."""

    name: str
    about: str
    transport: str
    variant: str
    n: int  # sub-lane requests the run made
    c: int
    latency: str
    rpm: float | None
    t: float
    t_star: float
    t_formula: float | None  # the closed form, for homogeneous one-batch scenarios
    t_lower: float  # clairvoyant lower bound: root steps + max(max p, Σp / C)
    root_s: float
    eta: float | None  # T*/T; None when T* is 0 (zero latency: no physical limit)
    # T*/(T + teardown_s): until ``acompletion`` returns, which waits for the teardown
    # after the answer (T ends at the answer).  Equal to ``eta`` without a teardown.
    eta_return: float | None
    overhead_ms: float  # (T − T*) / N, per sub-query
    rate: float  # sub-queries per second of T
    t_seq: float | None
    speedup: float | None
    correct: bool
    status: str
    wall_s: float
    peak_mib: float | None
    max_rss_mib: float
    phases: dict[str, float]  # where T − T* went: see time_phases()
    target_eta: float | None
    target_rate: float | None
    # This process's CPU (the run's loop and threads, not its sandboxes or the server)
    # per request sent, root steps included.
    cpu_ms: float | None = None
    memory_waits: int = 0  # sandbox starts that waited for memory (sandbox_memory_wait)

    @property
    def met(self) -> bool | None:
        """Whether the scenario's target (η or rate) was reached; None without a target."""
        return self._judged(self.eta)

    @property
    def met_return(self) -> bool | None:
        """The same judgement with η to return (the teardown counted); None without a target."""
        return self._judged(self.eta_return)

    def _judged(self, eta: float | None) -> bool | None:
        checks = []
        if self.target_eta is not None:
            checks.append(eta is not None and eta >= self.target_eta)
        if self.target_rate is not None:
            checks.append(self.rate >= self.target_rate)
        return all(checks) if checks else None

    def as_json(self) -> dict[str, Any]:
        data = {k: _rounded(v) for k, v in self.__dict__.items()}
        data["phases"] = dict(self.phases)
        data["met"] = self.met
        data["met_return"] = self.met_return
        return data


def efficiency(t_star: float, t: float) -> float | None:
    """η = T*/T; None when T* is 0 (no physical limit) or nothing was timed."""
    return t_star / t if t_star > 0 and t > 0 else None


def _rounded(value: Any) -> Any:
    return round(value, 6) if isinstance(value, float) else value


@functools.lru_cache(maxsize=4)
def _needle(chars: int, seed: int) -> tuple[str, str, str]:
    fixture = generate_needle(chars, seed=seed)
    return fixture.text, fixture.question, fixture.answer


def _sub_latencies(s: Scenario) -> list[float] | None:
    if s.sigma <= 0:
        return None
    total = s.n * (s.child_n or s.n) if s.depth > 1 else s.n
    return lognormal_latencies(total, median=s.sub_latency, sigma=s.sigma, seed=s.seed)


def _settings(s: Scenario) -> dict[str, Any]:
    # No call ceiling: a benchmark measures throughput past what a normal analysis sends.
    # An announced limit is the provider's to tell: the run learns it from the headers.
    rpm, burst = (None, 1) if s.announced else (s.rpm, s.burst)
    return {"model": s.model, "sub_model": s.sub_model, "max_concurrent": s.max_concurrent,
            "root_permits": 1, "max_depth": s.depth, "rpm": rpm, "burst": burst,
            "max_llm_calls": None, "auto_batch": s.auto_batch}


async def _run_in_process(s: Scenario, text: str, question: str,
                          sandboxes: LauncherFactory) -> RunResult:
    provider = BenchProvider(root_latency=s.root_latency, sub_latency=s.sub_latency,
                             sub_latencies=_sub_latencies(s), sleep=precise_sleep)
    rlm = RLM(providers={"root": provider, "sub": provider}, sandboxes=sandboxes,
              **_settings(s))
    return await rlm.acompletion(question, text)


async def _run_http(s: Scenario, text: str, question: str, sandboxes: LauncherFactory,
                    url: str) -> RunResult:
    rlm = RLM(provider="openai", base_url=url, api_key="bench", sandboxes=sandboxes,
              **_settings(s))
    return await rlm.acompletion(question, text)


def server_shape(s: Scenario) -> ServerShape:
    """The fixture server a scenario runs against: its latencies and the provider's limit."""
    return ServerShape(root_latency=s.root_latency, sub_latency=s.sub_latency, sigma=s.sigma,
                       seed=s.seed, rpm=s.rpm, burst=s.burst, announce_rpm=s.announced)


@dataclass(frozen=True)
class Run:
    result: RunResult
    boot_s: float  # how long its zygote took to boot (not part of T)
    cpu_s: float  # this process's CPU time (user + system) while the run ran


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_run(s: Scenario) -> Run:
    """One run, how long its zygote took to boot, and the CPU the run's process took.

    As ``rlm run`` does at process start, the zygote is started before the
    run and the run adopts it; the run's clock starts once it is up, which is
    where ``rlm run`` stands after its imports (docs/bench.md).
    """
    text, question, _ = _needle(s.context_chars, s.seed)
    with contextlib.ExitStack() as stack:
        runner: Callable[..., Awaitable[RunResult]] = _run_in_process
        extra: tuple[str, ...] = ()
        if s.transport == "http":
            load_http_transport()  # once per process, before the clock, as `rlm run` does
            runner, extra = _run_http, (stack.enter_context(fixture_server(server_shape(s))),)
        started = time.perf_counter()
        early = stack.enter_context(EarlyZygote.begin())
        early.wait_ready()
        boot_s = time.perf_counter() - started
        sandboxes = functools.partial(default_launcher, early_zygote=early)
        # This process holds earlier scenarios' results, which a fresh `rlm run` would
        # not: collect them off the clock.
        gc.collect()
        cpu = _cpu_s()
        result = trio.run(runner, s, text, question, sandboxes, *extra)
        return Run(result, boot_s, _cpu_s() - cpu)


def _http_latency(s: Scenario) -> Any:
    """Each request's nominal latency over HTTP: the server's, or the one it drew (its id)."""
    def rule(step: bool, response: Mapping[str, Any]) -> float:
        if step:
            return s.root_latency
        drawn = drawn_latency(response) if s.sigma > 0 else None
        if s.sigma > 0 and drawn is None:
            raise ValueError(f"llm_response {response.get('request_id')} names no latency")
        return s.sub_latency if drawn is None else drawn
    return rule


def measure(s: Scenario, result: RunResult, *, wall_s: float = 0.0,
            t_seq: float | None = None, peak_bytes: int | None = None,
            zygote_boot_s: float | None = None, cpu_s: float | None = None) -> ScenarioResult:
    """Compare ``result`` (a run of ``s``) with its physical limit."""
    rule = _http_latency(s) if s.transport == "http" else metadata_latency
    work = work_from_trace(result.trace, rule)
    requests = list(work.requests())
    subs = [r.latency for r in requests if r.lane != "root"]
    root_s = sum(r.latency for r in requests if r.lane == "root")
    n = len(subs)
    t_star = ideal_makespan(work, sub_permits=s.c, rpm=s.rpm, burst=s.burst)
    t = result.duration_s
    formula = None
    if s.sigma <= 0 and s.depth == 1 and s.variant == "batched":
        formula = formula_limit(root_s=root_s, n=n, c=s.c, latency=s.sub_latency, rpm=s.rpm,
                                burst=s.burst)
    latency = f"ln({s.sub_latency:g},{s.sigma:g})" if s.sigma > 0 else f"{s.sub_latency:g}"
    _, _, answer = _needle(s.context_chars, s.seed)
    phases = time_phases(result.trace, t, t_star, root_s)
    # Not in T (the answer was known before it), but before the run returned: shown apart,
    # and counted in η to return.
    teardown_s = next((float(e.get("teardown_s", 0.0)) for e in result.trace
                       if e["event"] == "run_finished"), 0.0)
    phases["teardown_s"] = teardown_s
    if zygote_boot_s is not None:
        phases["zygote_boot_s"] = round(zygote_boot_s, 6)
    return ScenarioResult(
        name=s.name, about=s.about, transport=s.transport, variant=s.variant, n=n, c=s.c,
        latency=latency, rpm=s.rpm, t=t, t_star=t_star, t_formula=formula,
        t_lower=root_s + clairvoyant_bound(subs, s.c), root_s=root_s,
        eta=efficiency(t_star, t), eta_return=efficiency(t_star, t + teardown_s),
        overhead_ms=1000 * (t - t_star) / max(n, 1), rate=n / t if t > 0 else 0.0,
        t_seq=t_seq, speedup=t_seq / t if t_seq and t > 0 else None,
        correct=result.answer == answer, status=result.status, wall_s=wall_s,
        peak_mib=peak_bytes / 2**20 if peak_bytes is not None else None,
        max_rss_mib=max_rss_mib(), phases=phases,
        target_eta=s.target_eta, target_rate=s.target_rate,
        cpu_ms=None if cpu_s is None else 1000 * cpu_s / max(len(requests), 1),
        memory_waits=sum(1 for e in result.trace if e["event"] == "sandbox_memory_wait"),
    )


def traced_peak(run: Callable[[], object]) -> int:
    """Peak Python heap (bytes, tracemalloc) while ``run()`` runs: a second, slower run."""
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def max_rss_mib() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB else


def run_scenario(s: Scenario, *, baseline: bool = True) -> list[ScenarioResult]:
    """Run ``s``; then its sequential twin (for the speedup) and a tracemalloc pass if asked.

    Returns the scenario's result, followed by its sequential twin's when that ran.
    """
    started = time.perf_counter()
    run = one_run(s)
    wall_s = time.perf_counter() - started
    twin: ScenarioResult | None = None
    if s.baseline and baseline:
        seq = s.sequential()
        started = time.perf_counter()
        seq_run = one_run(seq)
        twin = measure(seq, seq_run.result, wall_s=time.perf_counter() - started,
                       zygote_boot_s=seq_run.boot_s, cpu_s=seq_run.cpu_s)
    peak = traced_peak(lambda: one_run(s)) if s.memory else None
    main = measure(s, run.result, wall_s=wall_s, t_seq=twin.t if twin else None,
                   peak_bytes=peak, zygote_boot_s=run.boot_s, cpu_s=run.cpu_s)
    return [main] if twin is None else [main, twin]


def run_figures(s: Scenario) -> Figures:
    """A default-set run scenario: η against its target, and the client's CPU per request."""
    [r] = run_scenario(s, baseline=False)
    checks = (Check("η", r.eta, "η —" if r.eta is None else f"η {r.eta:.3f}",
                    None if s.target_eta is None else f"η ≥ {s.target_eta:g}", r.met),)
    notes = [] if r.cpu_ms is None else [f"client CPU {r.cpu_ms:.2f} ms/request"]
    if r.memory_waits:
        notes.append(f"{r.memory_waits} sandbox starts waited for memory")
    return Figures(s.name, s.about, r.n, s.c, r.t, r.t_star, checks, r.correct, tuple(notes),
                   r.as_json())
