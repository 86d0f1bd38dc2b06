"""Auto-batching on the host, in virtual time: speculative calls through the bridge and gate.

The in-process line sandbox's ``loop N [K]`` speaks the speculation frames as a
real sandbox's loop would (offer ahead, collect in order, cancel the rest).  The
provider sleeps on trio's clock and records how many requests it held at once.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from rlm import RLM, RunResult
from rlm._sandbox.process import ExecResult
from rlm.testing.provider import FunctionProvider, is_root_request
from rlm.testing.sandboxes import LineLauncher
from rlm.view import parse_trace
from rlm.view.limit import ideal_makespan, work_from_trace
from rlm.view.model import build_model
from rlm_sandbox.protocol import CancelRequest, SpeculateRequest
from tests.helpers import repl

SUB_S = 0.3


def provider(code: str, stagger: float = 0.0) -> FunctionProvider:
    """Root steps at once; ``item i`` after SUB_S + i * stagger seconds."""
    def latency(request: Any) -> float:
        if is_root_request(request):
            return 0.0
        return SUB_S + stagger * int(request.messages[-1]["content"].split()[-1])

    return FunctionProvider.scripted(
        [repl(code), "FINAL(done)"],
        sub=lambda request: "answer to " + request.messages[-1]["content"],
        latency=latency,
    )


async def run(code: str, stagger: float = 0.0, **settings: Any
              ) -> tuple[RunResult, FunctionProvider]:
    fake = provider(code, stagger)
    settings.setdefault("max_concurrent", 17)  # 16 sub slots beside the root's permit
    model = RLM(providers=fake, sandboxes=lambda config, events: LineLauncher(), **settings)
    return await model.acompletion("q", "ctx"), fake


def events(result: RunResult, kind: str) -> list[dict[str, Any]]:
    return [e for e in result.trace if e["event"] == kind]


def output(result: RunResult) -> list[str]:
    return str(events(result, "code_executed")[0]["output"]).splitlines()


async def test_a_loop_of_16_runs_its_sub_queries_at_once(autojump_clock: trio.abc.Clock) -> None:
    result, fake = await run("loop 16")
    assert output(result) == [repr(f"answer to item {i}") for i in range(16)]
    assert fake.peak["sub"] == 16
    executed = events(result, "code_executed")[0]
    assert executed["duration_s"] < 2 * SUB_S  # virtual time: one round, not 16
    [loop] = events(result, "loop_batched")
    assert loop | {"t": 0, "duration_s": 0} == {
        "event": "loop_batched", "t": 0, "call_id": "root", "parent_id": None, "depth": 0,
        "loop": 1, "line": 1, "calls": 16, "used": 16, "cancelled": 0, "window": 16,
        "duration_s": 0,
    }
    started = events(result, "bridge_call_started")
    assert len(started) == 16 and all(e["speculative"] for e in started)
    finished = events(result, "bridge_call_finished")
    assert all(e["speculative"] and not e["cancelled"] for e in finished)
    assert result.usage.llm_calls == 16 + 2


async def test_no_auto_batch_sends_each_call_when_the_code_asks(
    autojump_clock: trio.abc.Clock,
) -> None:
    result, fake = await run("loop 16", auto_batch=False)
    assert output(result) == [repr(f"answer to item {i}") for i in range(16)]
    assert fake.peak["sub"] == 1
    assert events(result, "loop_batched") == []
    assert not any(e["speculative"] for e in events(result, "bridge_call_started"))


async def test_the_window_is_the_sub_lanes_capacity(autojump_clock: trio.abc.Clock) -> None:
    result, fake = await run("loop 16", max_concurrent=5, root_permits=1)
    [loop] = events(result, "loop_batched")
    assert loop["window"] == 4 and loop["calls"] == 4
    assert fake.peak["sub"] == 4


async def test_a_loop_that_breaks_cancels_what_the_provider_has_not_answered(
    autojump_clock: trio.abc.Clock,
) -> None:
    result, fake = await run("loop 16 3", stagger=0.1)  # item i answers after 0.3 + 0.1 i
    assert len(output(result)) == 3
    [loop] = events(result, "loop_batched")
    assert loop["calls"] == 16 and loop["used"] == 3
    assert loop["cancelled"] == 13  # at the break (0.5 s) items 3 to 15 had not answered
    cancelled = [e for e in events(result, "bridge_call_finished") if e["cancelled"]]
    assert len(cancelled) == 13 and all(e["answers"] is None for e in cancelled)
    sub = [r for r in fake.requests if not is_root_request(r)]
    assert len(sub) == 16  # speculative calls are requests like any other


async def test_speculation_never_passes_max_llm_calls(autojump_clock: trio.abc.Clock) -> None:
    result, fake = await run("loop 16", max_llm_calls=6)
    lines = output(result)
    # The root's first step is one call; five sub-queries fit, the sixth is refused.
    assert lines[:5] == [repr(f"answer to item {i}") for i in range(5)]
    assert lines[5].startswith("refused: ")
    [loop] = events(result, "loop_batched")
    assert loop["calls"] == 5
    assert result.usage.llm_calls <= 6
    assert len(fake.requests) <= 6


async def test_a_call_limit_of_a_task_bounds_speculation_too(
    autojump_clock: trio.abc.Clock,
) -> None:
    result, _ = await run("loop 8\nloop 8", max_llm_calls=12)
    assert result.usage.llm_calls <= 12
    refused = [line for line in output(result) if line.startswith("refused")]
    assert refused  # the second loop ran out, and its code saw the refusal


def test_rlm_view_shows_the_loop_and_each_call_it_sent_ahead() -> None:
    # The page's model replays the trace in a trio run of its own: built outside this one.
    result, _ = trio.run(run, "loop 16 3", 0.1, clock=trio.testing.MockClock(autojump_threshold=0))
    text = "".join(json.dumps(e) + "\n" for e in result.trace)
    model = build_model(parse_trace(text))
    [step] = [s for s in model["calls"][0]["steps"] if s["bridges"]]
    [loop] = step["loops"]
    assert {k: loop[k] for k in ("line", "calls", "used", "cancelled", "window")} == {
        "line": 1, "calls": 16, "used": 3, "cancelled": 13, "window": 16}
    bridges = step["bridges"]
    assert len(bridges) == 16 and all(b["speculative"] for b in bridges)
    used = sorted(b["prompts"][0] for b in bridges if not b["cancelled"])
    assert used == ["item 0", "item 1", "item 2"]
    assert all(b["answers"] is None for b in bridges if b["cancelled"])
    assert all(len(b["requests"]) == 1 for b in bridges)  # each one's own request


def test_the_physical_limit_counts_a_loop_sent_ahead_as_one_fan_out() -> None:
    result, _ = trio.run(run, "loop 16", clock=trio.testing.MockClock(autojump_threshold=0))
    work = work_from_trace(result.trace, lambda step, response: 0.0 if step else SUB_S)
    assert ideal_makespan(work, sub_permits=16) == pytest.approx(SUB_S)
    assert ideal_makespan(work, sub_permits=4) == pytest.approx(4 * SUB_S)


async def test_the_host_holds_a_sandbox_to_its_window(autojump_clock: trio.abc.Clock) -> None:
    """A sandbox that offers more than its window (it is not trusted) gets no more."""
    prompts = [f"item {i}" for i in range(40)]
    replies: list[object] = []

    class Greedy(LineLauncher):
        async def open(self, nursery: trio.Nursery, **kwargs: Any) -> Any:
            box = await super().open(nursery, **kwargs)

            async def execute(code: str, on_bridge: Any, **options: Any) -> Any:
                for first in (0, 20):  # 20 at once, then 20 more after cancelling 4
                    offer = SpeculateRequest(1, 1, 1, list(range(first + 1, first + 21)),
                                             prompts[first:first + 20], [None] * 20, None)
                    replies.append((await on_bridge(offer))["value"])
                    await on_bridge(CancelRequest(1, 1, list(range(1, 5)), False))
                return ExecResult(True, "", 0, None, "done", 0.0)

            box.execute = execute  # type: ignore[method-assign]
            return box

    fake = provider("ignored")
    model = RLM(providers=fake, sandboxes=lambda config, events: Greedy(), max_concurrent=17)
    await model.acompletion("q", "ctx")
    # 16 accepted; then 4 given up: 12 outstanding + 4 given up leave no room.
    assert replies == [{"accepted": 16}, {"accepted": 0}]
