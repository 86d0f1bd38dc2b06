"""The volley's own events (documented in docs/events.md with every other kind).

A volley's requests emit the gate's usual ``llm_request``/``llm_response``/
``llm_retry`` events with ``call_id`` ``t<index>`` (``t<index>.<n>`` for the
child calls of an ``--rlm`` task), so a trace attributes every attempt to its
task.  ``task_finished`` comes only after the result sink has accepted the
result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from rlm._events import Event

__all__ = [
    "BatchStatus",
    "BatchSubmitted",
    "StaleRecovery",
    "TaskFinished",
    "VolleyFinished",
    "VolleyStarted",
    "task_call_id",
]


def task_call_id(index: int) -> str:
    """The ``call_id`` of task ``index``'s requests (and the prefix of its child calls)."""
    return f"t{index}"


@dataclass(frozen=True, kw_only=True)
class VolleyStarted(Event):
    kind: ClassVar[str] = "volley_started"
    volley_id: str
    tasks: int
    context_chars: int
    mode: str
    cache_warm: bool
    trace_content: str = "full"  # what the trace keeps (--trace-content)


@dataclass(frozen=True, kw_only=True)
class TaskFinished(Event):
    kind: ClassVar[str] = "task_finished"
    index: int
    status: str
    duration_s: float
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost: float | None
    retries: int
    error: str | None
    output: str | None = None
    title: str = ""  # the prompt's first line (at most 80 characters): the task's label
    prompt: str | None = None  # content: the task's whole prompt


@dataclass(frozen=True, kw_only=True)
class VolleyFinished(Event):
    kind: ClassVar[str] = "volley_finished"
    volley_id: str
    status: str
    error: str | None
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class StaleRecovery(Event):
    """A journal claim given back to ``open`` because its holder stopped heartbeating."""

    kind: ClassVar[str] = "stale_recovery"
    volley_id: str
    index: int
    owner: str | None
    idle_s: float
    reason: str


@dataclass(frozen=True, kw_only=True)
class BatchSubmitted(Event):
    """A provider batch of the volley's tasks was created at the provider (``--batch-api``)."""

    kind: ClassVar[str] = "batch_submitted"
    volley_id: str
    number: int
    batch_id: str
    provider: str
    tasks: int
    bytes: int
    found: bool  # found at the provider after a stop, not created by this process


@dataclass(frozen=True, kw_only=True)
class BatchStatus(Event):
    """What the provider says of a batch, each time its status or counts change."""

    kind: ClassVar[str] = "batch_status"
    volley_id: str
    number: int
    batch_id: str
    status: str
    ended: bool
    total: int
    succeeded: int
    failed: int
