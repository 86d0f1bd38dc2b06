"""A call's task is its key partition: one call's steps in order, calls concurrent.

Each test runs real calls (their loop, the gate, the bridge) in virtual time,
with in-process sandboxes (``rlm.testing.sandboxes``) and a scripted provider.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import trio

from rlm._config import RunConfig
from rlm._events import EventBus
from rlm._run.bridge import Bridge
from rlm._run.call import Call, CallParts, SessionCarry
from rlm._sandbox.process import SandboxIdentity
from rlm._sandbox.slot import SandboxSlot
from rlm._traffic.budget import Budget, BudgetLimits
from rlm._traffic.gate import Gate
from rlm._traffic.limiter import TieredLimiter
from rlm.errors import AuthenticationError, ProviderError, ProviderStatusError, RLMError
from rlm.providers.base import CompletionRequest, Provider
from rlm.testing.provider import FunctionProvider
from rlm.testing.sandboxes import LineLauncher, LineSandbox
from tests.helpers import repl


class Run:
    """The parts a runtime would give its calls, built by hand."""

    def __init__(self, provider: Provider, **settings: Any) -> None:
        self.config = RunConfig(**settings).validate()
        self.events = EventBus()
        self.launcher = LineLauncher()
        self.aborted: list[RLMError] = []
        budget = Budget(limits=BudgetLimits(max_llm_calls=self.config.max_llm_calls))
        gate = Gate(
            limiter=TieredLimiter(8, 1),
            providers={"root": provider, "sub": provider},
            events=self.events,
            adaptive=False,
            ledger=budget,
        )
        bridge = Bridge(
            config=self.config,
            events=self.events,
            gate=gate,
            budget=budget,
            abort=self.aborted.append,
            deadline=lambda: float("inf"),
        )
        self.parts = CallParts(
            self.config, self.events, gate, self.launcher, bridge, self.aborted.append
        )

    def timeline(self, call_id: str) -> list[tuple[str, float]]:
        kinds = ("call_started", "step_completed", "code_executed", "call_finished")
        return [
            (e.kind, e.t) for e in self.events.events if e.call_id == call_id and e.kind in kinds
        ]


def latency_by_call(latencies: dict[str, float]) -> Callable[[CompletionRequest], float]:
    return lambda request: latencies.get(request.call_id, 0.0)


async def test_one_calls_steps_run_one_after_another(autojump_clock: trio.abc.Clock) -> None:
    steps = [repl("sleep 5"), repl("sleep 1"), "FINAL(done)"]
    run = Run(FunctionProvider.scripted(steps, latency=lambda r: 2))
    outcome = await Call.root(run.parts, "q", "ctx").run()
    assert outcome.status == "answered" and outcome.answer == "done"
    assert run.timeline("root") == [
        ("call_started", 0.0),
        ("step_completed", 2.0),
        ("code_executed", 7.0),  # the step's code starts when the step ends
        ("step_completed", 9.0),  # the next step starts when the code ends
        ("code_executed", 10.0),
        ("step_completed", 12.0),
        ("call_finished", 12.0),
    ]
    assert [[c.strip() for c in box.executed] for box in run.launcher.opened] == [
        ["sleep 5", "sleep 1"]
    ]


async def test_a_slow_call_never_delays_another(autojump_clock: trio.abc.Clock) -> None:
    provider = FunctionProvider.scripted(
        [repl("sleep 1"), "FINAL(x)"], latency=latency_by_call({"root": 100.0, "root.1": 1.0})
    )
    run = Run(provider)
    slow = Call.root(run.parts, "slow", "ctx")
    fast = slow.child("fast", "ctx")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(slow.run)
        nursery.start_soon(fast.run)
    assert run.timeline("root.1")[-1] == ("call_finished", 3.0)
    assert run.timeline("root")[-1] == ("call_finished", 201.0)


async def test_calls_asked_for_by_a_batch_run_concurrently(autojump_clock: trio.abc.Clock) -> None:
    def reply(request: CompletionRequest) -> str:
        steps = [repl("batch 3"), "FINAL(root)"] if request.call_id == "root" else ["FINAL(c)"]
        turns = sum(1 for m in request.messages if m["role"] == "assistant")
        return steps[min(turns, len(steps) - 1)]

    run = Run(FunctionProvider.scripted(reply, latency=lambda r: 1.0), max_depth=2)
    outcome = await Call.root(run.parts, "q", "ctx").run()
    assert outcome.answer == "root"
    children = [f"root.{i}" for i in (1, 2, 3)]
    assert all(run.timeline(c) == [("call_started", 1.0), ("step_completed", 2.0),
                                   ("call_finished", 2.0)] for c in children)
    assert all(not box.alive for box in run.launcher.opened)


class SlowReapSandbox(LineSandbox):
    """Takes 5 s to reap, shielded, as a real sandbox's aclose is."""

    reaped = False

    async def aclose(self) -> None:
        self.alive = False
        with trio.CancelScope(shield=True):
            await trio.sleep(5)
        self.reaped = True


