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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
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


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this host."""
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM  # exists, owned by someone else
    return True


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:  # not Linux: the host name alone
        return ""


@dataclass(frozen=True)
class Owner:
    """Who holds a claim: a host, a process on it, and a worker inside that process."""

    host: str
    pid: int
    worker: str

    @classmethod
    def here(cls, worker: str | None = None) -> Owner:
        return cls(local_host(), os.getpid(), worker or uuid.uuid4().hex[:12])

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
