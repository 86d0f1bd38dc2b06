"""Where the time went: the phases ``rlm bench`` reports, and the root call's own path.

``rlm bench`` compares a run's makespan T with T*, the same work replayed on
an ideal zero-overhead runtime (:mod:`rlm.view.limit`), and splits T − T*
into start-up, fan-out overhead and tail (:func:`time_phases`).
Here T* replays the run with the latencies it actually saw (a bench run uses
the nominal ones instead).  The root call's path splits its wall time into
root-model steps, code, bridge calls (fan-out), sandbox start and the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["REPLAY_LIMIT", "time_phases", "time_summary"]

#: Above this many requests T* is not replayed: the replay runs every request as a trio task
#: in virtual time (seconds for 10,000), and a page should appear at once.  `rlm bench` has it.
REPLAY_LIMIT = 2_000


def time_phases(trace: Sequence[Mapping[str, Any]], t: float, t_star: float,
                root_s: float) -> dict[str, float]:
    """Split the run into before the first sub-query, the fan-out and after the last one.

    ``startup_s``: run start to the first sub-lane request, minus root-step
    latency spent there (sandbox start, REPL code, scheduling).  ``tail_s``:
    last sub-lane response to ``t`` (the run's ``duration_s``: until its outcome
    was known), minus root steps there (aggregation, FINAL).  The sandbox
    teardown after the outcome is not in ``t`` (``run_finished.teardown_s``).
    ``fanout_overhead_s``: the rest of T − T*.  ``sandbox_start_s``: the slowest
    ``sandbox_started.startup_s``.
    """
    subs = [e for e in trace if e["event"] in ("llm_request", "llm_response")
            and e.get("lane") == "sub"]
    if not subs:
        return {}
    first, last = subs[0]["t"], subs[-1]["t"]
    root_before = sum(float(e.get("latency_s", 0.0)) for e in trace
                      if e["event"] == "llm_response" and e.get("lane") == "root"
                      and e["t"] <= first)
    root_before = min(root_before, root_s)
    startup = max(0.0, first - root_before)
    tail = max(0.0, t - last - (root_s - root_before))
    starts = [float(e["startup_s"]) for e in trace if e["event"] == "sandbox_started"]
    return {"startup_s": round(startup, 6), "fanout_overhead_s": round(t - t_star - startup
            - tail, 6), "tail_s": round(tail, 6), "sandbox_start_s": max(starts, default=0.0)}


def _observed_latency(step: bool, response: Mapping[str, Any]) -> float:
    return float(response.get("latency_s") or 0.0)


def _bench_run(events: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the trace is a ``rlm bench`` run's (its responses carry their nominal
    latency, so that T* can be rebuilt)."""
    from rlm.view.limit import NOMINAL_LATENCY_KEY

    return any(e.get("event") == "llm_response"
               and NOMINAL_LATENCY_KEY in (e.get("metadata") or {}) for e in events)


def _bench_phases(events: Sequence[Mapping[str, Any]], t: float,
                  config: Mapping[str, Any]) -> dict[str, Any]:
    # Imported here: the replay needs trio, which drawing a page does not.
    from rlm.view.limit import ideal_makespan, work_from_trace

    try:
        work = work_from_trace(events, _observed_latency)
        requests = list(work.requests())
        if len(requests) > REPLAY_LIMIT:
            root_s = sum(r.latency for r in requests if r.lane == "root")
            phases = time_phases(list(events), t, t, root_s)
            phases.pop("fanout_overhead_s", None)  # T − T* needs T*
            return {"root_s": round(root_s, 6), "skipped": len(requests),
                    "n_sub": sum(1 for r in requests if r.lane != "root"), **phases}
        permits = int(config.get("max_concurrent", 8)) - int(config.get("root_permits", 1))
        t_star = ideal_makespan(work, sub_permits=max(1, permits), rpm=config.get("rpm"),
                                burst=int(config.get("burst") or 1))
    except (KeyError, ValueError, TypeError):  # a cut or foreign trace: no replay
        return {}
    root_s = sum(r.latency for r in requests if r.lane == "root")
    phases = time_phases(list(events), t, t_star, root_s)
    return {"t_star": round(t_star, 6), "eta": round(t_star / t, 4) if t > 0 else None,
            "root_s": round(root_s, 6), "n_sub": sum(1 for r in requests if r.lane != "root"),
            **phases}


