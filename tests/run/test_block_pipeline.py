"""Pipelined execution of a streaming reply's blocks, in virtual time with a fake sandbox."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from rlm._run.pipeline import BlockPipeline
from rlm._sandbox.launcher import ExecResult
from rlm.errors import SandboxCrashed


class FakeSandbox:
    """Runs a block by sleeping 1 s; ``FINAL`` in the code ends the step, ``crash`` raises."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int, str, float]] = []

    async def run(self, index: int, code: str) -> tuple[ExecResult, bool]:
        self.log.append(("start", index, code, trio.current_time()))
        if "crash" in code:
            raise SandboxCrashed("gave up")
        await trio.sleep(1.0)
        self.log.append(("end", index, code, trio.current_time()))
        final = "42" if "FINAL" in code else None
        return ExecResult(True, "", 0, None, final, 1.0), "lose" in code

    def started(self) -> list[str]:
        return [code for what, _, code, _ in self.log if what == "start"]


def fence(code: str) -> str:
    return f"```repl\n{code}\n```\n"


async def stream(pipeline: BlockPipeline, pieces: list[str], attempt: int = 1) -> None:
    for piece in pieces:
        await trio.sleep(0.5)
        await pipeline.on_text(piece, attempt)


async def test_blocks_start_when_they_close_and_run_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sandbox = FakeSandbox()
    async with trio.open_nursery() as nursery:
        pipeline = BlockPipeline(sandbox.run)
        pipeline.start(nursery)
        # t=0.5 block a closes; t=1.0 block b closes while a runs; then 3 s of prose.
        await stream(pipeline, [fence("a"), fence("b"), "more ", "prose ", "to ", "come", "."])
        reply_ended = trio.current_time()
        ran = await pipeline.finish()
    assert [r.code for r in ran] == ["a\n", "b\n"]
    starts = {code: at for what, _, code, at in sandbox.log if what == "start"}
    ends = {code: at for what, _, code, at in sandbox.log if what == "end"}
    assert starts["a\n"] == 0.5 and starts["b\n"] == ends["a\n"] == 1.5
    assert ends["b\n"] == 2.5 < reply_ended == 3.5


async def test_no_block_runs_after_a_final_or_a_lost_sandbox(
    autojump_clock: trio.testing.MockClock,
) -> None:
    for stopper in ("FINAL(1)", "lose()"):
        sandbox = FakeSandbox()
        async with trio.open_nursery() as nursery:
            pipeline = BlockPipeline(sandbox.run)
            pipeline.start(nursery)
            await stream(pipeline, [fence("a"), fence(stopper), fence("c")])
            ran = await pipeline.finish()
        assert [r.code for r in ran] == ["a\n", f"{stopper}\n"]
        assert sandbox.started() == ["a\n", f"{stopper}\n"]


async def test_a_retried_stream_does_not_rerun_the_blocks_it_repeats(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sandbox = FakeSandbox()
    async with trio.open_nursery() as nursery:
        pipeline = BlockPipeline(sandbox.run)
        pipeline.start(nursery)
        await stream(pipeline, [fence("a"), fence("b"), "cut"], attempt=1)
        await stream(pipeline, [fence("a"), fence("b2"), fence("c")], attempt=2)
        ran = await pipeline.finish()
    assert [r.code for r in ran] == ["a\n", "b2\n", "c\n"]
    # a ran once; attempt 1's b ran (it had started) but its result is void.
    assert sandbox.started() == ["a\n", "b\n", "b2\n", "c\n"]


async def test_an_error_is_raised_by_finish_and_cancel_stops_the_executor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sandbox = FakeSandbox()
    async with trio.open_nursery() as nursery:
        pipeline = BlockPipeline(sandbox.run)
        pipeline.start(nursery)
        await stream(pipeline, [fence("crash"), fence("b")])
        with pytest.raises(SandboxCrashed):
            await pipeline.finish()
    assert sandbox.started() == ["crash\n"]
    async with trio.open_nursery() as nursery:
        pipeline = BlockPipeline(sandbox.run)
        pipeline.start(nursery)
        await stream(pipeline, [fence("slow")])
        pipeline.cancel()  # the nursery exits at once: the running block was cancelled
    assert ("end", 1, "slow\n", 1.5) not in sandbox.log