class SlowReapLauncher(LineLauncher):
    async def open(
        self, nursery: trio.Nursery, *, context: str | list[str], owner: SandboxIdentity
    ) -> LineSandbox:
        await trio.lowlevel.checkpoint()
        self.opened.append(SlowReapSandbox(owner))
        return self.opened[-1]


def _two_children_slow_to_reap() -> tuple[Run, SlowReapLauncher]:
    """A depth-2 run whose root asks two child calls (1 s steps), on sandboxes that take
    5 s to reap."""

    def reply(request: CompletionRequest) -> str:
        steps = [repl("batch 2"), "FINAL(root)"] if request.call_id == "root" else ["FINAL(c)"]
        turns = sum(1 for m in request.messages if m["role"] == "assistant")
        return steps[min(turns, len(steps) - 1)]

    run = Run(FunctionProvider.scripted(reply, latency=lambda r: 1.0), max_depth=2)
    launcher = SlowReapLauncher()
    run.parts = dataclasses.replace(run.parts, sandboxes=launcher)
    return run, launcher


async def test_a_childs_answer_goes_up_before_its_sandbox_is_reaped(
    autojump_clock: trio.abc.Clock,
) -> None:
    run, launcher = _two_children_slow_to_reap()
    outcome = await Call.root(run.parts, "q", "ctx").run()
    assert outcome.answer == "root"
    # The children answer at 2.0; their 5 s of reaping is not on the root's path.
    assert run.timeline("root")[:3] == [
        ("call_started", 0.0), ("step_completed", 1.0), ("code_executed", 2.0)]
    # ...and still every sandbox is reaped before the root's call returns.
    assert len(launcher.opened) == 3
    assert all(isinstance(box, SlowReapSandbox) and box.reaped for box in launcher.opened)


async def test_a_sessions_children_are_reaped_before_its_query_returns(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A session's root keeps its sandbox in the session's nursery; its children's sandboxes
    # are still reaped before the query returns, not left to the session.
    run, launcher = _two_children_slow_to_reap()
    async with trio.open_nursery() as session:
        slot = SandboxSlot(launcher, "ctx", SandboxIdentity("root", None, 0))
        carry = SessionCarry(slot=slot, nursery=session)
        outcome = await Call.root(run.parts, "q", "ctx", carry).run()
        children = [box for box in launcher.opened if box.owner.depth == 1]
        assert outcome.answer == "root" and len(children) == 2
        assert all(isinstance(box, SlowReapSandbox) and box.reaped for box in children)
        await slot.discard()


async def test_an_error_of_the_root_aborts_the_run_and_closes_its_sandbox(
    autojump_clock: trio.abc.Clock,
) -> None:
    def fail(request: CompletionRequest) -> ProviderError | None:
        second_step = any(m["role"] == "assistant" for m in request.messages)
        return AuthenticationError("HTTP 401", status=401) if second_step else None

    run = Run(FunctionProvider.scripted([repl("sleep 1"), "FINAL(x)"], fail=fail))
    outcome = await Call.root(run.parts, "q", "ctx").run()
    assert [type(e) for e in run.aborted] == [AuthenticationError]
    assert outcome.status == "stopped"
    assert [box.alive for box in run.launcher.opened] == [False]
    assert run.timeline("root")[-1][0] == "call_finished"


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ProviderStatusError("HTTP 400", status=400), "error"),
        (AuthenticationError("HTTP 401", status=401), "stopped"),  # ends the run
    ],
)
async def test_a_childs_error_is_its_outcome_unless_it_ends_the_run(
    autojump_clock: trio.abc.Clock, error: ProviderError, status: str
) -> None:
    run = Run(FunctionProvider.scripted(["FINAL(x)"], fail=lambda r: error))
    child = Call.root(run.parts, "q", "ctx").child("sub", "ctx")
    outcome = await child.run()
    assert outcome.status == status
    assert run.aborted == ([] if status == "error" else [error])


async def test_a_cancelled_call_closes_its_sandbox_and_concludes_stopped(
    autojump_clock: trio.abc.Clock,
) -> None:
    run = Run(FunctionProvider.scripted([repl("sleep 100"), "FINAL(x)"]))
    call = Call.root(run.parts, "q", "ctx")
    with trio.move_on_after(10):
        await call.run()
    assert call.outcome is not None and call.outcome.status == "stopped"
    assert [box.alive for box in run.launcher.opened] == [False]
