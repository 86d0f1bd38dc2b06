"""One test per design invariant (DESIGN.md, "Invariants worth a test each").

Scheduling and limits run the real Runtime (calls, gate, budget, bridge)
in virtual time with in-process fakes: a scripted ``FunctionProvider`` and the in-process
sandboxes of ``rlm.testing.sandboxes`` whose "code" is a line language
(``batch N``, ``query``).  Tests that
need real sandbox processes use the real clock and small latencies.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
import trio

from rlm import RLM
from rlm._config import RunConfig
from rlm._events import EventBus
from rlm._run.runtime import RunOutcome, Runtime
from rlm._sandbox.process import HostEnds, Sandbox
from rlm.errors import AuthenticationError, ProviderError, ProviderStatusError, SandboxCrashed
from rlm.providers.base import CompletionRequest, Lane
from rlm.testing.provider import FunctionProvider, assistant_turns
from rlm.testing.sandboxes import LineLauncher
from rlm_sandbox.protocol import BridgeAnswer, BridgeRequest
from tests.helpers import pid_alive, repl

Trace = list[dict[str, Any]]


# -- in-process fakes ----------------------------------------------------------


async def run_fake(provider: FunctionProvider, **settings: Any) -> tuple[RunOutcome, Trace]:
    """The real Runtime with fake sandboxes; returns the outcome and the trace."""
    config = RunConfig(provider="fixture", **settings).validate()
    events = EventBus()
    runtime = Runtime.build(
        config,
        providers={"root": provider, "sub": provider},
        events=events,
        sandboxes=LineLauncher(),
    )
    outcome = await runtime.run_root("q", "ctx", serve=True)
    return outcome, [e.to_dict() for e in events.events]


def code(*lines: str) -> str:
    return repl("\n".join(lines))


def kinds(trace: Trace, kind: str) -> Trace:
    return [e for e in trace if e["event"] == kind]


def by_call(script: dict[str, list[str]]) -> Callable[[CompletionRequest], str]:
    """Root/child replies by call id (``root``, ``child`` for any other) and step."""

    def reply(request: CompletionRequest) -> str:
        steps = script["root" if request.call_id == "root" else "child"]
        return steps[min(assistant_turns(request), len(steps) - 1)]

    return reply


def fail_first_attempt(
    status: int, retry_after: float | None = None
) -> Callable[[CompletionRequest], ProviderError | None]:
    """Every sub-query prompt fails once with ``status``, then succeeds."""
    seen: set[int] = set()

    def fail(request: CompletionRequest) -> ProviderError | None:
        if request.lane != "sub" or id(request) in seen:  # every attempt reuses the request
            return None
        seen.add(id(request))
        return ProviderStatusError(
            f"HTTP {status}", status=status, retryable=True, retry_after=retry_after
        )

    return fail


# -- 1. the gate: no bypass, the cap holds, root steps do not queue --------------------


async def test_1_every_request_passes_the_gate_under_the_cap(
    autojump_clock: trio.abc.Clock,
) -> None:
    script = {"root": [code("batch 4"), "FINAL(root done)"], "child": [code("batch 3"), "FINAL(c)"]}
    provider = FunctionProvider.scripted(by_call(script), latency=lambda r: 1.0)
    outcome, trace = await run_fake(provider, max_depth=2, max_concurrent=3, root_permits=1)
    assert outcome.root is not None and outcome.root.answer == "root done"
    requests = kinds(trace, "llm_request")
    assert len(requests) == len(provider.requests) == 2 + 4 * (2 + 3)
    assert provider.peak["all"] <= 3 and provider.peak["sub"] <= 2
    assert max(e["in_flight"] for e in requests) <= 3
    assert all(e["queue_wait_s"] == 0 for e in requests if e["lane"] == "root")
    assert any(e["queue_wait_s"] > 0 for e in requests if e["lane"] == "sub")  # subs saturated


async def test_1_root_step_takes_its_reserved_permit_while_subs_saturate(
    autojump_clock: trio.abc.Clock,
) -> None:
    provider = FunctionProvider.scripted(
        ["FINAL(x)"], latency=lambda r: 10.0 if r.lane == "sub" else 1.0
    )
    runtime = Runtime.build(
        RunConfig(provider="fixture", max_concurrent=3, root_permits=1).validate(),
        providers={"root": provider, "sub": provider},
        events=EventBus(),
    )
    done: dict[str, float] = {}

    async def ask(lane: Lane, name: str) -> None:
        request = CompletionRequest([{"role": "user", "content": name}], "m", lane=lane)
        await runtime.gate.complete(request)
        done[name] = trio.current_time()

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for i in range(6):
            nursery.start_soon(ask, "sub", f"sub{i}")
        await trio.sleep(1)
        nursery.start_soon(ask, "root", "root")
    assert done["root"] - start == pytest.approx(2.0)  # sent at once, 1 s latency
    assert sorted(done[f"sub{i}"] - start for i in range(6)) == pytest.approx(
        [10, 10, 20, 20, 30, 30]
    )
    assert provider.peak["sub"] == 2 and provider.peak["all"] == 3


# -- 2. max_llm_calls is exact, batches and retries included -----------------------------


@pytest.mark.parametrize("max_depth", [1, 2])
@pytest.mark.parametrize("limit", [1, 3, 7, 12, 20])
async def test_2_max_llm_calls_never_exceeded(
    autojump_clock: trio.abc.Clock, limit: int, max_depth: int
) -> None:
    script = by_call(
        {
            "root": [code("batch 6", "batch 6"), code("batch 6"), "FINAL(done)"],
            "child": [code("batch 2"), "FINAL(c)"],
        }
    )
    provider = FunctionProvider.scripted(
        script, latency=lambda r: 1.0, fail=fail_first_attempt(503)
    )
    outcome, trace = await run_fake(
        provider, max_llm_calls=limit, max_depth=max_depth, max_concurrent=5
    )
    assert len(provider.requests) <= limit
    assert len(kinds(trace, "llm_request")) == len(provider.requests)
    assert outcome.error is None or type(outcome.error).__name__ == "BudgetExceeded"
    if limit >= 7:
        assert kinds(trace, "llm_retry")  # the limit was reached with retries in the mix


# -- 3. one call's commands in order; calls never wait for each other ---------------------


async def test_3_commands_of_a_call_are_ordered_and_calls_do_not_block_each_other(
    autojump_clock: trio.abc.Clock,
) -> None:
    script = by_call({"root": [code("batch 2"), "FINAL(r)"], "child": [code("query"), "FINAL(c)"]})

    def latency(request: CompletionRequest) -> float:
        slow_step = request.call_id == "root.1" and request.messages[0]["role"] == "system"
        return 100.0 if slow_step else 1.0

    provider = FunctionProvider.scripted(script, latency=latency)
    outcome, trace = await run_fake(provider, max_depth=2)
    assert outcome.root is not None and outcome.root.answer == "r"
    steps: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for e in trace:
        if e["event"] in ("call_started", "step_completed", "code_executed", "call_finished"):
            steps[e["call_id"]].append((e["event"], e.get("iteration", 0)))
    expected = [
        ("call_started", 0),
        ("step_completed", 1),
        ("code_executed", 1),
        ("step_completed", 2),
        ("call_finished", 0),
    ]
    assert set(steps) == {"root", "root.1", "root.2"}
    assert all(sequence == expected for sequence in steps.values()), steps
    at = {(e["event"], e["call_id"]): e["t"] for e in trace if e["event"] in ("code_executed",)}
    slow_step = next(e["t"] for e in kinds(trace, "step_completed") if e["call_id"] == "root.1")
    # root step 1 s, fast child step 1 s, its sub-query 1 s: done at 3 while the slow one thinks
    assert at[("code_executed", "root.2")] == pytest.approx(3.0)
    assert slow_step == pytest.approx(101.0)


# -- 6. a trace alone explains where the time went ------------------------------------------


def assert_trace_explains_time(trace: Trace) -> None:
    """Every request starts when it became ready plus its recorded waits; every bridge
    and code block ends with its last request; the root call's steps are contiguous."""
    ready: dict[tuple[int, int], float] = {}
    last_event: dict[str, float] = {}
    bridge_open: dict[str, float] = {}
    responses_since: dict[str, float] = {}
    for e in trace:
        kind, call = e["event"], e["call_id"]
        if kind == "bridge_call_started":
            bridge_open[call] = e["t"]
            responses_since[call] = e["t"]
        elif kind == "bridge_call_finished":
            assert e["t"] == pytest.approx(responses_since.pop(call)), e
            assert e["duration_s"] == pytest.approx(e["t"] - bridge_open.pop(call))
        elif kind == "llm_retry":
            ready[(e["request_id"], e["attempt"])] = e["t"] + e["delay_s"]
        elif kind == "llm_request":
            key = (e["request_id"], e["attempt"])
            if key not in ready:  # a first attempt is ready when its step or bridge began
                ready[key] = bridge_open[call] if e["depth"] > call.count(".") else last_event[call]
            waited = e["queue_wait_s"] + e["pace_wait_s"]
            assert e["t"] - waited == pytest.approx(ready[key], abs=1e-5), e
        elif kind == "llm_response":
            if e["depth"] > call.count("."):
                responses_since[call] = max(responses_since[call], e["t"])
        elif kind == "code_executed":
            assert e["t"] - e["duration_s"] == pytest.approx(last_event[call]), e
        if kind in ("call_started", "step_completed", "code_executed"):
            last_event[call] = e["t"]


