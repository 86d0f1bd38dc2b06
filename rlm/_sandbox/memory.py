"""The memory ceiling: what a run's sandboxes really use together stays within half the machine.

Each sandbox may use up to ``--sandbox-memory`` of address space (RLIMIT_AS:
its *cap*).  One run's live sandboxes (the root's and, at ``--max-depth`` 2 or
more, each child call's) together may use at most the *ceiling*: half of the
machine's memory (its cgroup's limit when that is lower), so the host, and
the rest of the machine, keep room.

A sandbox is admitted on what the run's sandboxes *use*, not on their caps
(which would hold 8 child calls of a 24 GiB machine to 4 at a time whatever
they use).  Use is measured where the kernel allows:

- a **cgroup v2** child of this process's own cgroup, holding every sandbox of
  the run, with ``memory.max`` = the ceiling: the kernel holds the sum, and
  admission reads ``memory.current`` (:class:`CgroupGauge`);
- elsewhere, the sum of each sandbox's proportional set size, read from
  ``/proc/PID/smaps_rollup`` (a context shared by memfd counts once), RSS
  when that file is missing (:class:`ProcGauge`).  The ceiling is then
  checked on admission, not enforced after: sandboxes that grow together may
  pass it, each within its own cap.

A sandbox admitted but not measured yet counts as :data:`START_ESTIMATE`.
While the caps of every sandbox fit the ceiling nothing is read at all.  A
start that does not fit waits, first come first served, until a sandbox
closes or use falls (checked every :data:`POLL_S`); ``on_wait`` is told
once per wait (the runtime puts a ``sandbox_memory_wait`` event in the trace).
Waiting can deadlock: a parent call's sandbox is held while its code waits
for the child calls it started.  So when every sandbox held is an ancestor of
a call waiting for one (none of them can finish first), the start that would
wait fails instead, with a message that says what to lower.  One sandbox
always fits, however small the machine.  Warm-pool sandboxes are not counted:
they run no code until a call takes one.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import trio

from rlm._sandbox.process import SandboxIdentity
from rlm._sizes import format_size
from rlm._spelling import setting
from rlm.errors import SandboxError

__all__ = [
    "CgroupGauge",
    "MemoryCeiling",
    "MemoryGauge",
    "MemoryWait",
    "ProcGauge",
    "machine_memory",
    "memory_ceiling",
    "open_gauge",
]

#: The share of the machine's memory all of one run's sandboxes may use together.
CEILING_SHARE = 0.5
#: What a sandbox not measured yet is taken to use (a fresh one uses less).
START_ESTIMATE = 64 << 20
#: How often a start that waits looks again at what the sandboxes use.
POLL_S = 0.25
_CGROUP_LIMIT = Path("/sys/fs/cgroup/memory.max")
_serial = itertools.count(1)


def machine_memory() -> int:
    """Physical memory in bytes, or the cgroup's memory limit when that is lower."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        limit = _CGROUP_LIMIT.read_text().strip()
    except OSError:
        return total
    return min(total, int(limit)) if limit.isdigit() else total


def memory_ceiling() -> int:
    """The default ceiling on what one run's sandboxes use together."""
    return int(machine_memory() * CEILING_SHARE)


class MemoryGauge(Protocol):
    """What a run's sandboxes use together, in bytes."""

    name: str  # how it measures: "cgroup" or "pss"

    def add(self, pid: int) -> None:
        """Count the sandbox process ``pid`` from now on."""
        ...

    def remove(self, pid: int) -> None:
        """Stop counting ``pid`` (its sandbox is closed)."""
        ...

    def used(self) -> int:
        ...

    def close(self) -> None:
        ...


def _kib_field(path: Path, name: bytes) -> int | None:
    """A ``Name:  123 kB`` line of a /proc file, in bytes; None when it cannot be read."""
    try:
        data = path.read_bytes()
    except OSError:  # gone (a sandbox just killed), or no such file on this kernel
        return None
    for line in data.splitlines():
        if line.startswith(name):
            return int(line.split()[1]) * 1024
    return None


