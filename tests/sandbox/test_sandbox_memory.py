"""Sandbox memory: a per-sandbox limit (``sandbox_memory``) and a ceiling on the sum over a
run's live sandboxes, derived from the machine's memory, that waits or fails clearly."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from rlm import RLM
from rlm._config import DEFAULTS
from rlm._events import EventBus
from rlm._sandbox.launcher import DEFAULT_MEMORY_BYTES, SandboxLauncher
from rlm._sandbox.memory import CEILING_SHARE, MemoryCeiling, machine_memory, memory_ceiling
from rlm._sandbox.process import SandboxIdentity
from rlm.errors import SandboxError
from rlm.providers.base import CompletionRequest
from rlm.testing.provider import FunctionProvider, assistant_turns
from tests.helpers import repl

GIB = 1 << 30
ROOT = SandboxIdentity("root", None, 0)


def child(name: str, parent: str = "root", depth: int = 1) -> SandboxIdentity:
    return SandboxIdentity(name, parent, depth)


def test_the_defaults_fit_analysis_work_and_the_machine() -> None:
    assert GIB <= DEFAULTS.sandbox_memory <= 2 * GIB
    assert DEFAULTS.sandbox_memory == DEFAULT_MEMORY_BYTES
    assert machine_memory() > 0
    assert memory_ceiling() == int(machine_memory() * CEILING_SHARE)


async def test_a_start_past_the_ceiling_waits_for_a_sibling_to_close(autojump_clock: Any) -> None:
    ceiling = MemoryCeiling(per_sandbox=GIB, ceiling=3 * GIB)
    await ceiling.acquire(ROOT)
    await ceiling.acquire(child("a"))
    await ceiling.acquire(child("b"))  # three fit
    got: list[str] = []

    async def start(owner: SandboxIdentity) -> None:
        await ceiling.acquire(owner)
        got.append(owner.call_id)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(start, child("c"))
        await trio.sleep(1)
        nursery.start_soon(start, child("d"))
        await trio.sleep(10)
        assert got == [] and ceiling.reserved == 3 * GIB
        ceiling.release(child("a"))
        await trio.sleep(1)
        assert got == ["c"]  # first come, first served
        ceiling.release(child("b"))
    assert got == ["c", "d"] and ceiling.reserved == 3 * GIB


async def test_a_start_that_could_only_wait_forever_fails_clearly() -> None:
    ceiling = MemoryCeiling(per_sandbox=GIB, ceiling=2 * GIB)
    await ceiling.acquire(ROOT)
    await ceiling.acquire(child("a"))
    # Both holders are ancestors of the grandchild: neither can close before it runs.
    with pytest.raises(SandboxError, match=r"no memory for another sandbox.*sandbox_memory"):
        await ceiling.acquire(child("a.1", parent="a", depth=2))
    assert ceiling.reserved == 2 * GIB


async def test_a_cancelled_wait_reserves_nothing(autojump_clock: Any) -> None:
    ceiling = MemoryCeiling(per_sandbox=GIB, ceiling=2 * GIB)
    await ceiling.acquire(ROOT)
    await ceiling.acquire(child("a"))
    with trio.move_on_after(5):
        await ceiling.acquire(child("b"))
    ceiling.release(child("a"))
    assert ceiling.reserved == GIB
    await ceiling.acquire(child("c"))  # no one is waiting any more: at once


async def test_one_sandbox_always_fits_however_small_the_machine() -> None:
    ceiling = MemoryCeiling(per_sandbox=2 * GIB, ceiling=GIB)
    await ceiling.acquire(ROOT)
    assert ceiling.reserved == 2 * GIB


async def test_sandbox_memory_is_each_sandboxs_limit() -> None:
    provider = FunctionProvider.scripted(
        [repl("try:\n    x = bytearray(700 * 2 ** 20)\nexcept MemoryError:\n    print('refused')"),
         "FINAL(done)"]
    )
    model = RLM(providers={"root": provider, "sub": provider}, sandbox_memory=512 << 20)
    result = await model.acompletion("q", "ctx")
    executed = next(e for e in result.trace if e["event"] == "code_executed")
    assert executed["output"] == "refused\n"


async def test_a_child_call_past_the_ceiling_fails_with_a_message_in_its_slot() -> None:
    def root(request: CompletionRequest) -> str:
        if assistant_turns(request) == 0:
            return repl("print(llm_query('look'))")
        return "FINAL(done)"

    provider = FunctionProvider.scripted(root)

    def launcher(config: Any, events: EventBus) -> SandboxLauncher:
        # Room for one sandbox: the root's holds it while its code waits for the child.
        return SandboxLauncher(events=events, max_output_chars=config.max_output_chars,
                               memory_bytes=config.sandbox_memory, ceiling=config.sandbox_memory)

    model = RLM(providers={"root": provider, "sub": provider}, max_depth=2, sandboxes=launcher)
    with trio.fail_after(60):
        result = await model.acompletion("q", "ctx")
    assert result.answer == "done"
    output = next(e for e in result.trace if e["event"] == "code_executed" and e["depth"] == 0)
    assert "no memory for another sandbox" in output["output"]
