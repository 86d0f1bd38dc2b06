"""The physical limit T* of a run: the same work on an ideal, zero-overhead runtime.

``work_from_trace`` rebuilds what a run asked of its providers — per call, the
ordered root-model steps and bridge calls, each bridge call's sub-queries and
child calls — from its trace.  ``ideal_makespan`` replays that work in trio's
virtual time with nothing but the physical constraints:

- each request takes its *nominal* latency (what the simulated provider was
  told to sleep, read from the response metadata or given by the caller);
- sub-lane requests share ``sub_permits`` = ``max_concurrent - root_permits``
  permits, granted first come first served; root steps have their reserved
  permit and never wait (the gate's guarantee);
- with a rate ``r`` (``--rpm``/60) and burst ``B``, request slots follow the
  provider's bucket: GCRA, emission interval 1/r, tolerance (B−1)/r; the slot
  is reserved on arrival and the permit taken at the slot;
- a call's steps and bridge calls run one after another; the items of one
  bridge call start together, in order.

For a single batch of N homogeneous sub-queries this is exactly
``Σ root steps + max(⌈N/C⌉·L, (N−B)/r + L)`` whenever one of the two terms
dominates (:func:`formula_limit`); when both bind it is larger and still
achievable, e.g. N=100, C=10, L=2 s, 600 rpm gives 20.9 s, not 20 s.

With heterogeneous latencies the replay is greedy list scheduling in dispatch
order: each request starts as soon as a permit frees.  That is the best any
runtime can do that dispatches in order without knowing latencies in advance
(delaying a start never lets a later one finish sooner), and by Graham's bound
it is within a factor (2 − 1/C) of the clairvoyant optimum, whose lower bound
``max(max p, Σp / C)`` :func:`clairvoyant_bound` gives for reference.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.testing

__all__ = [
    "NOMINAL_LATENCY_KEY",
    "Batch",
    "CallWork",
    "Request",
    "clairvoyant_bound",
    "formula_limit",
    "ideal_makespan",
    "work_from_trace",
]

NOMINAL_LATENCY_KEY = "nominal_latency_s"  # set in llm_response metadata by the bench provider


@dataclass
class Request:
    """One provider request: a step (``step=True``) or a sub-query."""

    lane: str
    step: bool
    latency: float = 0.0


@dataclass
class Batch:
    """One bridge call: its items start together."""

    items: list[Request | CallWork] = field(default_factory=list)


@dataclass
class CallWork:
    """One call's work, in order: steps and bridge calls."""

    call_id: str
    depth: int
    segments: list[Request | Batch] = field(default_factory=list)

    def requests(self) -> Iterable[Request]:
        """Every request of this call and its descendants."""
        for segment in self.segments:
            if isinstance(segment, Request):
                yield segment
                continue
            for item in segment.items:
                if isinstance(item, Request):
                    yield item
                else:
                    yield from item.requests()


# (step?, the llm_response event) -> nominal latency in seconds
LatencyRule = Callable[[bool, Mapping[str, Any]], float]


def metadata_latency(step: bool, response: Mapping[str, Any]) -> float:
    """The nominal latency the bench provider recorded in the response's metadata."""
    value = response.get("metadata", {}).get(NOMINAL_LATENCY_KEY)
    if value is None:
        raise ValueError(f"llm_response {response.get('request_id')} has no {NOMINAL_LATENCY_KEY}")
    return float(value)


def work_from_trace(trace: Iterable[Mapping[str, Any]],
                    latency: LatencyRule = metadata_latency) -> CallWork:
    """The root call's work tree, rebuilt from a run's events."""
    calls: dict[str, CallWork] = {}
    open_batch: dict[str, Batch] = {}
    ahead: set[str] = set()  # calls whose open batch holds calls a loop sent ahead
    requests: dict[int, Request] = {}
    root: CallWork | None = None
    for event in trace:
        kind, call_id = event["event"], event.get("call_id", "")
        if kind == "call_started":
            call = calls[call_id] = CallWork(call_id, int(event["depth"]))
            parent = event.get("parent_id")
            if parent is None:
                root = call
            elif parent in open_batch:
                open_batch[parent].items.append(call)
        elif kind == "bridge_call_started":
            # The calls a loop sent ahead (auto-batching) are one fan-out, as a batch is.
            batch = open_batch.get(call_id) if call_id in ahead and event.get(
                "speculative") else None
            if batch is None:
                batch = Batch()
                calls[call_id].segments.append(batch)
            open_batch[call_id] = batch
            (ahead.add if event.get("speculative") else ahead.discard)(call_id)
        elif kind == "bridge_call_finished" and call_id not in ahead:
            open_batch.pop(call_id, None)
        elif kind == "loop_batched":
            ahead.discard(call_id)
            open_batch.pop(call_id, None)
        elif (kind == "llm_request" and call_id in calls
              and int(event["request_id"]) not in requests):  # a retry is the same request
            call = calls[call_id]
            step = int(event["depth"]) == call.depth
            request = requests[int(event["request_id"])] = Request(str(event["lane"]), step)
            if step or call_id not in open_batch:
                call.segments.append(request)
            else:
                open_batch[call_id].items.append(request)
        elif (kind == "llm_response" and int(event.get("request_id", -1)) in requests
              and event.get("status", "ok") == "ok"):  # a refused attempt did no work
            request = requests[int(event["request_id"])]
            request.latency = latency(request.step, event)
    if root is None:
        raise ValueError("the trace has no root call_started event")
    return root


