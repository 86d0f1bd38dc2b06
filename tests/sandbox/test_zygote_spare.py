"""The zygote's spare: the first sandbox, forked and hardened before anyone asked for it.

It takes the limits the first ``spawn`` brings, serves like any forked sandbox, and is
reaped with the zygote's other children whether or not it was ever used.
"""

from __future__ import annotations

import os
import select

import trio

from rlm._events import EventBus
from rlm._sandbox.early import EarlyZygote
from rlm._sandbox.process import Sandbox, SandboxIdentity
from rlm._sandbox.spawn import ChildEnds
from rlm._sandbox.zygote import Zygote
from tests.sandbox.security_harness import echo_bridge

OWNER = SandboxIdentity("root", None, 0)


def stat_of(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` after the command name (state first), or None if ``pid`` is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(") ", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def limit_of(pid: int, name: str) -> str:
    with open(f"/proc/{pid}/limits") as limits:
        line = next(line for line in limits if line.startswith(name))
    return line[len(name):].split()[0]


async def test_the_first_sandbox_is_the_spare_with_the_limits_it_is_given() -> None:
    zygote = await Zygote.start()
    try:
        spare = zygote.spare
        assert spare is not None
        stat = stat_of(spare)
        assert stat is not None and int(stat[1]) == zygote.pid  # forked by the zygote
        ends = ChildEnds()
        child = await zygote.spawn(ends, memory_bytes=300 << 20, cpu_seconds=77)
        ends.close_child()
        assert child.pid == spare and zygote.spare is None
        box = Sandbox(child, ends.host(), EventBus())
        async with trio.open_nursery() as nursery:
            box.start_draining(nursery)
            await box.wait_hardened()
            await box.initialize(context="spare", context_fd=None, max_output_chars=100,
                                 owner=OWNER, requested_at=0.0)
            assert box.layers["rlimits"] == "active"
            assert limit_of(spare, "Max address space") == str(300 << 20)
            assert limit_of(spare, "Max cpu time") == "77"
            assert limit_of(spare, "Max open files") == "64"
            assert (await box.execute("print(context)", echo_bridge, limit=5)).output == "spare\n"
            second = ChildEnds()
            forked = await zygote.spawn(second, memory_bytes=300 << 20, cpu_seconds=77)
            second.close_child()
            assert forked.pid != spare  # only the first spawn takes the spare
            other = Sandbox(forked, second.host(), EventBus())
            other.start_draining(nursery)
            await other.wait_hardened()
            await other.aclose()
            await box.aclose()
    finally:
        await zygote.aclose()
    assert stat_of(spare) is None


async def test_a_spare_nobody_asked_for_is_reaped_by_the_zygote() -> None:
    zygote = await Zygote.start()
    spare = zygote.spare
    assert spare is not None
    await zygote.aclose()  # the zygote kills and reaps it, then exits
    assert stat_of(spare) is None and stat_of(zygote.pid) is None


def test_closing_an_early_zygote_no_run_took_kills_its_spare_too() -> None:
    early = EarlyZygote.begin()
    zygote = early.pid
    assert zygote is not None and early.wait_ready()  # it forks its spare before answering
    spares = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
              if (stat := stat_of(pid)) is not None and int(stat[1]) == zygote]
    assert len(spares) == 1
    exited = os.pidfd_open(spares[0])  # readable once it has exited
    try:
        early.close()  # kills the zygote's process group: the spare is in it until handed out
        assert stat_of(zygote) is None
        assert select.select([exited], [], [], 10)[0] == [exited]  # killed with it (init reaps)
    finally:
        os.close(exited)
