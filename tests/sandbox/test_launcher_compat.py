"""A launcher written against the ``Launcher`` protocol before ``finish()`` existed
(``serving``, ``open``, ``kill_all`` only) still runs: ``finish`` is optional."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from rlm import RLM
from rlm._config import RunConfig
from rlm._events import EventBus
from rlm._sandbox.process import SandboxIdentity
from rlm.testing.provider import FunctionProvider
from rlm.testing.sandboxes import LineSandbox
from tests.helpers import repl


class OlderLauncher:
    """The earlier interface, whole: no ``finish``."""

    def __init__(self) -> None:
        self.opened: list[LineSandbox] = []
        self.serving_ended = False

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[OlderLauncher]:
        try:
            yield self
        finally:
            self.kill_all()
            self.serving_ended = True

    async def open(
        self, nursery: trio.Nursery, *, context: str | list[str], owner: SandboxIdentity
    ) -> LineSandbox:
        await trio.lowlevel.checkpoint()
        self.opened.append(LineSandbox(owner))
        return self.opened[-1]

    def kill_all(self) -> None:
        for box in self.opened:
            box.kill()


async def test_a_launcher_without_finish_runs_and_its_sandboxes_end(
    autojump_clock: trio.abc.Clock,
) -> None:
    launcher = OlderLauncher()
    assert not hasattr(launcher, "finish")

    def sandboxes(config: RunConfig, events: EventBus) -> OlderLauncher:
        return launcher

    provider = FunctionProvider.scripted([repl("query\nfinal done")])
    model = RLM(providers={"root": provider, "sub": provider}, sandboxes=sandboxes)
    result = await model.acompletion("q", "ctx")
    assert (result.status, result.answer) == ("answered", "done")
    assert len(launcher.opened) == 1 and not launcher.opened[0].alive
    assert launcher.serving_ended
