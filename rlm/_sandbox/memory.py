"""The memory ceiling: the sum of the sandboxes' memory limits stays within the machine's.

Each sandbox may use up to ``--sandbox-memory`` of address space (RLIMIT_AS).
One run's live sandboxes (the root's and, at ``--max-depth`` 2 or more, each
child call's) together may hold at most the *ceiling*: half of the machine's
memory (its cgroup's limit when that is lower), so a run whose every sandbox
fills its limit still leaves the host, and the rest of the machine, room.

A sandbox start that would pass the ceiling waits until another of the run's
sandboxes is closed.  Waiting can deadlock: a parent call's sandbox is held
while its code waits for the child calls it started.  So when every sandbox
held is an ancestor of a call waiting for one (none of them can finish
first), the start that would wait fails instead, with a message that says
what to lower.  One sandbox always fits, however small the machine.
Warm-pool sandboxes are not counted: they run no code until a call takes
one, and that is when memory is reserved.
"""

from __future__ import annotations

import os
from pathlib import Path

import trio

from rlm._sandbox.process import SandboxIdentity
from rlm._sizes import format_size
from rlm._spelling import setting
from rlm.errors import SandboxError

__all__ = ["MemoryCeiling", "machine_memory", "memory_ceiling"]

#: The share of the machine's memory all of one run's sandboxes may hold together.
CEILING_SHARE = 0.5
_CGROUP_LIMIT = Path("/sys/fs/cgroup/memory.max")


def machine_memory() -> int:
    """Physical memory in bytes, or the cgroup's memory limit when that is lower."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        limit = _CGROUP_LIMIT.read_text().strip()
    except OSError:
        return total
    return min(total, int(limit)) if limit.isdigit() else total


def memory_ceiling() -> int:
    """The default ceiling on the sum of one run's sandbox memory limits."""
    return int(machine_memory() * CEILING_SHARE)


class MemoryCeiling:
    """Reservations of ``per_sandbox`` bytes each, at most ``ceiling`` in all."""

    def __init__(self, *, per_sandbox: int, ceiling: int) -> None:
        self.per_sandbox = per_sandbox
        self.ceiling = max(ceiling, per_sandbox)  # one sandbox always fits, on a small machine too
        self._holders: dict[str, int] = {}  # call_id -> reservations (a session may re-open)
        self._parents: dict[str, str | None] = {}
        self._waiters: list[tuple[SandboxIdentity, trio.Event]] = []

    @property
    def reserved(self) -> int:
        """Bytes reserved by live sandboxes."""
        return sum(self._holders.values()) * self.per_sandbox

    async def acquire(self, owner: SandboxIdentity) -> None:
        """Reserve one sandbox's memory for ``owner``: at once, after a wait, or SandboxError.

        Cancellation while waiting leaves nothing reserved.
        """
        self._parents[owner.call_id] = owner.parent_id
        if not self._waiters and self._fits():
            self._take(owner)
            return
        if self._all_holders_wait_for(owner):
            raise SandboxError(self._full())
        turn = trio.Event()
        entry = (owner, turn)
        self._waiters.append(entry)
        try:
            await turn.wait()
        except BaseException:
            if entry in self._waiters:
                self._waiters.remove(entry)
            else:  # woken and cancelled at once: the reservation made for us goes back
                self.release(owner)
            raise

    def release(self, owner: SandboxIdentity) -> None:
        """Give back one reservation of ``owner``'s; the longest waiter gets it if it fits."""
        count = self._holders.get(owner.call_id, 0)
        if count <= 1:
            self._holders.pop(owner.call_id, None)
        else:
            self._holders[owner.call_id] = count - 1
        while self._waiters and self._fits():
            waiter, turn = self._waiters.pop(0)
            self._take(waiter)
            turn.set()

    def _fits(self) -> bool:
        return self.reserved + self.per_sandbox <= self.ceiling

    def _take(self, owner: SandboxIdentity) -> None:
        self._holders[owner.call_id] = self._holders.get(owner.call_id, 0) + 1

    def _all_holders_wait_for(self, owner: SandboxIdentity) -> bool:
        """Whether every holder is an ancestor of ``owner`` or of a waiting call: then none
        can close its sandbox before a waiter gets one, and waiting would never end."""
        blocked: set[str] = set()
        for waiter in [owner, *(w for w, _ in self._waiters)]:
            parent = self._parents.get(waiter.call_id)
            while parent is not None and parent not in blocked:
                blocked.add(parent)
                parent = self._parents.get(parent)
        return all(holder in blocked for holder in self._holders)

    def _full(self) -> str:
        count = len(self._holders)
        return (
            f"no memory for another sandbox: {count} sandboxes of "
            f"{format_size(self.per_sandbox)} hold the {format_size(self.ceiling)} ceiling "
            "(half this machine's memory) and each waits for child calls; lower "
            f"{setting('sandbox_memory')} or {setting('max_concurrent')}"
        )
