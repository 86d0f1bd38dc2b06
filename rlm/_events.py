"""Events: immutable records of everything that happens in a run.

Every observable behaviour is an event first; the trace file, the progress
display and the run's metrics are sinks.  Each event carries ``t`` (seconds on
trio's clock since the run started, so virtual-time tests see exact values),
``call_id``, ``parent_id`` and ``depth``.  ``docs/events.md`` documents every
kind and field.

Streamed text (:class:`TextDelta`) is *published* rather than emitted: it is
awaited into the run's streams (see :mod:`rlm.streaming`), so a consumer that
falls behind slows the producers down; it is neither kept in the bus's list
nor written to the trace, which stay the size of the run, not of its text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import trio

from rlm._status import AttemptStatus, CallStatus, RunStatus

__all__ = [
    "BridgeCallFinished",
    "BridgeCallStarted",
    "BudgetRefused",
    "CallFinished",
    "CallStarted",
    "CapacityChanged",
    "CodeExecuted",
    "Event",
    "EventBus",
    "LLMCached",
    "LLMRequest",
    "LLMResponse",
    "LLMRetry",
    "LoopBatched",
    "RateChanged",
    "RateLimitLearned",
    "RunFinished",
    "RunStarted",
    "SandboxExited",
    "SandboxMemoryWait",
    "SandboxStarted",
    "StepCompleted",
    "StreamDiscarded",
    "StreamSink",
    "TextDelta",
    "TraceStarted",
]


@dataclass(frozen=True, kw_only=True)
class Event:
    """Base of every event.  ``kind`` is the event's name in traces."""

    kind: ClassVar[str] = "event"
    t: float = 0.0
    call_id: str = ""
    parent_id: str | None = None
    depth: int = 0

    def to_dict(self) -> dict[str, Any]:
        # What dataclasses.asdict gives, without its deep copy of every scalar: a run's
        # trace is built from these, so this runs once per event.
        record: dict[str, Any] = {"event": self.kind}
        for name in _field_names(type(self)):
            value = getattr(self, name)
            record[name] = value if isinstance(value, _SCALARS) else _plain(value)
        return record

    def trace_record(self) -> dict[str, Any]:
        """:meth:`to_dict`, made once per event and shared by the run's own readers (the
        trace file, ``--stream --json``, the result's ``trace``): read it, never change it
        (``to_dict`` gives a copy of one's own)."""
        record: dict[str, Any] | None = self.__dict__.get(_RECORD)
        if record is None:
            record = self.__dict__[_RECORD] = self.to_dict()
        return record


#: Where :meth:`Event.trace_record` keeps the record, beside the fields: not a field, so
#: equality, hashing, repr and dataclasses.fields do not see it.
_RECORD = "_trace_record"


_SCALARS = (str, int, float, type(None))


_FIELD_NAMES: dict[type[Event], tuple[str, ...]] = {}