@pytest.mark.parametrize("items", [3, 6])
async def test_6_every_wait_and_retry_is_in_the_trace(
    autojump_clock: trio.abc.Clock, items: int
) -> None:
    script = by_call({"root": [code(f"batch {items}", "batch 2"), "FINAL(done)"], "child": [""]})
    provider = FunctionProvider.scripted(
        script, latency=lambda r: 1.0, fail=fail_first_attempt(503, retry_after=5.0)
    )
    outcome, trace = await run_fake(provider, max_concurrent=3, root_permits=1, rpm=30)
    assert outcome.root is not None and outcome.root.answer == "done"
    assert kinds(trace, "llm_retry") and kinds(trace, "capacity_changed")
    assert any(e["pace_wait_s"] > 0 for e in kinds(trace, "llm_request"))
    assert any(e["queue_wait_s"] > 0 for e in kinds(trace, "llm_request"))
    assert_trace_explains_time(trace)
    finished = kinds(trace, "call_finished")[-1]
    last_root = [e for e in kinds(trace, "llm_response") if e["lane"] == "root"][-1]
    assert finished["t"] == pytest.approx(last_root["t"])  # nothing after the last step


# -- 7. time is trio's clock -------------------------------------------------------------


@pytest.mark.parametrize("run_timeout", [None, 250.0])
async def test_7_hundred_second_latencies_run_in_virtual_time(
    autojump_clock: trio.abc.Clock, run_timeout: float | None
) -> None:
    script = by_call({"root": [code("batch 4"), "FINAL(done)"], "child": [""]})
    provider = FunctionProvider.scripted(script, latency=lambda r: 100.0)
    wall, start = time.monotonic(), trio.current_time()
    outcome, trace = await run_fake(provider, timeout=run_timeout)
    assert time.monotonic() - wall < 2.0
    if run_timeout is None:
        assert outcome.root is not None and outcome.root.answer == "done"
        assert trio.current_time() - start == pytest.approx(300.0)
    else:
        assert type(outcome.error).__name__ == "RunTimeout"
        assert trio.current_time() - start == pytest.approx(250.0)
    responses = kinds(trace, "llm_response")
    answered = [e["t"] for e in responses if e["status"] != "cancelled"]
    assert answered == pytest.approx(
        [100, 200, 200, 200, 200, 300][: 6 if run_timeout is None else 5]
    )
    cancelled = [e["t"] for e in responses if e["status"] == "cancelled"]
    assert cancelled == ([] if run_timeout is None else [pytest.approx(250.0)])


