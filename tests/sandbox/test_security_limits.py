"""Security suite, limits: CPU, memory, output, recursion, and no process left behind.

A sandbox that loops, allocates, floods or crashes costs its call an error,
never the host; and on every exit path of a run (answer, exec timeout,
cancellation of the host task) no sandbox or zygote process survives.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
import trio

from rlm import RLM
from rlm._events import EventBus
from rlm._sandbox.launcher import SandboxLauncher
from rlm.errors import ExecutionTimeout, SandboxCrashed
from rlm.testing.provider import FunctionProvider
from tests.helpers import pid_alive, repl
from tests.sandbox.security_harness import (
    CANARY,
    OWNER,
    assert_no_canary,
    echo_bridge,
    open_sandbox,
    sandbox_descendants,
)

SLOW_CODE = [
    "while True:\n    pass",
    "import re\nre.match('(a+)+$', 'a' * 64 + 'b')",  # catastrophic backtracking in C
    "x = 10 ** (10 ** 8)\ny = str(x)",  # one long, uninterruptible C computation
    "def f():\n    while True:\n        try:\n            f()\n        except BaseException:\n"
    "            pass\nf()",  # swallows every exception, including the guard's
]


@pytest.mark.parametrize("code", SLOW_CODE)
async def test_runaway_code_is_killed_at_the_exec_timeout(code: str) -> None:
    async with open_sandbox() as box:
        pid = box.box.pid
        with pytest.raises(ExecutionTimeout):
            await box.run(code, limit=0.5)
        assert not box.box.alive
    assert not pid_alive(pid)


@pytest.mark.parametrize("code", [
    "x = 'a' * (10 ** 10)",
    "x = [0] * (10 ** 10)",
    "x = bytearray(10 ** 10)",
    "x = []\nwhile True:\n    x.append(' ' * (10 ** 7))",
    "x = 'ab' * (10 ** 8)\ny = x * 4",
])
async def test_memory_bombs_end_in_memory_error_and_the_sandbox_goes_on(code: str) -> None:
    async with open_sandbox(memory_bytes=256 << 20) as box:
        result = await box.run(code, limit=20)
        assert not result.ok and result.error is not None and "MemoryError" in result.error
        await box.ok("x = None")
        assert await box.ok("print('alive')") == "alive\n"


async def test_output_floods_are_capped_and_counted() -> None:
    async with open_sandbox(max_output_chars=100) as box:
        result = await box.run("for i in range(2000):\n    print('x' * 1000)")
        assert result.ok and len(result.output) == 100
        assert result.output_chars == 2000 * 1001
        result = await box.run("print('y' * 50_000_000)")
        assert result.ok and len(result.output) == 100


async def test_a_final_answer_larger_than_a_frame_is_an_error_not_a_crash() -> None:
    async with open_sandbox() as box:
        result = await box.run("FINAL('z' * 40_000_000)")
        assert not result.ok and result.error is not None and "too large" in result.error
        assert await box.ok("print(3)") == "3\n"


async def test_bridge_floods_past_the_per_execution_byte_cap_kill_the_sandbox() -> None:
    async with open_sandbox() as box:
        with pytest.raises(SandboxCrashed, match="64 MiB"):
            await box.run("for i in range(12):\n    llm_query('p' * 8_000_000)", limit=30)
        assert not box.box.alive


@pytest.mark.parametrize("code", [
    "def f(n):\n    return f(n + 1)\nf(0)",
    "x = eval",  # fine; then deep nesting in the compiler:
    "y = " + "(" * 5000 + "1" + ")" * 5000,
    "l = []\nfor i in range(100000):\n    l = [l]\nprint(str(l)[:10])",
])
async def test_deep_recursion_is_an_error_and_the_worker_survives(code: str) -> None:
    async with open_sandbox() as box:
        await box.run(code)
        assert await box.ok("print('after')") == "after\n"


async def test_a_sandbox_can_only_signal_itself() -> None:
    async with open_sandbox() as box:
        await box.fails("import os\nos.kill(1, 9)", "not allowed")
        await box.fails("import signal", "not allowed")
        assert box.box.alive


async def test_garbage_on_the_frame_pipe_costs_a_crash_not_the_host() -> None:
    async with open_sandbox() as box:
        # The sandbox cannot write to its frame pipe itself; play the compromised
        # child by writing garbage into the host's receive pipe through /proc.
        fd = os.open(f"/proc/{box.box.pid}/fd/4", os.O_WRONLY)
        try:
            os.write(fd, b"\xff\xff\xff\xffgarbage")
        finally:
            os.close(fd)
        with pytest.raises(SandboxCrashed):
            await box.run("print(1)")
        assert not box.box.alive


# --- nothing left behind -------------------------------------------------------------------


def _run(*root_replies: str, **settings: Any) -> RLM:
    provider = FunctionProvider.scripted(list(root_replies))
    return RLM(providers={"root": provider, "sub": provider}, **settings)


async def test_no_process_left_after_a_run_that_answers() -> None:
    os.environ["RLM_API_KEY"] = CANARY
    try:
        model = _run(repl("print(llm_query('q'))"), repl("import os"), "FINAL(done)")
        result = await model.acompletion("q", "ctx")
    finally:
        os.environ.pop("RLM_API_KEY", None)
    assert result.answer == "done"
    started = [e for e in result.trace if e["event"] == "sandbox_started"]
    assert started and "seccomp" in started[0]["isolation"]
    assert_no_canary(*(e.get("output") for e in result.trace))
    assert sandbox_descendants() == []


async def test_no_process_left_after_an_exec_timeout() -> None:
    model = _run(repl("while True:\n    pass"), "FINAL(gave up)", exec_timeout=0.5)
    result = await model.acompletion("q", "ctx")
    assert result.answer == "gave up"
    assert sandbox_descendants() == []


async def test_no_process_left_when_the_host_task_is_cancelled() -> None:
    model = _run(repl("while True:\n    pass"), exec_timeout=60)
    with trio.move_on_after(1.5):
        await model.acompletion("q", "ctx")
    assert sandbox_descendants() == []


async def test_no_process_left_when_cancelled_while_the_pool_fills() -> None:
    for delay in (0.0, 0.01, 0.05, 0.2):
        launcher = SandboxLauncher(events=_bus(), max_output_chars=10, pool_size=3)
        with trio.move_on_after(delay):
            async with launcher.serving():
                await trio.sleep_forever()
        assert sandbox_descendants() == []


async def test_a_dead_zygote_takes_its_sandboxes_and_runs_fall_back_to_direct_spawn() -> None:
    async with open_sandbox(pool_size=1) as box:
        launcher = box.launcher
        zygote = launcher.zygote
        assert zygote is not None
        await launcher.wait_pool_full()
        os.kill(zygote.pid, signal.SIGKILL)
        with trio.fail_after(5):
            while pid_alive(box.box.pid):  # noqa: ASYNC110 - another process's death
                await trio.sleep(0.02)  # the parent-death signal arrives
        assert not pid_alive(box.box.pid)
        async with trio.open_nursery() as nursery:
            fresh = await launcher.open(nursery, context="again", owner=OWNER)
            try:
                result = await fresh.execute("print(context)", echo_bridge, limit=5)
                assert result.output == "again\n"
            finally:
                await fresh.aclose()


def _bus() -> EventBus:
    return EventBus()