def _field_names(cls: type[Event]) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _plain(value: Any) -> Any:
    """A copy of a field's container value, as dataclasses.asdict makes it."""
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(_plain(item) for item in value))
    if isinstance(value, list | tuple):
        return type(value)(_plain(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


@dataclass(frozen=True, kw_only=True)
class TraceStarted(Event):
    """The first line of every trace file: the schema its events follow.

    Written by the trace writer, not emitted on the bus: a trace without it is
    of schema version 1 (rlm before the schema was published).
    """

    kind: ClassVar[str] = "trace_started"
    schema_version: int
    rlm_version: str


@dataclass(frozen=True, kw_only=True)
class RunStarted(Event):
    """The run began (its query, context size and settings)."""

    kind: ClassVar[str] = "run_started"
    query: str
    context_chars: int
    context_docs: int
    config: dict[str, Any]
    wall_time: str
    system_prompt: str | None = None  # content: the root model's system prompt, sent once here


@dataclass(frozen=True, kw_only=True)
class RunFinished(Event):
    """The run ended, for any reason: its status, answer and usage totals."""

    kind: ClassVar[str] = "run_finished"
    status: RunStatus
    answer: str | None
    error: str | None
    duration_s: float
    llm_calls: int
    input_tokens: int
    output_tokens: int
    usage_detail: dict[str, Any] = field(default_factory=dict)
    traffic: dict[str, Any] = field(default_factory=dict)
    teardown_s: float = 0.0  # after the outcome was known, before this event: not in duration_s


@dataclass(frozen=True, kw_only=True)
class CallStarted(Event):
    """A call (root or child) began."""

    kind: ClassVar[str] = "call_started"
    query: str
    model: str
    context_chars: int


@dataclass(frozen=True, kw_only=True)
class CallFinished(Event):
    """A call ended."""

    kind: ClassVar[str] = "call_finished"
    status: CallStatus
    iterations: int
    answer: str | None
    error: str | None
    duration_s: float


@dataclass(frozen=True, kw_only=True)
class StepCompleted(Event):
    """One generation of a call's model came back."""

    kind: ClassVar[str] = "step_completed"
    iteration: int
    model: str
    code_blocks: int
    has_final: bool
    forced_final: bool
    input_tokens: int
    output_tokens: int
    #: Of ``input_tokens``: read from the provider's prompt cache, and written to it.
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    reply_chars: int
    #: Characters of the reply its conversation did not keep (past ``max_reply_chars``).
    reply_cut_chars: int = 0
    # Content (--trace-content full): the reply as the conversation keeps it, and the
    # request as what is new since this call's previous request (earlier messages are
    # referenced by count, not repeated).
    reply: str | None = None
    request: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class CodeExecuted(Event):
    """One code block ran in the call's sandbox."""

    kind: ClassVar[str] = "code_executed"
    iteration: int
    block: int
    ok: bool
    output: str
    output_chars: int
    error: str | None
    final: bool
    duration_s: float
    pipelined: bool = False
    code: str | None = None  # content: the block's source


@dataclass(frozen=True, kw_only=True)
class BridgeCallStarted(Event):
    """Sandbox code called llm_query or llm_query_batched."""

    kind: ClassVar[str] = "bridge_call_started"
    bridge_id: int
    fn: str
    items: int
    mode: str
    #: Sent ahead by auto-batching, before the code asked it (see ``loop_batched``).
    speculative: bool = False


@dataclass(frozen=True, kw_only=True)
class BridgeCallFinished(Event):
    """An llm_query or llm_query_batched call returned to sandbox code."""

    kind: ClassVar[str] = "bridge_call_finished"
    bridge_id: int
    fn: str
    items: int
    failed_items: int
    duration_s: float
    # Content: every item's prompt, context (None when the call gave none) and answer.
    prompts: list[str] | None = None
    contexts: list[str | None] | None = None
    answers: list[str] | None = None
    speculative: bool = False
    #: A speculative call cancelled before the provider answered (the code did not need it).
    cancelled: bool = False


@dataclass(frozen=True, kw_only=True)
class LoopBatched(Event):
    """A loop of sandbox code had its sub-queries sent ahead (auto-batching)."""

    kind: ClassVar[str] = "loop_batched"
    loop: int
    line: int
    calls: int
    used: int
    cancelled: int
    window: int
    duration_s: float


@dataclass(frozen=True, kw_only=True)
class HistoryCompacted(Event):
    """A session's conversation grew past its limit: older steps became a summary."""

    kind: ClassVar[str] = "history_compacted"
    messages_before: int
    chars_before: int
    chars_after: int
    summary: str


@dataclass(frozen=True, kw_only=True)
class ToolCalled(Event):
    """Sandbox code called a host tool; ``error`` is what model code saw as ToolError."""

    kind: ClassVar[str] = "tool_called"
    tool: str
    ok: bool
    error: str | None
    duration_s: float


@dataclass(frozen=True, kw_only=True)
class LLMRequest(Event):
    """An attempt was sent to a provider."""

    kind: ClassVar[str] = "llm_request"
    request_id: int
    lane: str
    model: str
    provider: str
    prompt_chars: int
    queue_wait_s: float
    pace_wait_s: float
    attempt: int
    in_flight: int


@dataclass(frozen=True, kw_only=True)
class LLMResponse(Event):
    """The provider answered, or the attempt failed."""

    kind: ClassVar[str] = "llm_response"
    request_id: int
    lane: str
    model: str
    provider: str
    status: AttemptStatus
    http_status: int | None
    latency_s: float
    input_tokens: int
    output_tokens: int
    attempt: int = 1
    cost: float | None = None
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    ttft_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class LLMCached(Event):
    """A request answered from the response cache: nothing was sent, nothing spent."""

    kind: ClassVar[str] = "llm_cached"
    request_id: int
    lane: str
    model: str
    provider: str
    input_tokens: int
    output_tokens: int
    #: The stored answer's provider facts (as ``llm_response`` had them when it was sent).
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class LLMRetry(Event):
    """A failed attempt will be retried."""

    kind: ClassVar[str] = "llm_retry"
    request_id: int
    lane: str
    attempt: int
    delay_s: float
    reason: str
    retry_after: bool
    brief: str = ""  # the reason in a few words, for a progress line
    task: int | None = None
    task_title: str | None = None


@dataclass(frozen=True, kw_only=True)
class TextDelta(Event):
    """A piece of streamed text, attributed to its call, request and attempt."""

    kind: ClassVar[str] = "text_delta"
    text: str
    lane: str
    request_id: int
    attempt: int
    task: int | None = None
    task_title: str | None = None


@dataclass(frozen=True, kw_only=True)
class StreamDiscarded(Event):
    """A streaming attempt failed after some text: that text is void."""

    kind: ClassVar[str] = "stream_discarded"
    lane: str
    request_id: int
    attempt: int
    chars: int
    reason: str
    task: int | None = None


@dataclass(frozen=True, kw_only=True)
class BudgetRefused(Event):
    """The budget ledger refused to spend."""

    kind: ClassVar[str] = "budget_refused"
    scope: str
    items: int
    lane: str
    model: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class CapacityChanged(Event):
    """Adaptive concurrency changed the sub lane's permits."""

    kind: ClassVar[str] = "capacity_changed"
    lane: str
    old: int
    new: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class RateChanged(Event):
    """The pacer's rate changed: a rate 429 cut it, successes grew it, a share or a
    learned limit moved it."""

    kind: ClassVar[str] = "rate_changed"
    limit: str
    old: float | None
    new: float
    reason: str


@dataclass(frozen=True, kw_only=True)
class RateLimitLearned(Event):
    """The provider announced a limit in its headers and the pacer adopted it."""

    kind: ClassVar[str] = "rate_limit_learned"
    limit: str
    value: float
    source: str


@dataclass(frozen=True, kw_only=True)
class SandboxStarted(Event):
    """A sandbox process is ready to execute code."""

    kind: ClassVar[str] = "sandbox_started"
    pid: int
    startup_s: float
    isolation: list[str]


@dataclass(frozen=True, kw_only=True)
class SandboxMemoryWait(Event):
    """A call's sandbox waits: what the run's sandboxes use leaves no room under the ceiling."""

    kind: ClassVar[str] = "sandbox_memory_wait"
    used_bytes: int
    ceiling_bytes: int
    sandboxes: int
    gauge: str


@dataclass(frozen=True, kw_only=True)
class SandboxExited(Event):
    """A sandbox process is gone (always killed and reaped)."""

    kind: ClassVar[str] = "sandbox_exited"
    pid: int
    returncode: int | None
    reason: str


Sink = Callable[[Event], None]


class StreamSink(Protocol):
    """Where a run's events flow to a live consumer (a :class:`rlm.streaming.StreamMerger`)."""

    async def put(self, event: Event) -> None:
        """Add a published event, waiting while the consumer is behind."""
        ...

    def put_nowait(self, event: Event) -> None:
        """Add an emitted event now (emitters are synchronous)."""
        ...


class EventBus:
    """Stamps events with the run clock and hands them to every sink, in order.

    Sinks are plain callables run synchronously; a sink must not block.  The bus
    also keeps every event so the run's result can carry its own trace.
    """

    def __init__(self, *, keep: bool = True) -> None:
        self._sinks: list[Sink] = []
        self._streams: list[StreamSink] = []
        self._origin = trio.current_time()
        self._keep = keep
        self.events: list[Event] = []
        self.finished = False  # whether run_finished was emitted

    def now(self) -> float:
        """Seconds since the bus was created, on trio's clock."""
        return trio.current_time() - self._origin

    def add_sink(self, sink: Sink) -> None:
        self._sinks.append(sink)

    def add_stream(self, stream: StreamSink) -> None:
        """Send every event, emitted or published, to ``stream`` as well."""
        self._streams.append(stream)

    @property
    def streaming(self) -> bool:
        """Whether a live consumer is attached (then providers stream their text)."""
        return bool(self._streams)

    def emit(self, event: Event) -> Event:
        if isinstance(event, RunFinished):
            self.finished = True
        stamped = dataclasses.replace(event, t=round(self.now(), 6))
        if self._keep:
            self.events.append(stamped)
        for sink in self._sinks:
            sink(stamped)
        for stream in self._streams:
            stream.put_nowait(stamped)
        return stamped

    async def publish(self, event: Event) -> Event:
        """Stamp a streamed event and hand it on, waiting while a stream is full.

        Not kept in :attr:`events`.  Cancellation while waiting drops the event.
        """
        stamped = dataclasses.replace(event, t=round(self.now(), 6))
        for sink in self._sinks:
            sink(stamped)
        for stream in self._streams:
            await stream.put(stamped)
        return stamped