class _FifoPermits:
    """Permits granted strictly in the order they were asked for."""

    def __init__(self, total: int) -> None:
        self.free = total
        self.waiters: deque[trio.Event] = deque()

    def ask(self) -> trio.Event | None:
        """Take a permit now (``None``) or get in line (wait on the event)."""
        if self.free > 0 and not self.waiters:
            self.free -= 1
            return None
        ticket = trio.Event()
        self.waiters.append(ticket)
        return ticket

    def release(self) -> None:
        if self.waiters:
            self.waiters.popleft().set()  # the permit passes straight to the next in line
        else:
            self.free += 1


class _Replay:
    def __init__(self, sub_permits: int, rate: float | None, burst: int) -> None:
        self.permits = _FifoPermits(sub_permits)
        self.interval = 1.0 / rate if rate else 0.0
        self.tolerance = max(0, burst - 1) * self.interval
        self.tat = -math.inf

    def _slot(self, now: float, queue: bool) -> float:
        if not self.interval:
            return now
        start = max(now, self.tat - self.tolerance) if queue else now
        self.tat = max(self.tat, start) + self.interval
        return start

    def launch(self, nursery: trio.Nursery, item: Request | CallWork) -> None:
        """Start ``item`` now; slots and places in line are taken in call order."""
        if isinstance(item, CallWork):
            nursery.start_soon(self.call, item)
            return
        now = trio.current_time()
        sub = item.lane != "root"
        start = self._slot(now, queue=sub)
        ticket = self.permits.ask() if sub and start <= now else None
        nursery.start_soon(self._request, item, start, sub, start <= now, ticket)

    async def _request(self, request: Request, start: float, sub: bool, in_line: bool,
                       ticket: trio.Event | None) -> None:
        await trio.sleep_until(start)
        if sub and not in_line:
            ticket = self.permits.ask()
        if ticket is not None:
            await ticket.wait()
        await trio.sleep(request.latency)
        if sub:
            self.permits.release()

    async def call(self, call: CallWork) -> None:
        for segment in call.segments:
            async with trio.open_nursery() as nursery:
                for item in segment.items if isinstance(segment, Batch) else [segment]:
                    self.launch(nursery, item)


def ideal_makespan(work: CallWork, *, sub_permits: int, rpm: float | None = None,
                   burst: int = 1) -> float:
    """T*: how long ``work`` takes on the ideal runtime described in the module docstring."""
    if sub_permits < 1 or burst < 1:
        raise ValueError("sub_permits and burst must be at least 1")
    replay = _Replay(sub_permits, rpm / 60.0 if rpm else None, burst)

    async def main() -> float:
        await replay.call(work)
        return trio.current_time()

    return float(trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)))


def formula_limit(*, root_s: float, n: int, c: int, latency: float,
                  rpm: float | None = None, burst: int = 1) -> float:
    """``root_s + max(⌈N/C⌉·L, (N−B)/r + L)`` for one batch of homogeneous sub-queries."""
    fan_out = math.ceil(n / c) * latency
    if rpm:
        fan_out = max(fan_out, max(0, n - burst) / (rpm / 60.0) + latency)
    return root_s + fan_out


def clairvoyant_bound(latencies: Iterable[float], c: int) -> float:
    """``max(max p, Σp / C)``: no schedule of these jobs on C permits is shorter."""
    values = list(latencies)
    return max(max(values, default=0.0), sum(values) / c)