class ProcGauge:
    """The sum of the sandboxes' proportional set sizes (RSS where Pss is not kept)."""

    name = "pss"

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self._proc = proc
        self._pids: set[int] = set()

    def add(self, pid: int) -> None:
        self._pids.add(pid)

    def remove(self, pid: int) -> None:
        self._pids.discard(pid)

    def used(self) -> int:
        total = 0
        for pid in self._pids:
            found = _kib_field(self._proc / str(pid) / "smaps_rollup", b"Pss:")
            if found is None:
                found = _kib_field(self._proc / str(pid) / "status", b"VmRSS:") or 0
            total += found
        return total

    def close(self) -> None:
        self._pids.clear()


class CgroupGauge:
    """One cgroup v2 for the run's sandboxes, its ``memory.max`` the ceiling.

    A sandbox the kernel refuses to move into it is measured by its Pss instead.
    """

    name = "cgroup"

    def __init__(self, path: Path, proc: Path = Path("/proc")) -> None:
        self.path = path
        self._outside = ProcGauge(proc)

    @classmethod
    def create(cls, ceiling: int, proc: Path = Path("/proc")) -> CgroupGauge | None:
        """The cgroup, made under this process's own; None where the kernel does not let us
        (cgroup v1 only, no memory controller delegated, no write access)."""
        own = _own_cgroup(proc)
        if own is None:
            return None
        path = own / f"rlm-sandboxes-{os.getpid()}-{next(_serial)}"
        try:
            path.mkdir()
        except OSError:
            return None
        gauge = cls(path, proc)
        try:
            (path / "memory.max").write_text(str(ceiling))  # missing: no memory controller
        except OSError:
            gauge.close()
            return None
        return gauge

    def add(self, pid: int) -> None:
        """Move ``pid`` into the run's cgroup (or measure it apart when the kernel refuses)."""
        try:
            (self.path / "cgroup.procs").write_text(str(pid))
        except OSError:
            self._outside.add(pid)

    def remove(self, pid: int) -> None:
        """A process leaves its cgroup when it exits; one measured apart is forgotten."""
        self._outside.remove(pid)

    def used(self) -> int:
        try:
            inside = int((self.path / "memory.current").read_text())
        except (OSError, ValueError):
            inside = 0
        return inside + self._outside.used()

    def close(self) -> None:
        # Empty once every sandbox is reaped; one still exiting keeps it (EBUSY), and an
        # empty cgroup left behind costs nothing.
        with contextlib.suppress(OSError):
            self.path.rmdir()


def _own_cgroup(proc: Path) -> Path | None:
    """The directory of this process's cgroup v2, if it has one and it is mounted.

    Its path in the hierarchy is the ``0::/path`` line of /proc/self/cgroup; the
    hierarchy is where /proc/self/mountinfo mounts a ``cgroup2`` file system.
    """
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
        mounts = (proc / "self" / "mountinfo").read_text().splitlines()
    except OSError:
        return None
    own = next((line[3:] for line in lines if line.startswith("0::")), None)
    for mount in mounts:
        fields, _, fs = mount.partition(" - ")
        parts = fields.split()
        if own is None or len(parts) < 5 or fs.split()[:1] != ["cgroup2"]:
            continue
        inside = Path(own).relative_to("/")  # own is relative to the mount's root:
        mounted = Path(parts[3]).relative_to("/")  # "/" unless mounted from a sub-tree
        if inside.is_relative_to(mounted):
            return Path(parts[4]) / inside.relative_to(mounted)
    return None


def open_gauge(ceiling: int) -> MemoryGauge:
    """A cgroup v2 where the kernel allows one, else Pss from /proc."""
    return CgroupGauge.create(ceiling) or ProcGauge()


@dataclass(frozen=True)
class MemoryWait:
    """Why a sandbox start waits: what the run's sandboxes use, of what ceiling."""

    owner: SandboxIdentity
    used: int
    ceiling: int
    sandboxes: int
    gauge: str


@dataclass
class _Holder:
    owner: SandboxIdentity
    pid: int | None = None  # known once its sandbox is up (attach)


