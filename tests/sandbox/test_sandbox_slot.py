"""A call's sandbox slot with in-process sandboxes: what the model is told when its
sandbox is lost between two steps."""

from __future__ import annotations

from typing import Any

import trio

from rlm._sandbox.process import SandboxIdentity
from rlm._sandbox.slot import SandboxSlot
from rlm.testing.sandboxes import LineLauncher
from rlm_sandbox.protocol import BridgeRequest


async def _no_bridge(request: BridgeRequest) -> Any:
    raise AssertionError("no bridge call expected")


async def test_a_sandbox_lost_between_steps_runs_the_next_step_afresh_and_says_so() -> None:
    launcher = LineLauncher()
    slot = SandboxSlot(launcher, "ctx", SandboxIdentity("root", None, 0))
    async with trio.open_nursery() as nursery:
        slot.spawn(nursery)
        assert (await slot.execute("sleep 0", nursery, _no_bridge, 5.0)).output == ""
        launcher.opened[0].kill()  # killed from outside, or a session's query cut off
        after = await slot.execute("final done", nursery, _no_bridge, 5.0)
        assert len(launcher.opened) == 2 and after.final == "done"
        assert after.output.endswith("variables from earlier steps are gone]\n")
        assert after.output_chars == len(after.output)
        # Told once: the fresh sandbox's own later steps carry no note.
        assert (await slot.execute("sleep 0", nursery, _no_bridge, 5.0)).output == ""
        await slot.discard()


async def test_a_sandbox_that_ran_nothing_is_replaced_without_a_note() -> None:
    launcher = LineLauncher()
    slot = SandboxSlot(launcher, "ctx", SandboxIdentity("root", None, 0))
    async with trio.open_nursery() as nursery:
        slot.spawn(nursery)
        await slot.export_variables()  # waits until the sandbox is ready
        launcher.opened[0].kill()
        result = await slot.execute("sleep 0", nursery, _no_bridge, 5.0)
        assert result.output == "" and len(launcher.opened) == 2
        await slot.discard()


async def test_a_step_cut_off_in_a_fan_out_kills_its_sandbox(autojump_clock: Any) -> None:
    # A session's query interrupted while its code waits on llm_query_batched: the
    # cancellation comes out of the fan-out's nursery inside an exception group.  The
    # sandbox, still waiting for that reply, must not serve the next query (it took
    # the next frame for a protocol error and exited: `chat.save()` then failed).
    launcher = LineLauncher()
    slot = SandboxSlot(launcher, "ctx", SandboxIdentity("root", None, 0))

    async def fan_out(request: BridgeRequest) -> Any:
        async with trio.open_nursery() as items:
            items.start_soon(trio.sleep_forever)
        raise AssertionError("the fan-out was to be cancelled")

    async with trio.open_nursery() as nursery:
        slot.spawn(nursery)
        with trio.move_on_after(1.0):
            await slot.execute("batch 2", nursery, fan_out, 60.0)
        assert not launcher.opened[0].alive
        assert await slot.export_variables() == ("{}", [])  # its variables went with it
        after = await slot.execute("final done", nursery, _no_bridge, 5.0)
        assert len(launcher.opened) == 2 and after.final == "done"
        assert after.output.endswith("variables from earlier steps are gone]\n")
        await slot.discard()
