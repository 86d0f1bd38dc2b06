"""What a fast root step must not wait for, in virtual time: its sandbox starts while the
step is generated, the step is not held back until the sandbox is ready, and a run's root
sandbox is reaped by the launcher, not by the call on its way out (docs/bench.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from rlm import RLM
from rlm._config import RunConfig
from rlm._events import EventBus
from rlm._sandbox.process import SandboxIdentity
from rlm.testing.provider import FunctionProvider
from rlm.testing.sandboxes import LineLauncher, LineSandbox
from tests.helpers import repl

STEP_S = 1.0  # the root's first step
SANDBOX_S = 0.3  # how long a sandbox takes to start


class SlowLauncher(LineLauncher):
    """Line sandboxes that take SANDBOX_S to start; records when each was asked for,
    which the call only killed, and which were still to reap when serving ended."""

    def __init__(self) -> None:
        super().__init__()
        self.asked_at: list[float] = []
        self.closed_by_call: list[LineSandbox] = []
        self.left_to_reap: list[LineSandbox] = []

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[LineLauncher]:
        try:
            yield self
        finally:
            self.left_to_reap = [box for box in self.opened if box not in self.closed_by_call]
            self.kill_all()

    async def open(
        self, nursery: trio.Nursery, *, context: str | list[str], owner: SandboxIdentity
    ) -> LineSandbox:
        self.asked_at.append(trio.current_time())
        await trio.sleep(SANDBOX_S)
        box = await super().open(nursery, context=context, owner=owner)
        closed = self.closed_by_call

        async def aclose() -> None:
            closed.append(box)
            box.alive = False

        box.aclose = aclose  # type: ignore[method-assign]
        return box


async def test_the_root_sandbox_starts_with_the_first_step_and_holds_nothing_back(
    autojump_clock: trio.abc.Clock,
) -> None:
    provider = FunctionProvider.scripted([repl("final done")], latency=lambda request: STEP_S)
    launcher = SlowLauncher()

    def sandboxes(config: RunConfig, events: EventBus) -> SlowLauncher:
        return launcher

    start = trio.current_time()
    model = RLM(providers={"root": provider, "sub": provider}, sandboxes=sandboxes)
    result = await model.acompletion("q", "ctx")
    assert result.answer == "done"
    # The root's sandbox was asked for before its first step returned (at once, in fact),
    # and the step's request went out at once, not after the sandbox was ready.
    assert launcher.asked_at == [start]
    assert provider.times[0] == start
    assert result.duration_s == STEP_S  # the sandbox's start is hidden behind the step
    # The call only killed its sandbox: the launcher reaped it as it stopped serving.
    assert launcher.closed_by_call == [] and launcher.left_to_reap == launcher.opened
