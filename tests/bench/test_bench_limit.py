"""The physical limit T*: closed forms, list scheduling, and rebuilding work from a trace."""

from __future__ import annotations

import math
from typing import Any

import pytest

from rlm.view.limit import (
    Batch,
    CallWork,
    Request,
    clairvoyant_bound,
    formula_limit,
    ideal_makespan,
    work_from_trace,
)


def _fan_out(latencies: list[float], *, root: float = 0.0) -> CallWork:
    steps = [Request("root", True, root)] if root else []
    return CallWork("root", 0, [*steps, Batch([Request("sub", False, x) for x in latencies])])


@pytest.mark.parametrize(("n", "c"), [(1, 1), (7, 8), (8, 8), (9, 8), (32, 8), (37, 8)])
def test_homogeneous_batch_is_the_closed_form(n: int, c: int) -> None:
    work = _fan_out([0.5] * n, root=0.25)
    expected = formula_limit(root_s=0.25, n=n, c=c, latency=0.5)
    assert expected == 0.25 + math.ceil(n / c) * 0.5
    assert ideal_makespan(work, sub_permits=c) == pytest.approx(expected)


@pytest.mark.parametrize("burst", [1, 5])
def test_rate_bound_batch_is_the_closed_form(burst: int) -> None:
    work = _fan_out([0.2] * 40)
    expected = formula_limit(root_s=0, n=40, c=8, latency=0.2, rpm=600, burst=burst)
    assert expected == pytest.approx((40 - burst) / 10 + 0.2)
    assert ideal_makespan(work, sub_permits=8, rpm=600, burst=burst) == pytest.approx(expected)


def test_when_rate_and_permits_both_bind_the_replay_is_tighter_than_the_formula() -> None:
    # Issue 3's example: 100 x 2 s at C=10 and 600 rpm takes 20.9 s, not max(20, 11.9).
    work = _fan_out([2.0] * 100)
    assert formula_limit(root_s=0, n=100, c=10, latency=2.0, rpm=600) == 20.0
    assert ideal_makespan(work, sub_permits=10, rpm=600) == pytest.approx(20.9)


def test_root_steps_charge_the_rate_but_never_wait_for_a_permit() -> None:
    work = _fan_out([0.2] * 40, root=0.0)
    work.segments.insert(0, Request("root", True, 0.0))
    # The root step takes slot 0, so the 40 sub-queries start at 0.1 s ... 4.0 s.
    assert ideal_makespan(work, sub_permits=8, rpm=600) == pytest.approx(4.2)


@pytest.mark.parametrize(
    ("latencies", "c", "expected", "lower"),
    [([3, 1, 1, 1], 2, 3.0, 3.0), ([1, 1, 3], 2, 4.0, 3.0), ([2, 2, 2, 2, 2], 2, 6.0, 5.0)],
)
def test_heterogeneous_batch_is_greedy_list_scheduling_in_order(
    latencies: list[float], c: int, expected: float, lower: float
) -> None:
    work = _fan_out([float(x) for x in latencies])
    assert ideal_makespan(work, sub_permits=c) == pytest.approx(expected)
    assert clairvoyant_bound(latencies, c) == pytest.approx(lower)
    assert ideal_makespan(work, sub_permits=c) >= clairvoyant_bound(latencies, c)


def test_child_calls_run_their_steps_and_fan_outs_under_the_shared_permits() -> None:
    def child(i: int) -> CallWork:
        subs = Batch([Request("sub", False, 0.2), Request("sub", False, 0.2)])
        return CallWork(f"root.{i}", 1, [Request("sub", True, 0.1), subs])

    work = CallWork("root", 0, [Request("root", True, 0.1), Batch([child(1), child(2)])])
    # root step 0.1; both child steps 0.1-0.2; 4 sub-queries on 2 permits 0.2-0.6.
    assert ideal_makespan(work, sub_permits=2) == pytest.approx(0.6)
    assert ideal_makespan(work, sub_permits=4) == pytest.approx(0.4)


def _event(kind: str, call_id: str = "root", depth: int = 0, **fields: Any) -> dict[str, Any]:
    return {"event": kind, "call_id": call_id, "depth": depth, **fields}


def _response(request_id: int, latency: float) -> dict[str, Any]:
    return _event("llm_response", request_id=request_id,
                  metadata={"nominal_latency_s": latency})


def test_work_is_rebuilt_from_a_trace() -> None:
    trace = [
        _event("run_started"),
        _event("call_started", parent_id=None),
        _event("llm_request", request_id=1, lane="root"),
        _response(1, 0.3),
        _event("bridge_call_started", bridge_id=1, items=3),
        *[_event("llm_request", depth=1, request_id=k, lane="sub") for k in (2, 3, 4)],
        *[_response(k, 0.5) for k in (4, 2, 3)],
        _event("bridge_call_finished", bridge_id=1),
        _event("llm_request", request_id=5, lane="root"),  # a second step
        _response(5, 0.3),
        _event("run_finished"),
    ]
    work = work_from_trace(trace)
    kinds = [type(s).__name__ for s in work.segments]
    assert kinds == ["Request", "Batch", "Request"]
    batch = work.segments[1]
    assert isinstance(batch, Batch) and len(batch.items) == 3
    assert [r.latency for r in work.requests()] == [0.3, 0.5, 0.5, 0.5, 0.3]
    assert ideal_makespan(work, sub_permits=2) == pytest.approx(0.3 + 1.0 + 0.3)


def test_a_trace_without_nominal_latencies_needs_a_rule() -> None:
    trace = [_event("call_started", parent_id=None), _event("llm_request", request_id=1,
             lane="root"), _event("llm_response", request_id=1, metadata={})]
    with pytest.raises(ValueError, match="nominal_latency_s"):
        work_from_trace(trace)
    work = work_from_trace(trace, lambda step, response: 0.7 if step else 0.1)
    assert ideal_makespan(work, sub_permits=1) == pytest.approx(0.7)
