"""The end of a run with child calls: every sandbox the run made (its calls', the warm
pool's) and the zygote are gone when the run returns, however it ends.

When the root call ends, the launcher kills every sandbox at once and lets the zygote
go (``SandboxLauncher.finish``): the zygote reaps them all and exits while the run
finishes its own work, and the run returns only once it has.  Real processes: nothing
here is faked.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import trio

from rlm import RLM
from rlm._events import EventBus, SandboxExited
from rlm._sandbox.launcher import SandboxLauncher
from rlm._sandbox.spawn import ChildEnds
from rlm.errors import AuthenticationError, ProviderError, SandboxCrashed
from rlm.providers.base import CompletionRequest
from rlm.testing.provider import FunctionProvider, assistant_turns
from tests.helpers import repl
from tests.sandbox.security_harness import OWNER, sandbox_descendants

ROOT = [repl("print(llm_query_batched(['a', 'b', 'c']))"), "FINAL(done)"]
CHILD = [repl("x = 1\nprint(llm_query('q'))"), "FINAL(child)"]


def _tree(root: list[str], child: list[str], **settings: Any) -> RLM:
    def reply(request: CompletionRequest) -> str:
        steps = root if request.call_id == "root" else child
        return steps[min(assistant_turns(request), len(steps) - 1)]

    provider = FunctionProvider.scripted(reply, fail=settings.pop("fail", lambda r: None))
    return RLM(providers={"root": provider, "sub": provider}, max_depth=2, **settings)


def _exists(pid: int) -> bool:
    """Whether ``pid`` is any process at all, a zombie included (an unreaped one is)."""
    return os.path.exists(f"/proc/{pid}")


def _started(trace: Any) -> list[int]:
    return [e["pid"] for e in trace if e["event"] == "sandbox_started"]


async def test_a_run_with_child_calls_leaves_no_process_not_even_a_zombie() -> None:
    result = await _tree(ROOT, CHILD).acompletion("q", "ctx")
    assert result.answer == "done"
    pids = _started(result.trace)
    assert len(pids) == 4  # the root's and three children's
    assert not any(_exists(pid) for pid in pids)
    assert sandbox_descendants() == []  # the pool's and the zygote too
    exited = sorted(e["pid"] for e in result.trace if e["event"] == "sandbox_exited")
    assert exited == sorted(pids)
    finished = result.trace[-1]
    assert finished["event"] == "run_finished"
    # The duration ends with the root's answer; the reaping above came after it, apart.
    root_done = next(e["t"] for e in result.trace
                     if e["event"] == "call_finished" and e["call_id"] == "root")
    assert root_done <= result.duration_s == finished["duration_s"] < finished["t"]
    assert finished["teardown_s"] > 0
    assert finished["duration_s"] + finished["teardown_s"] <= finished["t"]


async def test_a_run_ended_by_an_error_during_its_children_leaves_no_process() -> None:
    def fail(request: CompletionRequest) -> ProviderError | None:
        # A child's second step: its siblings may still be running code.
        second = request.call_id == "root.2" and assistant_turns(request) == 1
        return AuthenticationError("HTTP 401", status=401) if second else None

    with pytest.raises(AuthenticationError) as caught:
        await _tree(ROOT, CHILD, fail=fail).acompletion("q", "ctx")
    result = caught.value.result
    assert result is not None and result.status == "error"
    assert not any(_exists(pid) for pid in _started(result.trace))
    assert sandbox_descendants() == []


async def test_a_run_cancelled_while_its_children_run_code_leaves_no_process() -> None:
    busy = [repl("while True:\n    pass")]
    with trio.move_on_after(2.0) as scope:
        await _tree(ROOT, busy, exec_timeout=60).acompletion("q", "ctx")
    assert scope.cancelled_caught
    assert sandbox_descendants() == []


async def test_finish_during_a_fork_in_flight_ends_everything_cleanly() -> None:
    # finish() may come while the pool forks (its exchange with the zygote in flight):
    # the exchange ends first, no error escapes, and nothing is left.
    for delay in (0.0, 0.002, 0.01, 0.05):
        bus = EventBus()
        launcher = SandboxLauncher(events=bus, max_output_chars=100, pool_size=3)
        async with trio.open_nursery() as nursery, launcher.serving():
            box = await launcher.open(nursery, context="root", owner=OWNER)
            await trio.sleep(delay)
            zygote = launcher.zygote
            assert zygote is not None
            launcher.finish()
            assert not box.alive and not zygote.alive
            ends = ChildEnds()
            try:
                with pytest.raises(SandboxCrashed):  # nothing is forked after finish()
                    await zygote.spawn(ends, memory_bytes=1 << 30, cpu_seconds=10)
            finally:
                ends.close_all()
            await box.aclose()  # a call's reaping does not wait: the zygote's exit does
        assert not _exists(box.pid) and not _exists(zygote.pid)
        assert sandbox_descendants() == []
        exited = [e for e in bus.events if isinstance(e, SandboxExited)]
        assert [(e.pid, e.reason) for e in exited] == [(box.pid, "closed")]
