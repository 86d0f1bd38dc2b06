"""The scenarios ``rlm bench`` runs.

``DEFAULT`` is what users feel: workloads at real latencies (a hosted API, a
local server, a wide tree of child calls, volleys), each judged against a
target.  ``LARGE`` (``--large``) is the million-task volley, minutes long.
``MICRO`` (``--micro``) and ``QUICK`` (``--quick``) are the small fixture
scenarios that time the runtime's own machinery; they carry no targets.

C is the number of permits sub-queries may use (``max_concurrent -
root_permits``); every run scenario keeps one reserved root permit, as runs do
by default.  N is the number of chunks the fixture root fans out over (with
``depth=2`` each chunk is a child call that fans out ``child_n`` ways, or
``N`` when that is not given).  ``auto_batch`` off runs a sequential loop one
``llm_query`` at a time, as runtimes without auto-batching do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

__all__ = [
    "DEFAULT",
    "LARGE",
    "MICRO",
    "QUICK",
    "AnyScenario",
    "LargeVolleyScenario",
    "LoopScenario",
    "Scenario",
    "VolleyScenario",
    "by_name",
]

Transport = Literal["in-process", "http"]


@dataclass(frozen=True)
class Scenario:
    """One RLM run on the fixture model, measured against its physical limit."""

    name: str
    about: str
    n: int
    c: int = 8
    sub_latency: float = 0.0
    root_latency: float = 0.0
    sigma: float = 0.0  # > 0: lognormal sub-query latencies with median sub_latency
    rpm: float | None = None  # the provider's limit (the run is told it, unless announced)
    burst: int = 1
    announced: bool = False  # the rpm is announced in response headers, not given to the run
    depth: int = 1
    child_n: int | None = None  # depth 2: chunks each child call fans out over
    transport: Transport = "in-process"
    variant: Literal["batched", "sequential"] = "batched"
    context_chars: int = 200_000
    baseline: bool = True  # also run the sequential llm_query loop for the speedup
    auto_batch: bool = True
    memory: bool = False  # a second run under tracemalloc for peak Python memory
    target_eta: float | None = None
    target_rate: float | None = None  # sub-queries per second
    seed: int = 1

    @property
    def max_concurrent(self) -> int:
        return self.c + 1

    @property
    def model(self) -> str:
        prefix = "fixture-sequential" if self.variant == "sequential" else "fixture"
        return f"{prefix}:{self.n}"

    @property
    def sub_model(self) -> str | None:
        """The children's model at depth 2 (their fan-out), when it differs from the root's."""
        return f"fixture:{self.child_n}" if self.child_n else None

    def sequential(self, *, auto_batch: bool = False) -> Scenario:
        """The same work done by the sequential ``llm_query`` loop (one call at a time,
        unless ``auto_batch``)."""
        how = "auto-batched" if auto_batch else "one llm_query after another"
        return replace(self, name=f"{self.name}/seq" + ("-ab" if auto_batch else ""),
                       variant="sequential", about=f"{self.name}'s chunks, {how}",
                       baseline=False, memory=False, target_eta=None, target_rate=None,
                       auto_batch=auto_batch)


@dataclass(frozen=True)
class LoopScenario:
    """The sequential ``llm_query`` loop models write, auto-batched, against its batched
    form (``rlm.bench.loop`` runs it): ``run`` is the batched run; the loop runs the same
    chunks with auto-batching and without.  The target: the loop's speedup over one call
    at a time is at least ``target_share`` of the batched form's."""

    name: str
    about: str
    run: Scenario
    target_share: float = 0.8
    target_fan_out_s: float | None = None  # the loop's sub-queries, first sent to last answer


@dataclass(frozen=True)
class VolleyScenario:
    """A volley: ``n`` independent completions at C = ``c`` (``rlm.bench.volley`` runs it).

    ``journal``: run it twice in the same process, once with the default
    journal (SQLite, as ``rlm volley`` does) and once without, and report what
    the journal costs in wall time.
    """

    name: str
    about: str
    n: int
    c: int
    latency: float = 0.0  # the median when sigma > 0
    sigma: float = 0.0  # > 0: lognormal latencies
    transport: Transport = "in-process"
    hidden_cap: int | None = None  # served over loopback by a server refusing more in flight
    journal: bool = False
    memory: bool = False
    target_eta: float | None = None
    target_rate: float | None = None  # tasks per second
    target_journal: float | None = None  # the journal's most wall time, as a share of none
    seed: int = 1


@dataclass(frozen=True)
class LargeVolleyScenario:
    """``rlm volley`` as a user runs it (a task file, the default journal, output to
    stdout), zero-latency fixture tasks at two sizes: peak memory and time per task."""

    name: str
    about: str
    n: int
    small: int  # the smaller size, for time per task against N
    c: int = 64
    target_peak_mib: float = 300.0
    target_ratio: float = 1.25  # time per task at n over time per task at small


AnyScenario = Scenario | VolleyScenario | LargeVolleyScenario | LoopScenario

