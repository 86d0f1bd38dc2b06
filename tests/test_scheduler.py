"""Commands of one call run in order; different calls run concurrently."""

from __future__ import annotations

import trio

from rlm._run.scheduler import Command, Scheduler
from rlm.errors import RLMError


class Recorder:
    def __init__(self, name: str, delays: dict[str, float], log: list[tuple[str, str, float]]):
        self.name = name
        self.delays = delays
        self.log = log
        self.closed = False

    async def handle(self, command: Command, nursery: trio.Nursery) -> list[Command]:
        await trio.sleep(self.delays.get(str(command.payload), 0))
        self.log.append((self.name, str(command.payload), trio.current_time()))
        return []

    async def aclose(self) -> None:
        self.closed = True


async def test_one_partition_runs_its_commands_in_submission_order(
    autojump_clock: trio.abc.Clock,
) -> None:
    log: list[tuple[str, str, float]] = []
    delays = {"a": 3.0, "b": 0.0, "c": 1.0}
    owner = Recorder("x", delays, log)
    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery, abort=lambda exc: None)
        scheduler.open("x", owner)
        for payload in ("a", "b", "c"):
            scheduler.submit(Command("execute", "x", payload))
        scheduler.submit(Command("finish", "x", "end"))
    assert [p for _, p, _ in log] == ["a", "b", "c", "end"]
    assert [t for _, _, t in log] == [3.0, 3.0, 4.0, 4.0]
    assert owner.closed
    assert scheduler.live_partitions == 0


async def test_slow_call_does_not_delay_another_call(autojump_clock: trio.abc.Clock) -> None:
    log: list[tuple[str, str, float]] = []
    slow = Recorder("root", {"generate": 100.0}, log)
    fast = Recorder("child", {"execute": 0.5}, log)
    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery, abort=lambda exc: None)
        scheduler.open("root", slow)
        scheduler.open("child", fast)
        scheduler.submit(Command("generate", "root", "generate"))
        scheduler.submit(Command("execute", "child", "execute"))
        scheduler.submit(Command("finish", "child", "done"))
        scheduler.submit(Command("finish", "root", "done"))
    assert ("child", "execute", 0.5) in log
    assert ("child", "done", 0.5) in log
    assert ("root", "generate", 100.0) in log


async def test_an_error_that_escapes_a_handler_aborts_and_closes(
    autojump_clock: trio.abc.Clock,
) -> None:
    aborted: list[RLMError] = []

    class Failing(Recorder):
        async def handle(self, command: Command, nursery: trio.Nursery) -> list[Command]:
            raise RLMError("boom")

    owner = Failing("x", {}, [])
    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery, abort=aborted.append)
        scheduler.open("x", owner)
        scheduler.submit(Command("start", "x"))
    assert [str(e) for e in aborted] == ["boom"]
    assert owner.closed
