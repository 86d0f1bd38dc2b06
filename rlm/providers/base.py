"""What every provider speaks: a chat request in, a completion with usage out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict

__all__ = ["Completion", "CompletionRequest", "Lane", "Message", "Provider"]

Lane = Literal["root", "sub"]


class Message(TypedDict):
    """One chat message, as in the OpenAI chat API."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class CompletionRequest:
    """One chat completion to ask of a provider.

    ``lane`` is ``"root"`` for steps of depth-0 calls and ``"sub"`` for
    everything else; the gate schedules by it.  ``max_tokens`` is optional; the
    provider's default applies when it is ``None``.
    """

    messages: list[Message]
    model: str
    lane: Lane = "sub"
    max_tokens: int | None = None
    call_id: str = ""
    depth: int = 0


@dataclass(frozen=True)
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


class Provider(Protocol):
    """Sends one completion request; one attempt, no hidden retries.

    Raises a :class:`rlm.errors.ProviderError` subclass on failure.  Retries,
    pacing and concurrency belong to the gate, never to a provider.
    """

    name: str

    async def complete(self, request: CompletionRequest) -> Completion: ...

    async def aclose(self) -> None: ...
