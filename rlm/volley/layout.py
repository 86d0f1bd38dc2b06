"""How a completion task becomes a request: ``[system] + [shared context] + [task]``.

The shared part comes first and is built once, so every request of a volley
starts with the very same message objects — byte-identical, which is what
providers' prompt caches match on (OpenAI-compatible servers cache identical
prefixes automatically; Anthropic is told where the prefix ends through
``CompletionRequest.cache_prefix``).  Building it once also means a large
context is held once, not copied per task.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from rlm import prompts
from rlm.errors import RLMError
from rlm.providers.base import CompletionRequest, Lane, Message
from rlm.volley.records import VolleyTask

__all__ = ["CACHE_MIN_TOKENS", "ContextTooLong", "RequestLayout", "context_block",
           "fit_window"]

#: Below this many prefix tokens providers do not cache (OpenAI and Anthropic: 1,024).
CACHE_MIN_TOKENS = 1024


def context_block(documents: Sequence[str]) -> str:
    """The shared context as one message: each document in its own tag."""
    if len(documents) == 1:
        return f"<context>\n{documents[0]}\n</context>"
    return "\n".join(
        f'<context document="{i}">\n{doc}\n</context>' for i, doc in enumerate(documents, 1)
    )


class ContextTooLong(RLMError):
    """A completion task's prompt is longer than its model takes (``context_window``): the
    task fails having sent nothing, rather than be cut."""

    failure_kind = "context_window"


def fit_window(request: CompletionRequest, window: int | None) -> CompletionRequest:
    """``request`` as it fits a model that takes ``window`` tokens, prompt and answer
    together: raise ContextTooLong when the prompt alone (four characters a token) does not
    fit; else its output cap lowered to the room the prompt leaves, when it asks for more
    (servers count the cap in the window: OpenAI's and vLLM's refuse a request past it,
    llama.cpp's shortens the cap as this does)."""
    if window is None:
        return request
    prompt = sum(len(m["content"]) for m in request.messages) // 4
    if prompt >= window:
        raise ContextTooLong(
            f"the prompt is about {prompt:,} tokens and {request.model} takes {window:,} "
            f"(context_window): one completion cannot read it, and it is never cut, so "
            "nothing was sent"
        )
    room = window - prompt
    if request.max_tokens is None or request.max_tokens > room:
        return replace(request, max_tokens=room)
    return request


class RequestLayout:
    """Builds every task's request over one shared prefix."""

    def __init__(
        self,
        context: Sequence[str],
        *,
        model: str,
        max_tokens: int | None = None,
        lane: Lane = "sub",
    ) -> None:
        self.prefix: tuple[Message, ...] = (
            Message(role="system", content=prompts.load("volley")),
            *([Message(role="user", content=context_block(context))] if context else []),
        )
        self.context_chars = sum(len(doc) for doc in context)
        self.model = model
        self.max_tokens = max_tokens
        self.lane = lane

    @property
    def prefix_chars(self) -> int:
        return sum(len(m["content"]) for m in self.prefix)

    @property
    def cacheable(self) -> bool:
        """Whether the shared prefix is long enough for providers to cache it."""
        return self.context_chars > 0 and self.prefix_chars // 4 >= CACHE_MIN_TOKENS

    def request(self, task: VolleyTask, call_id: str) -> CompletionRequest:
        return CompletionRequest(
            messages=[*self.prefix, Message(role="user", content=task.prompt)],
            model=task.model or self.model,
            lane=self.lane,
            max_tokens=task.max_tokens or self.max_tokens,
            call_id=call_id,
            task=task.index,
            task_title=task.title,
            cache_prefix=len(self.prefix) if self.cacheable else 0,
        )
