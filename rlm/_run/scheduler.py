"""The scheduler: call work as commands, partitioned by call id.

Each live call owns one partition: an unbounded queue of commands and one task
that runs them in order, so the steps of a call never interleave.  Partitions
run concurrently, so a slow root step never delays a child's code execution.
Every partition task lives in the run's nursery; a partition ends after its
call's ``finish`` or ``fail`` command, and its ``aclose`` runs on every exit
path (that is where a call's sandbox is killed).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import trio

from rlm.errors import RLMError

__all__ = ["Command", "CommandKind", "Partition", "Scheduler"]

CommandKind = Literal["start", "generate", "execute", "code_executed", "finish", "fail"]
_TERMINAL: frozenset[str] = frozenset({"finish", "fail"})


@dataclass(frozen=True)
class Command:
    """One unit of scheduler work for the call ``call_id``."""

    kind: CommandKind
    call_id: str
    payload: Any = None


class Partition(Protocol):
    """What owns a partition: it handles commands and cleans up after itself."""

    async def handle(self, command: Command, nursery: trio.Nursery) -> list[Command]:
        """Run one command; return the commands it leads to (in order)."""
        ...

    async def aclose(self) -> None:
        """Release everything the partition holds; called once, on every exit path."""
        ...


class Scheduler:
    """Runs each call's commands in order and different calls concurrently.

    ``abort`` is called with any RLMError a handler lets escape: such errors end
    the whole run (credentials refused, out of credit, a hard limit).
    """

    def __init__(self, nursery: trio.Nursery, abort: Callable[[RLMError], None]) -> None:
        self._nursery = nursery
        self._abort = abort
        self._queues: dict[str, trio.MemorySendChannel[Command]] = {}
        self.commands_run = 0

    @property
    def live_partitions(self) -> int:
        return len(self._queues)

    def open(self, call_id: str, owner: Partition) -> None:
        """Create the partition for ``call_id`` and start its task."""
        if call_id in self._queues:
            raise ValueError(f"partition {call_id!r} already exists")
        send, receive = trio.open_memory_channel[Command](math.inf)
        self._queues[call_id] = send
        self._nursery.start_soon(self._run_partition, call_id, owner, receive)

    def submit(self, command: Command) -> None:
        """Queue ``command`` on its call's partition.  Never blocks."""
        queue = self._queues.get(command.call_id)
        if queue is None:
            raise ValueError(f"no live partition for call {command.call_id!r}")
        queue.send_nowait(command)

    async def _run_partition(
        self, call_id: str, owner: Partition, receive: trio.MemoryReceiveChannel[Command]
    ) -> None:
        try:
            async with trio.open_nursery() as call_nursery:
                try:
                    async for command in receive:
                        self.commands_run += 1
                        try:
                            follow_ups = await owner.handle(command, call_nursery)
                        except RLMError as exc:
                            self._abort(exc)
                            break
                        for follow_up in follow_ups:
                            self.submit(follow_up)
                        if command.kind in _TERMINAL:
                            break
                finally:
                    await owner.aclose()
                    call_nursery.cancel_scope.cancel()
        finally:
            self._queues.pop(call_id, None)
            receive.close()
