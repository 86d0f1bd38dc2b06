"""The sequential-loop scenario: the loop models write, auto-batched, against its batched form.

The same chunks run three times on the fixture model: fanned out with
``llm_query_batched``, asked by a sequential ``llm_query`` loop with
auto-batching, and by the same loop one call at a time (``auto_batch`` off,
as runtimes without it run such a loop).  The loop's speedup over one call at a
time must be at least ``target_share`` of the batched form's; the loop's
sub-queries, from the first sent ahead to the last answer (its
``loop_batched`` event), must fit in ``target_fan_out_s``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlm.bench.figures import Check, Figures
from rlm.bench.run import ScenarioResult, measure, one_run
from rlm.bench.scenarios import LoopScenario, Scenario

__all__ = ["loop_figures"]


def _measured(s: Scenario) -> tuple[ScenarioResult, Sequence[Mapping[str, Any]]]:
    run = one_run(s)
    return measure(s, run.result, zygote_boot_s=run.boot_s, cpu_s=run.cpu_s), run.result.trace


def _fan_out_s(trace: Sequence[Mapping[str, Any]]) -> float | None:
    """The root's fan-out: its auto-batched loop, or its llm_query_batched call."""
    for kind in ("loop_batched", "bridge_call_finished"):
        spans = [float(e["duration_s"]) for e in trace
                 if e["event"] == kind and e.get("call_id") == "root"]
        if spans:
            return sum(spans)
    return None


def loop_figures(s: LoopScenario) -> Figures:
    """Run ``s`` three ways; the loop's share of the batched speedup, and its fan-out."""
    batched, _ = _measured(s.run)
    looped, trace = _measured(s.run.sequential(auto_batch=True))
    one_by_one, _ = _measured(s.run.sequential())
    loop_speedup = one_by_one.t / looped.t if looped.t > 0 else 0.0
    batched_speedup = one_by_one.t / batched.t if batched.t > 0 else 0.0
    share = loop_speedup / batched_speedup if batched_speedup > 0 else None
    fan_out = _fan_out_s(trace)
    checks = [Check("loop speedup", share,
                    "—" if share is None else f"{share:.2f} of batched",
                    f"≥ {s.target_share:g} of batched",
                    None if share is None else share >= s.target_share)]
    if s.target_fan_out_s is not None:
        checks.append(Check("loop fan-out", fan_out,
                            "—" if fan_out is None else f"fan-out {fan_out:.2f} s",
                            f"≤ {s.target_fan_out_s:g} s",
                            fan_out is not None and fan_out <= s.target_fan_out_s))
    notes = (f"speedup over one call at a time: loop {loop_speedup:.1f}×, batched "
             f"{batched_speedup:.1f}× (T {one_by_one.t:.2f} s one by one)",)
    detail = {"batched": batched.as_json(), "loop": looped.as_json(),
              "one_by_one": one_by_one.as_json(), "fan_out_s": fan_out}
    return Figures(s.name, s.about, looped.n, s.run.c, looped.t, looped.t_star, tuple(checks),
                   batched.correct and looped.correct and one_by_one.correct, notes, detail)
