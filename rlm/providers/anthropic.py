"""Anthropic's Messages API (``{base_url}/v1/messages``).

The key travels only in the ``x-api-key`` header.  Anthropic requires an
output cap on every request: ``max_tokens`` is the request's own, or
DEFAULT_MAX_TOKENS.  System messages become the ``system`` field; the rest
alternate user/assistant as the RLM loop already writes them.  529
(overloaded) and 429 go to the gate's retry and adaptive logic like any
provider's; a 400 about the credit balance stops the run as out of credit.
Prompt caching is explicit here: a request marks cache breakpoints (a volley's
shared prefix; a call's system prompt and its conversation's end, moved at
each step), and cache reads and writes come back counted apart.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import httpx2

from rlm.providers._anthropic_stream import AnthropicStreamReader
from rlm.providers._http import (
    BAD_SHAPE,
    ResponseLimits,
    bad_reply,
    clean_text,
    count_tokens,
    endpoint_url,
    parse_rate_limit_headers,
)
from rlm.providers._stream import StreamingJSONProvider
from rlm.providers._structured import ANSWER_TOOL, object_schema, unwrap_answer
from rlm.providers.base import Completion, CompletionRequest, TextSink

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MAX_TOKENS", "AnthropicProvider"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 8192
API_VERSION = "2023-06-01"
_EPHEMERAL = {"type": "ephemeral"}


class AnthropicProvider(StreamingJSONProvider):
    """Messages at ``{base_url}/v1/messages`` (``/v1`` is added when missing)."""

    name = "anthropic"
    #: A request's cache breakpoint makes Anthropic write its prefix to the prompt
    #: cache, billed above the input rate: the budget reserves that rate (gate).
    bills_cache_writes = True

    def __init__(
        self,
        client: httpx2.AsyncClient,
        base_url: str,
        api_key: str | None,
        *,
        limits: ResponseLimits | None = None,
    ) -> None:
        headers = {"anthropic-version": API_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        has_v1 = httpx2.URL(base_url).path.rstrip("/").endswith("/v1")
        url = endpoint_url(base_url, "/messages" if has_v1 else "/v1/messages")
        super().__init__(client, url, headers, limits)

    def request_body(self, request: CompletionRequest) -> dict[str, Any]:
        """The JSON body this provider posts for ``request`` (a batch sends the same)."""
        return self._body(request)

    def parse_reply(self, response: httpx2.Response) -> Completion:
        """The completion in a reply to :meth:`request_body`'s body (a batch's result too)."""
        return self._parse(response)

    async def complete(self, request: CompletionRequest) -> Completion:
        completion = self._parse(await self.post(self._body(request)))
        if request.response_schema is None:
            return completion
        _, wrapped = object_schema(request.response_schema)
        return replace(completion, text=unwrap_answer(completion.text, wrapped))

    async def stream(self, request: CompletionRequest, on_text: TextSink) -> Completion:
        """Stream the answer (Messages streaming: text arrives in ``text_delta`` events)."""
        if request.response_schema is not None:  # structured answers are not streamed
            return await self.complete(request)
        return await self.post_stream(
            {**self._body(request), "stream": True},
            reader=AnthropicStreamReader(self.url),
            on_text=on_text,
            whole=self._parse,
        )

    def _body(self, request: CompletionRequest) -> dict[str, Any]:
        system = "\n\n".join(m["content"] for m in request.messages if m["role"] == "system")
        marked = _breakpoints(request)
        messages: list[dict[str, Any]] = []
        for i, m in enumerate(request.messages):
            if m["role"] == "system":
                continue
            content: Any = m["content"]
            if i in marked:
                content = [{"type": "text", "text": content, "cache_control": _EPHEMERAL}]
            messages.append({"role": m["role"], "content": content})
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
            "messages": messages,
        }
        if system:
            at_system = request.cache_end or any(
                request.messages[i]["role"] == "system" for i in marked
            )
            body["system"] = (
                [{"type": "text", "text": system, "cache_control": _EPHEMERAL}]
                if at_system
                else system
            )
        if request.response_schema is not None:
            # Structured answers as a forced call of one tool whose input is the answer.
            schema, _ = object_schema(request.response_schema)
            body["tools"] = [{
                "name": ANSWER_TOOL,
                "description": "Give your answer as structured data.",
                "input_schema": schema,
            }]
            body["tool_choice"] = {"type": "tool", "name": ANSWER_TOOL}
        return body

    def _parse(self, response: httpx2.Response) -> Completion:
        try:
            data = response.json()
            blocks = data["content"]
            text = "".join(b["text"] for b in blocks if b.get("type") == "text")
            answers = [b["input"] for b in blocks if b.get("type") == "tool_use"]
            if answers:  # a structured answer: the forced tool call's input
                text = json.dumps(answers[0])
        except BAD_SHAPE as exc:
            raise bad_reply(self.url, response) from exc
        usage = data.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        cached = count_tokens(usage.get("cache_read_input_tokens"))
        written = count_tokens(usage.get("cache_creation_input_tokens"))
        metadata: dict[str, Any] = {}
        if isinstance(data.get("id"), str):
            metadata["id"] = data["id"]
        if cached:
            metadata["cached_tokens"] = cached
        if written:  # priced above the input rate (prices.CACHE_WRITE_FACTOR)
            metadata["cache_write_tokens"] = written
        limits = parse_rate_limit_headers(response.headers)
        if limits:
            metadata["ratelimit"] = limits
        return Completion(
            text=clean_text(text),
            model=str(data.get("model") or ""),
            # Anthropic counts cache reads and writes apart; the ledger wants all input.
            input_tokens=count_tokens(usage.get("input_tokens")) + cached + written,
            output_tokens=count_tokens(usage.get("output_tokens")),
            finish_reason=data.get("stop_reason")
            if isinstance(data.get("stop_reason"), str)
            else None,
            metadata=metadata,
        )


def _breakpoints(request: CompletionRequest) -> set[int]:
    """The messages whose end is a prompt-cache breakpoint (besides the system prompt's).

    A volley's shared prefix ends at one (``cache_prefix``); a call's step marks
    its conversation's end (``cache_end``), so the next step, which sends all of
    it again and more, reads it from the cache: Anthropic looks for a cached
    prefix up to 20 blocks before a breakpoint, and a step adds two.  With the
    system prompt's, that is at most 3 of the 4 breakpoints a request may have.
    """
    marked = {request.cache_prefix - 1} if request.cache_prefix > 0 else set()
    if request.cache_end and request.messages:
        marked.add(len(request.messages) - 1)
    return marked
