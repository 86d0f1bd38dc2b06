"""What the journal holds, as values: who claims a task, what it cost, its verdict and rows.

The store (:mod:`rlm.journal.store`) reads and writes these; the worker, the
volley runner and the CLI pass them around.  Kept apart from the store so the
records read on their own and the store holds only its transactions.
"""

from __future__ import annotations

import errno
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "Alive",
    "HolderTally",
    "Owner",
    "Recovered",
    "Spend",
    "TaskRow",
    "TaskState",
    "Verdict",
    "VerdictRow",
    "VolleyRow",
    "local_host",
    "pid_alive",
    "process_started",
]

TaskState = Literal["open", "in_progress", "done", "failed"]

#: The initial PID namespace's inode (PROC_PID_INIT_INO): a process outside any container.
_INIT_PID_NAMESPACE = 4026531836


def local_host(
    hostname: str | None = None, boot_id: str | None = None, pid_namespace: int | None = None
) -> str:
    """This machine's name in claims: its host name, its boot's id, and its PID namespace
    when that is a container's.

    A claim whose holder is "on this host" and whose pid does not exist is reopened at
    once, so the name must pick out exactly the processes whose pids this one can see:
    two machines with one host name (``localhost``, a cloned image) or a container
    sharing its host's name (``--network host``) must not take each other's live
    workers for dead.  The arguments are for tests; by default they are read here.
    """
    if hostname is None:
        hostname = socket.gethostname()
    if boot_id is None:
        boot_id = _read_text("/proc/sys/kernel/random/boot_id")
    if pid_namespace is None:
        try:
            pid_namespace = os.stat("/proc/self/ns/pid").st_ino
        except OSError:  # not Linux: no namespaces to tell apart
            pid_namespace = _INIT_PID_NAMESPACE
    name = f"{hostname}~{boot_id[:8]}" if boot_id else hostname
    return name if pid_namespace == _INIT_PID_NAMESPACE else f"{name}~pidns{pid_namespace}"


#: Whether a process of this host still runs: ``alive(pid, started)``, ``started`` the
#: start time recorded when it registered (:func:`process_started`; None: unknown).
Alive = Callable[[int, int | None], bool]


def pid_alive(pid: int, started: int | None = None) -> bool:
    """Whether the process ``pid`` of this host still runs, and is the one that started
    at ``started`` (clock ticks since boot, :func:`process_started`) when that is given.

    A pid is reused once its process is gone: a worker killed long ago may have its
    pid taken by an unrelated process, whose existence says nothing about the worker.
    Its start time does: the boot is named by the host id (``local_host``), and within
    a boot a pid and a start time name one process.  A zombie (killed, not yet reaped)
    never runs again: it is gone.  Where ``/proc`` cannot tell (not Linux), a process
    with this pid counts, as it always did.
    """
    try:
        os.kill(pid, 0)
    except OSError as exc:
        if exc.errno != errno.EPERM:  # EPERM: it exists, owned by someone else
            return False
    stat = _proc_stat(pid)
    if stat is None:
        return True
    state, start = stat
    return state not in ("Z", "X") and (started is None or start == started)


def process_started(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field
    22); None where there is no ``/proc`` or no such process."""
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """The state and start time of process ``pid`` from ``/proc/PID/stat``, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    # Field 2, the command name in parentheses, may hold spaces and ")": the fields
    # after it start after the last ")".  Field 3 is the state, field 22 the start time.
    fields = text[text.rfind(b")") + 1 :].split()
    try:
        return fields[0].decode("ascii", "replace"), int(fields[19])
    except (IndexError, ValueError):
        return None


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:  # not Linux: the host name alone
        return ""


@dataclass(frozen=True)
class Owner:
    """Who holds a claim: a host, a process on it, and a worker inside that process.

    ``started`` is when that process started (:func:`process_started`), recorded with
    the worker's registration so that a reused pid is not taken for the worker; it is
    not part of the claim's identity (None when unknown: another host's, an old row).
    """

    host: str
    pid: int
    worker: str
    started: int | None = field(default=None, compare=False)

    @classmethod
    def here(cls, worker: str | None = None) -> Owner:
        pid = os.getpid()
        return cls(local_host(), pid, worker or uuid.uuid4().hex[:12], process_started(pid))

    def __str__(self) -> str:
        return f"{self.host}/{self.pid}/{self.worker}"


@dataclass(frozen=True)
class Spend:
    """What attempts cost: USD, requests sent, input and output tokens."""

    cost: float = 0.0
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Spend) -> Spend:
        return Spend(
            self.cost + other.cost,
            self.calls + other.calls,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
        )

    def __sub__(self, other: Spend) -> Spend:
        return Spend(
            self.cost - other.cost,
            self.calls - other.calls,
            self.input_tokens - other.input_tokens,
            self.output_tokens - other.output_tokens,
        )


@dataclass(frozen=True)
class Verdict:
    """The end of one claimed task.  ``spend`` is what this attempt cost."""

    index: int
    status: Literal["done", "failed"]
    output: str | None = None
    error: str | None = None
    cost: float | None = None
    usage: Mapping[str, Any] = field(default_factory=dict)
    spend: Spend = Spend()


#: A verdict as :meth:`JournalStore.finish_rows` takes it: index, status, output,
#: usage, cost, error (a plain tuple: a fast volley builds one per task).
VerdictRow = tuple[int, Literal["done", "failed"], str | None, Mapping[str, Any], float | None,
                   str | None]


@dataclass(frozen=True)
class TaskRow:
    """One task as the journal holds it."""

    volley_id: str
    index: int
    spec: dict[str, Any]
    status: TaskState
    started_at: float | None = None
    finished_at: float | None = None
    heartbeat_at: float | None = None
    claimed_by: Owner | None = None
    attempts: int = 0
    output: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    cost: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class HolderTally:
    """What one holder (a worker in a process on a host) did on a volley: its tasks by
    state, its verdicts' tokens and cost, their requests' time at the provider in all
    (seconds: the concurrency it used), when it first claimed (``started_at`` of its
    earliest task) and gave its last verdict."""

    holder: Owner
    done: int
    failed: int
    in_progress: int
    tokens: int
    cost: float
    busy_s: float
    first_claim: float | None
    last_verdict: float | None


@dataclass(frozen=True)
class VolleyRow:
    """A volley's definition, what it has spent, and how many tasks are in each state."""

    volley_id: str
    created_at: float
    settings: dict[str, Any]
    context_digest: str | None
    spent: Spend
    counts: dict[TaskState, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class Recovered:
    """A claim given back to ``open`` because its holder is gone (a ``stale_recovery``)."""

    volley_id: str
    index: int
    owner: Owner | None
    idle_s: float
    reason: str
