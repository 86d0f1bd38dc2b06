"""What every provider speaks: a chat request in, a completion with usage out."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable

from rlm._text import clean_text, clean_value

__all__ = [
    "Completion",
    "CompletionRequest",
    "Lane",
    "Message",
    "Provider",
    "StreamingProvider",
    "TextSink",
]

Lane = Literal["root", "sub"]


class Message(TypedDict):
    """One chat message, as in the OpenAI chat API."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """One chat completion to ask of a provider.

    ``lane`` is ``"root"`` for steps of depth-0 calls and ``"sub"`` for
    everything else; the gate schedules by it.  ``max_tokens`` is optional; the
    provider's default applies when it is ``None``.  ``call_id``, ``depth``,
    ``parent_id`` and (in a volley) ``task``/``task_title`` only label the
    events the request causes.  ``cache_prefix`` is the number of leading
    messages that are byte-identical across many requests (a volley's system
    prompt and shared context): providers with explicit prompt caching mark
    the end of that prefix as a cache breakpoint.  ``cache_end`` says the
    conversation will be sent again with more at its end (a call's step): such
    providers mark its system prompt and its end as cache breakpoints, so the
    next step reads all of this one from the cache.  ``cache_key`` is a stable
    key per run (never a secret) that providers which route by one (OpenAI's
    ``prompt_cache_key``) send, so the run's steps reach the machine that
    holds their cached prefix.
    """

    messages: list[Message]
    model: str
    lane: Lane = "sub"
    max_tokens: int | None = None
    call_id: str = ""
    depth: int = 0
    #: A JSON Schema the answer must fit (structured answers); providers ask for
    #: JSON in their own dialect and return the JSON text as the completion's text.
    response_schema: dict[str, Any] | None = None
    # Attribution of streamed text (never sent to the provider).
    parent_id: str | None = None
    task: int | None = None
    task_title: str | None = None
    cache_prefix: int = 0
    cache_end: bool = False
    cache_key: str | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """A provider's answer.  Token counts come from the response's ``usage``.

    ``metadata`` carries provider facts worth reporting (``fixture: True`` for
    the built-in fixture model, a provider-reported ``cost``, ``system_fingerprint``).
    """

    text: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    finish_reason: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Every provider's strings come from JSON, which may hold lone surrogates
        # (valid escapes, invalid text): cleaned here, no trace or journal fails on one.
        object.__setattr__(self, "text", clean_text(self.text))
        object.__setattr__(self, "model", clean_text(self.model))
        if self.finish_reason is not None:
            object.__setattr__(self, "finish_reason", clean_text(self.finish_reason))
        if self.metadata:
            object.__setattr__(self, "metadata", clean_value(self.metadata))


class Provider(Protocol):
    """Sends one completion request; one attempt, no hidden retries.

    Raises a :class:`rlm.errors.ProviderError` subclass on failure.  Retries,
    pacing and concurrency belong to the gate, never to a provider.
    """

    name: str

    async def complete(self, request: CompletionRequest) -> Completion: ...

    async def aclose(self) -> None: ...


#: Receives each piece of streamed text as it arrives.  Awaited, so a slow
#: consumer slows the stream down instead of piling text up in memory.
TextSink = Callable[[str], Awaitable[None]]


@runtime_checkable
class StreamingProvider(Provider, Protocol):
    """A provider that can also stream: text pieces go to ``on_text`` as they come.

    The returned Completion is the whole answer of this one attempt.  A stream
    that fails part-way (an error event, a dropped connection, no final event,
    no bytes for the idle timeout) raises a ProviderError like any failed
    attempt: the text already passed to ``on_text`` belongs to a failed
    attempt, and no Completion carries it.
    """

    async def stream(self, request: CompletionRequest, on_text: TextSink) -> Completion: ...