DEFAULT: tuple[AnyScenario, ...] = (
    # A hosted API: long, spread latencies and a rate limit the run learns from the
    # provider's headers (it is given none).  Rate-bound after the first wave.
    Scenario("hosted", "200 sub-queries, latency lognormal (median 1.2 s, sigma 0.5), 32 slots, "
             "1,200 rpm announced in response headers", n=200, c=32, sub_latency=1.2,
             sigma=0.5, root_latency=1.2, rpm=1200, burst=20, announced=True,
             transport="http", baseline=False, context_chars=400_000, target_eta=0.97),
    # A local batching server (vLLM, llama.cpp): short answers, many slots.
    Scenario("local-server", "2,000 sub-queries over HTTP, latency lognormal (median 0.4 s, "
             "sigma 0.5), 64 slots", n=2000, c=64, sub_latency=0.4, sigma=0.5,
             root_latency=0.4, transport="http", baseline=False, context_chars=2_000_000,
             target_eta=0.95),
    # Child calls at once, each with its own sandbox: sandbox admission and start.
    Scenario("wide-tree", "depth 2: 16 child calls at once, each 2 steps of 0.3 s and 4 "
             "sub-queries of 0.3 s, 64 slots", n=16, child_n=4, c=64, depth=2,
             sub_latency=0.3, root_latency=0.3, transport="http", baseline=False,
             context_chars=200_000, target_eta=0.9),
    VolleyScenario("volley-local", "rlm volley: 5,000 tasks over HTTP at 0.4 s, 64 slots, "
                   "default journal against none", n=5000, c=64, latency=0.4,
                   transport="http", journal=True, target_eta=0.95, target_journal=0.05),
    # The loop models write instead of llm_query_batched (issue 28).
    LoopScenario("sequential-loop", "16 chunks at 0.3 s, 16 slots: a sequential llm_query "
                 "loop, auto-batched, against llm_query_batched and against one call at a "
                 "time", Scenario("sequential-loop", "", n=16, c=16, sub_latency=0.3,
                                  root_latency=0.3, transport="http", baseline=False,
                                  context_chars=40_000),
                 target_share=0.8, target_fan_out_s=0.45),
)

LARGE: tuple[AnyScenario, ...] = (
    LargeVolleyScenario("volley-1M", "rlm volley -f: 1,000,000 zero-latency tasks, default "
                        "journal, 64 slots (and 100,000 for time per task)", n=1_000_000,
                        small=100_000),
)

MICRO: tuple[AnyScenario, ...] = (
    # Root steps take as long as sub-queries: a language model's step is never free, and the
    # call's sandbox starts while its first step is generated (docs/bench.md).
    Scenario("batched-32", "32 sub-queries of 0.5 s at C=8 in one llm_query_batched",
             n=32, sub_latency=0.5, root_latency=0.5),
    Scenario("batched-32-http", "batched-32 against the fixture server over loopback HTTP",
             n=32, sub_latency=0.5, root_latency=0.5, transport="http"),
    Scenario("batched-32-fast-root", "batched-32 with 0.05 s root steps at C=16",
             n=32, c=16, sub_latency=0.5, root_latency=0.05, baseline=False),
    Scenario("batched-32-http-fast-root", "batched-32-fast-root over loopback HTTP",
             n=32, c=16, sub_latency=0.5, root_latency=0.05, transport="http", baseline=False),
    Scenario("hetero-48", "48 sub-queries, lognormal latencies (median 0.25 s, sigma 0.6)",
             n=48, sub_latency=0.25, sigma=0.6),
    Scenario("rate-limited-40", "40 sub-queries of 0.2 s under 600 rpm (rate-bound)",
             n=40, sub_latency=0.2, rpm=600),
    Scenario("recursive-depth2", "4 child calls (own sandbox), each fanning out 4 ways",
             n=4, sub_latency=0.2, root_latency=0.1, depth=2, context_chars=50_000),
    Scenario("throughput-10k", "10,000 zero-latency sub-queries at C=64: rate and memory",
             n=10_000, c=64, context_chars=1_000_000, memory=True),
    VolleyScenario("volley-200", "rlm volley: 200 tasks, lognormal latencies (median 0.5 s, "
                   "sigma 0.5) at C=32", n=200, c=32, latency=0.5, sigma=0.5),
    VolleyScenario("volley-10k", "rlm volley: 10,000 zero-latency tasks at C=64: rate and memory",
                   n=10_000, c=64, memory=True),
    VolleyScenario("volley-cap3-http", "rlm volley: 100 tasks of 0.2 s at C=16 against a server "
                   "with a hidden cap of 3 (T* = the cap's limit)", n=100, c=16, latency=0.2,
                   transport="http", hidden_cap=3),
)

QUICK: tuple[AnyScenario, ...] = (
    Scenario("quick-batched", "8 sub-queries of 0.05 s at C=4", n=8, c=4, sub_latency=0.05,
             context_chars=20_000),
    Scenario("quick-batched-http", "quick-batched over loopback HTTP", n=8, c=4,
             sub_latency=0.05, transport="http", context_chars=20_000, baseline=False),
    Scenario("quick-hetero", "12 lognormal sub-queries (median 0.03 s)", n=12, c=4,
             sub_latency=0.03, sigma=0.6, context_chars=20_000, baseline=False),
    Scenario("quick-throughput", "500 zero-latency sub-queries at C=64", n=500, c=64,
             context_chars=100_000, baseline=False, memory=True),
    VolleyScenario("quick-volley", "rlm volley: 50 lognormal tasks (median 0.03 s) at C=16",
                   n=50, c=16, latency=0.03, sigma=0.5),
)

EVERY: tuple[AnyScenario, ...] = (*DEFAULT, *LARGE, *MICRO, *QUICK)


def by_name(names: tuple[str, ...]) -> tuple[AnyScenario, ...]:
    """The named scenarios from any set; raises ``KeyError`` naming an unknown one."""
    known = {s.name: s for s in EVERY}
    missing = [name for name in names if name not in known]
    if missing:
        raise KeyError(", ".join(missing))
    return tuple(known[name] for name in names)
