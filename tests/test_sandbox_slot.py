"""A call's sandbox slot with in-process sandboxes: what the model is told when its
sandbox is lost between two steps."""

from __future__ import annotations

from typing import Any

import trio

from rlm._sandbox.process import SandboxIdentity
from rlm._sandbox.slot import SandboxSlot
from rlm.testing.sandboxes import LineLauncher


async def _no_bridge(frame: dict[str, Any]) -> Any:
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
