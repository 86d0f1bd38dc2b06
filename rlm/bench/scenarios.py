"""The scenarios ``rlm bench`` runs: the default set and the ``--quick`` smoke set.

C is the number of permits sub-queries may use (``max_concurrent -
root_permits``); every scenario keeps one reserved root permit, as runs do by
default.  N is the number of chunks the fixture root fans out over (with
``depth=2`` each chunk is a child call that fans out ``N`` ways again).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["DEFAULT", "QUICK", "AnyScenario", "Scenario", "VolleyScenario", "by_name"]

Transport = Literal["in-process", "http"]


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    n: int
    c: int = 8
    sub_latency: float = 0.0
    root_latency: float = 0.0
    sigma: float = 0.0  # > 0: lognormal sub-query latencies with median sub_latency
    rpm: float | None = None
    burst: int = 1
    depth: int = 1
    transport: Transport = "in-process"
    variant: Literal["batched", "sequential"] = "batched"
    context_chars: int = 200_000
    baseline: bool = True  # also run the sequential llm_query loop for the speedup
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

    def sequential(self) -> Scenario:
        """The same work done by the sequential ``llm_query`` loop."""
        return replace(self, name=f"{self.name}/seq", variant="sequential",
                       about=f"{self.name}'s chunks, one llm_query after another",
                       baseline=False, memory=False, target_eta=None, target_rate=None)


@dataclass(frozen=True)
class VolleyScenario:
    """A volley: ``n`` independent completions at C = ``c`` (``rlm.bench.volley`` runs it)."""

    name: str
    about: str
    n: int
    c: int
    latency: float = 0.0  # the median when sigma > 0
    sigma: float = 0.0  # > 0: lognormal latencies
    hidden_cap: int | None = None  # served over loopback by a server refusing more in flight
    memory: bool = False
    target_eta: float | None = None
    target_rate: float | None = None  # tasks per second
    seed: int = 1


AnyScenario = Scenario | VolleyScenario

DEFAULT: tuple[AnyScenario, ...] = (
    # Root steps take as long as sub-queries: a language model's step is never free, and the
    # call's sandbox starts while its first step is generated (docs/bench.md).
    Scenario("batched-32", "32 sub-queries of 0.5 s at C=8 in one llm_query_batched (issue 3)",
             n=32, sub_latency=0.5, root_latency=0.5, target_eta=0.97),
    Scenario("batched-32-http", "batched-32 against the fixture server over loopback HTTP",
             n=32, sub_latency=0.5, root_latency=0.5, transport="http", target_eta=0.97),
    # Fast roots (small models, local servers): the root's sandbox must be ready within one
    # 50 ms step, and start-up and teardown weigh twice as much at C=16 (issue 9).
    Scenario("batched-32-fast-root", "batched-32 with 0.05 s root steps at C=16",
             n=32, c=16, sub_latency=0.5, root_latency=0.05, baseline=False, target_eta=0.97),
    Scenario("batched-32-http-fast-root", "batched-32-fast-root over loopback HTTP",
             n=32, c=16, sub_latency=0.5, root_latency=0.05, transport="http", baseline=False,
             target_eta=0.97),
    Scenario("hetero-48", "48 sub-queries, lognormal latencies (median 0.25 s, sigma 0.6)",
             n=48, sub_latency=0.25, sigma=0.6, target_eta=0.95),
    Scenario("rate-limited-40", "40 sub-queries of 0.2 s under 600 rpm (rate-bound)",
             n=40, sub_latency=0.2, rpm=600, target_eta=0.95),
    Scenario("recursive-depth2", "4 child calls (own sandbox), each fanning out 4 ways",
             n=4, sub_latency=0.2, root_latency=0.1, depth=2, context_chars=50_000,
             target_eta=0.95),
    Scenario("throughput-10k", "10,000 zero-latency sub-queries at C=64: rate and memory",
             n=10_000, c=64, context_chars=1_000_000, memory=True, target_rate=2000.0),
    VolleyScenario("volley-200", "rlm volley: 200 tasks, lognormal latencies (median 0.5 s, "
                   "sigma 0.5) at C=32", n=200, c=32, latency=0.5, sigma=0.5, target_eta=0.95),
    VolleyScenario("volley-10k", "rlm volley: 10,000 zero-latency tasks at C=64: rate and memory",
                   n=10_000, c=64, memory=True, target_rate=3000.0),
    VolleyScenario("volley-cap3-http", "rlm volley: 100 tasks of 0.2 s at C=16 against a server "
                   "with a hidden cap of 3 (T* = the cap's limit)", n=100, c=16, latency=0.2,
                   hidden_cap=3, target_eta=1 / 1.3),
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


def by_name(names: tuple[str, ...]) -> tuple[AnyScenario, ...]:
    """The named scenarios from either set; raises ``KeyError`` naming an unknown one."""
    known = {s.name: s for s in (*DEFAULT, *QUICK)}
    missing = [name for name in names if name not in known]
    if missing:
        raise KeyError(", ".join(missing))
    return tuple(known[name] for name in names)