# -- 4. no sandbox outlives its run (real sandboxes, real clock) ----------------------------


def sandbox_descendants() -> set[int]:
    """Live processes below this one running ``-m sandbox`` (the zygote and its forks)."""
    stats: dict[int, list[str]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stats[int(pid)] = f.read().rsplit(") ", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                stats[int(pid)].append(str(b"sandbox" in f.read()))
        except (FileNotFoundError, ProcessLookupError):
            stats.pop(int(pid), None)
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, st in stats.items() if int(st[1]) in frontier} - found
        found |= frontier
    return {pid for pid in found if stats[pid][0] != "Z" and stats[pid][-1] == "True"}


ENDINGS = {
    "answer": "answered",
    "error": "error",
    "budget": "budget_exceeded",
    "timeout": "timeout",
    "cancel": None,
    "interrupt": "interrupted",
}


@pytest.mark.parametrize("ending", list(ENDINGS))
async def test_4_no_sandbox_process_survives_the_run(ending: str) -> None:
    sleep = 0 if ending in ("answer", "error", "budget") else 30
    script = by_call(
        {
            "root": [repl("print(llm_query_batched(['a', 'b']))"), "FINAL(done)"],
            "child": [repl(f"import time\ntime.sleep({sleep})\nprint(1)"), "FINAL(c)"],
        }
    )

    def fail(request: CompletionRequest) -> ProviderError | None:
        second_root_step = request.call_id == "root" and assistant_turns(request) == 1
        if ending == "error" and second_root_step:
            return AuthenticationError("HTTP 401", status=401)
        return None

    seen: set[int] = set()
    before = sandbox_descendants()
    started: dict[int, str] = {}
    exited: dict[int, int | None] = {}
    all_started = trio.Event()  # the root's sandbox and both children's

    def watch(event: Any) -> None:
        if event.kind == "sandbox_started":
            seen.update(sandbox_descendants() - before)
            started[event.pid] = event.call_id
            if len(started) == 3:
                all_started.set()
        elif event.kind == "sandbox_exited":
            exited[event.pid] = event.returncode

    # The timeout must come while the children sleep: their sandboxes start well within
    # 3 s even on a loaded machine.  Cancel and Ctrl-C come once all three are running.
    limits: dict[str, dict[str, Any]] = {
        "budget": {"max_llm_calls": 3},
        "timeout": {"timeout": 3.0},
    }
    settings = {"max_depth": 2, **limits.get(ending, {})}
    model = RLM(
        providers={"root": (p := FunctionProvider.scripted(script, fail=fail)), "sub": p},
        sinks=[watch],
        **settings,
    )
    result = None
    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as run_scope:
            if ending in ("cancel", "interrupt"):
                nursery.start_soon(stop_when, all_started, model if ending == "interrupt"
                                   else run_scope)
            with trio.fail_after(30):
                try:
                    result = await model.acompletion("q", "ctx")
                except AuthenticationError as exc:
                    result = exc.result
    assert (result.status if result else None) == ENDINGS[ending]
    assert len(seen) >= (4 if sleep else 2)  # the zygote, root's and children's sandboxes
    assert not {pid for pid in seen if pid_alive(pid)}
    assert not sandbox_descendants() - before
    # the host itself killed and reaped every call's sandbox (not only the zygote's death)
    assert set(exited) == set(started) and None not in exited.values()


async def stop_when(ready: trio.Event, stop: RLM | trio.CancelScope) -> None:
    """Ctrl-C the model, or cancel the scope running it, once ``ready`` is set."""
    await ready.wait()
    if isinstance(stop, RLM):
        stop.interrupt()
    else:
        stop.cancel()


# -- 5. a misbehaving sandbox costs its call an error, never the host ------------------------


async def test_5_flood_hang_and_crash_cost_only_an_error() -> None:
    steps = [
        repl("print('x' * 50_000_000)"),  # printed flood: truncated
        repl("for i in range(5):\n    llm_query('y' * 15_000_000)"),  # > 64 MiB of frames
        repl("while True:\n    pass"),  # hang: --exec-timeout
        repl("import time\ntime.sleep(30)"),  # killed from outside below
        "FINAL(survived)",
    ]
    provider = FunctionProvider.scripted(steps)
    trace: list[Any] = []
    sleeper_ready = trio.Event()

    def sink(event: Any) -> None:
        trace.append(event)
        # The sleeper runs in the third sandbox (the first dies of the frame flood, the
        # second of the timeout), once the fourth step is there: wait for both, whatever
        # order they come in and however long a spawn takes.
        started = [e for e in trace if e.kind == "sandbox_started"]
        fourth = any(e.kind == "step_completed" and e.iteration == 4 for e in trace)
        if len(started) >= 3 and fourth:
            sleeper_ready.set()

    # 3 s, not less: on a loaded machine pushing 64 MiB of frames through a pipe can take
    # over a second, and the flood must be caught as a flood, not as a timeout.
    model = RLM(providers={"root": provider, "sub": provider}, sinks=[sink], exec_timeout=3.0)

    async def kill_the_sleeper() -> None:
        await sleeper_ready.wait()
        # Killed before, while or after it reads the code: the execution is lost either way.
        os.kill([e.pid for e in trace if e.kind == "sandbox_started"][2], signal.SIGKILL)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(kill_the_sleeper)
            result = await model.acompletion("q", "ctx")
            nursery.cancel_scope.cancel()  # a run that never got the sleeper ends here too
    assert result.status == "answered" and result.answer == "survived"
    executed = kinds(list(result.trace), "code_executed")
    assert executed[0]["ok"] and executed[0]["output_chars"] == 50_000_001
    assert [bool(e["error"]) for e in executed] == [False, True, True, True]
    exits = [e["reason"] for e in kinds(list(result.trace), "sandbox_exited")]
    assert exits[:3] == ["flood", "timeout", "crashed"], [e["error"] for e in executed]
    assert "64 MiB" in executed[1]["error"] and "(exec_timeout;" in executed[2]["error"]


async def no_bridge(request: BridgeRequest) -> BridgeAnswer:
    raise AssertionError("no bridge call expected")


class _FakeProcess:
    pid = 0
    returncode: int | None = None
    stderr = None
    killed = False

    def kill(self) -> None:
        self.killed = True

    async def wait(self) -> None:
        self.returncode = -9


async def test_5_garbage_on_the_pipe_is_a_crash_of_that_sandbox() -> None:
    to_child, from_host = os.pipe()
    from_child, to_host = os.pipe()
    process = _FakeProcess()
    context, context_peer = socket.socketpair()
    ends = HostEnds(
        send=trio.lowlevel.FdStream(from_host),
        receive=trio.lowlevel.FdStream(from_child),
        context=context,
    )
    box = Sandbox(process, ends, EventBus())
    os.write(to_host, b"\xff" * 64)  # not a frame
    with pytest.raises(SandboxCrashed, match="frame protocol"):
        await box.execute("print(1)", no_bridge, limit=5.0)
    assert process.killed and not box.alive
    await box.aclose()
    for fd in (to_child, to_host):
        os.close(fd)
    context_peer.close()
