"""A run's duration ends when its outcome is known; the teardown after it (sandboxes
killed and reaped, the zygote gone) is reported apart, and the run still returns only
once it is over.  Virtual time, with a launcher whose teardown takes TEARDOWN_S."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from rlm import RLM
from rlm._config import RunConfig
from rlm._events import EventBus
from rlm._sandbox.process import SandboxIdentity
from rlm.providers.base import CompletionRequest
from rlm.testing.provider import FunctionProvider
from rlm.testing.sandboxes import LineLauncher, LineSandbox
from tests.helpers import repl

STEP_S = 1.0
TEARDOWN_S = 0.25


class SlowTeardown(LineLauncher):
    """Line sandboxes whose launcher takes TEARDOWN_S to stop serving (as reaping does)."""

    def __init__(self) -> None:
        super().__init__()
        self.torn_down_at: float | None = None

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[LineLauncher]:
        try:
            yield self
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(TEARDOWN_S)
            self.kill_all()
            self.torn_down_at = trio.current_time()


def _model(root: list[str], launcher: SlowTeardown, **settings: object) -> RLM:
    provider = FunctionProvider.scripted(root, latency=lambda request: STEP_S)

    def sandboxes(config: RunConfig, events: EventBus) -> SlowTeardown:
        return launcher

    return RLM(providers={"root": provider, "sub": provider}, sandboxes=sandboxes,
               **settings)  # type: ignore[arg-type]


async def test_the_duration_ends_with_the_answer_and_the_teardown_is_reported_apart(
    autojump_clock: trio.abc.Clock,
) -> None:
    launcher = SlowTeardown()
    start = trio.current_time()
    result = await _model([repl("final done")], launcher).acompletion("q", "ctx")
    returned = trio.current_time()
    assert result.answer == "done"
    assert result.duration_s == pytest.approx(STEP_S)
    finished = result.trace[-1]
    assert finished["event"] == "run_finished"
    assert finished["duration_s"] == pytest.approx(STEP_S)
    assert finished["teardown_s"] == pytest.approx(TEARDOWN_S)
    assert result.teardown_s == pytest.approx(TEARDOWN_S)
    assert result.to_dict()["teardown_s"] == pytest.approx(TEARDOWN_S, abs=1e-3)
    # ... and yet the run returned, and recorded its end, only once the teardown was over.
    assert launcher.torn_down_at is not None and returned >= launcher.torn_down_at
    assert returned - start == pytest.approx(STEP_S + TEARDOWN_S)
    assert finished["t"] == pytest.approx(STEP_S + TEARDOWN_S)
    assert all(not box.alive for box in launcher.opened)


async def test_a_run_cut_off_by_its_timeout_counts_its_teardown(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Its root call never ended on its own: no outcome was known before the teardown.
    launcher = SlowTeardown()
    model = _model([repl("x = 1")] * 100, launcher, timeout=3.5, max_iterations=100)
    result = await model.acompletion("q", "ctx")
    assert result.status == "timeout"
    finished = result.trace[-1]
    assert finished["teardown_s"] == 0.0
    assert result.teardown_s == 0.0
    assert result.duration_s == pytest.approx(finished["t"])
    assert result.duration_s >= 3.5 + TEARDOWN_S


class SlowReapSandbox(LineSandbox):
    """A line sandbox whose reaping takes REAP_S."""

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.sleep(REAP_S)
        self.alive = False


class SlowReaps(SlowTeardown):
    """Also: reaping each sandbox a call closes itself (a child's) takes REAP_S."""

    async def open(
        self, nursery: trio.Nursery, *, context: str | list[str], owner: SandboxIdentity
    ) -> LineSandbox:
        await trio.lowlevel.checkpoint()
        self.opened.append(SlowReapSandbox(owner))
        return self.opened[-1]


REAP_S = 0.5


async def test_a_childs_reaping_after_the_roots_answer_is_teardown_too(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The child answers at 2 s and its sandbox is reaped in the root's nursery, which the
    # root call waits for on its way out: after the root's own answer, also at 2 s.
    def steps(request: CompletionRequest) -> str:
        return repl("query\nfinal done") if request.call_id == "root" else repl("final child")

    launcher = SlowReaps()
    provider = FunctionProvider.scripted(steps, latency=lambda request: STEP_S)

    def sandboxes(config: RunConfig, events: EventBus) -> SlowReaps:
        return launcher

    model = RLM(providers={"root": provider, "sub": provider}, sandboxes=sandboxes, max_depth=2)
    result = await model.acompletion("q", "ctx")
    assert result.answer == "done"
    finished = result.trace[-1]
    assert result.duration_s == pytest.approx(2 * STEP_S)
    assert finished["teardown_s"] == pytest.approx(REAP_S + TEARDOWN_S)
    assert finished["t"] == pytest.approx(2 * STEP_S + REAP_S + TEARDOWN_S)
    assert len(launcher.opened) == 2 and all(not box.alive for box in launcher.opened)