class MemoryCeiling:
    """Admission of sandboxes on real use; see the module docstring."""

    def __init__(self, *, per_sandbox: int, ceiling: int, gauge: MemoryGauge | None = None,
                 on_wait: Callable[[MemoryWait], None] | None = None) -> None:
        self.per_sandbox = per_sandbox
        self.ceiling = ceiling
        self.gauge: MemoryGauge = gauge if gauge is not None else ProcGauge()
        self._on_wait = on_wait or (lambda wait: None)
        self._holders: list[_Holder] = []
        self._parents: dict[str, str | None] = {}
        self._waiters: list[tuple[SandboxIdentity, trio.Event]] = []

    @property
    def held(self) -> int:
        """Sandboxes admitted and not closed."""
        return len(self._holders)

    def used(self) -> int:
        """What the admitted sandboxes use, as admission counts it (bytes)."""
        unmeasured = sum(1 for h in self._holders if h.pid is None) * START_ESTIMATE
        return max(self.gauge.used() + unmeasured, len(self._holders) * START_ESTIMATE)

    async def acquire(self, owner: SandboxIdentity) -> None:
        """Admit one sandbox of ``owner``: at once, after a wait, or SandboxError.

        Cancellation while waiting leaves nothing admitted.
        """
        self._parents[owner.call_id] = owner.parent_id
        if not self._waiters and self._fits():
            self._holders.append(_Holder(owner))
            return
        if self._all_holders_wait_for(owner):
            raise SandboxError(self._full())
        turn = trio.Event()
        entry = (owner, turn)
        self._waiters.append(entry)
        self._on_wait(MemoryWait(owner, self.used(), self.ceiling, len(self._holders),
                                 self.gauge.name))
        try:
            while not turn.is_set():
                with trio.move_on_after(POLL_S):
                    await turn.wait()
                self._admit_waiters()  # use may have fallen without a sandbox closing
        except BaseException:
            if entry in self._waiters:
                self._waiters.remove(entry)
            else:  # admitted and cancelled at once: the admission goes back
                self.release(owner)
            raise

    def attach(self, owner: SandboxIdentity, pid: int) -> None:
        """``owner``'s admitted sandbox is up as process ``pid``: measure it from now on."""
        holder = next(h for h in self._of(owner) if h.pid is None)
        self.gauge.add(pid)
        holder.pid = pid

    def release(self, owner: SandboxIdentity, pid: int | None = None) -> None:
        """Give back one admission of ``owner`` (its sandbox ``pid``, when it was up)."""
        mine = self._of(owner)
        found = next((h for h in mine if h.pid == pid), mine[0] if mine else None)
        if found is not None:
            self._holders.remove(found)
            if found.pid is not None:
                self.gauge.remove(found.pid)
        self._admit_waiters()

    def close(self) -> None:
        self.gauge.close()

    def _of(self, owner: SandboxIdentity) -> list[_Holder]:
        """``owner``'s admissions (a session may hold more than one over its life)."""
        return [h for h in self._holders if h.owner.call_id == owner.call_id]

    def _admit_waiters(self) -> None:
        while self._waiters and self._fits():
            waiter, turn = self._waiters.pop(0)
            self._holders.append(_Holder(waiter))
            turn.set()

    def _fits(self) -> bool:
        if not self._holders:
            return True  # one always fits
        if (len(self._holders) + 1) * self.per_sandbox <= self.ceiling:
            return True  # even at their caps: nothing to measure
        return self.used() + START_ESTIMATE <= self.ceiling

    def _all_holders_wait_for(self, owner: SandboxIdentity) -> bool:
        """Whether every holder is an ancestor of ``owner`` or of a waiting call: then none
        can close its sandbox before a waiter gets one, and waiting would never end."""
        blocked: set[str] = set()
        for waiter in [owner, *(w for w, _ in self._waiters)]:
            parent = self._parents.get(waiter.call_id)
            while parent is not None and parent not in blocked:
                blocked.add(parent)
                parent = self._parents.get(parent)
        return all(h.owner.call_id in blocked for h in self._holders)

    def _full(self) -> str:
        return (
            f"no memory for another sandbox: the run's {len(self._holders)} sandboxes use "
            f"{format_size(self.used())} of the {format_size(self.ceiling)} ceiling (half this "
            f"machine's memory) and each waits for child calls; lower "
            f"{setting('max_concurrent')}, or keep less in the sandboxes' variables"
        )