def _root_path(model: Mapping[str, Any], t: float) -> dict[str, float]:
    """The root call's wall time by what it was doing."""
    timeline = model["timeline"]
    a = timeline["attempts"]
    llm = sum(end - queued for end, queued, lane, step in
              zip(a.get("end", []), a.get("queued", []), a.get("lane", []), a.get("step", []),
                  strict=True) if lane == 0 and step)
    backoff = sum(t1 - t0 for t0, t1, lane in zip(timeline["backoffs"].get("t0", []),
                  timeline["backoffs"].get("t1", []), timeline["backoffs"].get("lane", []),
                  strict=True) if lane == 0)
    root = next((c for c in model["calls"] if c["parent"] is None), None)
    code = fan_out = 0.0
    if root is not None:
        for step in root["steps"]:
            code += sum(float(b.get("duration_s") or 0.0) for b in step["blocks"])
            # Bridge calls a loop sent ahead (auto-batching) overlap: their union counts.
            fan_out += _covered([(float(b["t0"]), float(b["t0"]) + float(b["duration_s"]))
                                 for b in step["bridges"] if b.get("duration_s") is not None])
    starts = [t1 - t0 for t0, t1, call in zip(timeline["sandboxes"].get("t0", []),
              timeline["sandboxes"].get("t1", []), timeline["sandboxes"].get("call_id", []),
              strict=True) if call == "root"]
    parts = {"root_steps_s": llm, "retry_backoff_s": backoff, "code_s": max(0.0, code - fan_out),
             "fan_out_s": fan_out}
    parts["other_s"] = max(0.0, t - sum(parts.values()))
    parts["sandbox_start_s"] = max(starts, default=0.0)  # overlaps the first step: not summed
    return {k: round(v, 6) for k, v in parts.items()}


def _covered(spans: list[tuple[float, float]]) -> float:
    """How much time the spans (start, end) cover together."""
    total, reached = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reached:
            total += end - max(start, reached)
            reached = end
    return total


def _waits(model: Mapping[str, Any]) -> dict[str, Any]:
    a, timeline = model["timeline"]["attempts"], model["timeline"]
    queue = sum(p - q for p, q in zip(a.get("paced", []), a.get("queued", []), strict=True))
    pace = sum(s - p for s, p in zip(a.get("sent", []), a.get("paced", []), strict=True))
    return {"queue_wait_s": round(queue, 6), "pace_wait_s": round(pace, 6),
            "backoff_s": round(sum(t1 - t0 for t0, t1 in zip(timeline["backoffs"].get("t0", []),
                               timeline["backoffs"].get("t1", []), strict=True)), 6),
            "retries": len(timeline["backoffs"].get("t0", [])),
            "rate_limited": sum(1 for s in a.get("status", []) if s == 3)}


def time_summary(events: Sequence[Mapping[str, Any]], model: Mapping[str, Any]) -> dict[str, Any]:
    """The ``time`` section of the page: T, the bench phases, the root path, the waits."""
    run = model["run"]
    t = float(run.get("duration_s") or model["timeline"]["end"] or 0.0)
    finished = run.get("status") != "unfinished"
    # The physical-limit comparison is rlm bench's measure: a plain run's η reads as a
    # failure to anyone not benchmarking (its T* counts none of the model's thinking).
    bench = (_bench_phases(events, t, run.get("config") or {})
             if finished and _bench_run(events) else {})
    return {"t": round(t, 6), "bench": bench, "root": _root_path(model, t), **_waits(model)}
