"""A provider built from a function: the one fake provider every test uses.

``FunctionProvider(reply)`` answers each request with ``await reply(request)``:
the text (or a whole :class:`Completion`).  The function may sleep on trio's
clock (that is the latency, so tests run in virtual time) and may raise a
:class:`rlm.errors.ProviderError` (a failed attempt: every attempt calls it
again).  The provider records what it was sent and how many requests it held
at once, per lane and in all.  Streamed, the answer goes out in pieces.

:meth:`FunctionProvider.scripted` builds the usual function: root steps from a
list (by step) or a function, sub-queries by a function, with optional
latency and failures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence

import trio

from rlm.errors import ProviderError
from rlm.providers.base import Completion, CompletionRequest, TextSink

__all__ = ["FunctionProvider", "Reply", "assistant_turns", "is_root_request"]

#: What a FunctionProvider is built from.
Reply = Callable[[CompletionRequest], Awaitable[str | Completion]]
Script = Callable[[CompletionRequest], str]


def is_root_request(request: CompletionRequest) -> bool:
    """A step of a call (it carries the system prompt), not a one-shot sub-query."""
    return any(m["role"] == "system" for m in request.messages)


def assistant_turns(request: CompletionRequest) -> int:
    """How many replies the model gave before this request: the step's index from 0."""
    return sum(1 for m in request.messages if m["role"] == "assistant")


class FunctionProvider:
    """See the module docstring.

    ``chunk_chars`` and ``chunk_delay(request)`` shape streamed answers: pieces
    of that many characters, each after that many seconds.
    """

    def __init__(
        self,
        reply: Reply,
        *,
        name: str = "function",
        chunk_chars: int = 16,
        chunk_delay: Callable[[CompletionRequest], float] = lambda request: 0.0,
    ) -> None:
        self._reply = reply
        self.name = name
        self.chunk_chars = chunk_chars
        self.chunk_delay = chunk_delay
        #: Every attempt's request, in the order they arrived.
        self.requests: list[CompletionRequest] = []
        #: Attempt start times on trio's clock, in the same order.
        self.times: list[float] = []
        #: How many attempts that streamed.
        self.streamed = 0
        #: Requests held right now, and the most held at once: by lane and under "all".
        self.held: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()

    @classmethod
    def scripted(
        cls,
        root: Sequence[str] | Script,
        sub: Script = lambda request: "sub-answer",
        *,
        latency: Callable[[CompletionRequest], float] = lambda request: 0.0,
        fail: Callable[[CompletionRequest], ProviderError | None] = lambda request: None,
    ) -> FunctionProvider:
        """Root steps answered from ``root`` (the n-th reply for step n, the last one
        after that; or a function), sub-queries by ``sub``.  Each attempt first
        sleeps ``latency(request)``, then raises ``fail(request)`` if that is an error."""

        async def reply(request: CompletionRequest) -> Completion:
            await trio.sleep(latency(request))
            error = fail(request)
            if error is not None:
                raise error
            if not is_root_request(request):
                text = sub(request)
            elif callable(root):
                text = root(request)
            else:
                text = root[min(assistant_turns(request), len(root) - 1)]
            chars = sum(len(m["content"]) for m in request.messages)
            return Completion(
                text=text,
                model=request.model,
                input_tokens=chars // 4,
                output_tokens=len(text) // 4,
            )

        return cls(reply, name="scripted")

    def root_requests(self) -> list[CompletionRequest]:
        return [r for r in self.requests if is_root_request(r)]

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        self.times.append(trio.current_time())
        lanes = ("all", request.lane)
        for key in lanes:
            self.held[key] += 1
            self.peak[key] = max(self.peak[key], self.held[key])
        try:
            answer = await self._reply(request)
        finally:
            for key in lanes:
                self.held[key] -= 1
        if isinstance(answer, Completion):
            return answer
        return Completion(text=answer, model=request.model)

    async def stream(self, request: CompletionRequest, on_text: TextSink) -> Completion:
        self.streamed += 1
        completion = await self.complete(request)
        text = completion.text
        for start in range(0, len(text), self.chunk_chars):
            await trio.sleep(self.chunk_delay(request))
            await on_text(text[start : start + self.chunk_chars])
        return completion

    async def aclose(self) -> None:
        """Nothing to release."""
