"""OpenAI-compatible chat completions (OpenAI, OpenRouter, vLLM, llama.cpp, Ollama).

The key travels only in the Authorization header.  HTTP handling and error
translation are shared with the other providers in ``_http.py``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx2

from rlm.errors import ProviderStatusError
from rlm.providers._http import (
    BAD_SHAPE,
    ResponseLimits,
    bad_reply,
    clean_text,
    count_tokens,
    endpoint_url,
    make_http_client,
    parse_rate_limit_headers,
    parse_retry_after,
    status_error,
)
from rlm.providers._openai_stream import OpenAIStreamReader, usage_metadata
from rlm.providers._stream import StreamingJSONProvider
from rlm.providers._structured import ANSWER_TOOL, object_schema, unwrap_answer
from rlm.providers.base import Completion, CompletionRequest, TextSink

__all__ = [
    "OpenAIProvider",
    "clean_text",
    "make_http_client",
    "parse_rate_limit_headers",
    "parse_retry_after",
]


class OpenAIProvider(StreamingJSONProvider):
    """Chat completions at ``{base_url}/chat/completions``."""

    name = "openai"

    def __init__(
        self,
        client: httpx2.AsyncClient,
        base_url: str,
        api_key: str | None,
        *,
        limits: ResponseLimits | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        url = endpoint_url(base_url, "/chat/completions")
        super().__init__(client, url, headers, limits)
        # OpenAI's own API refuses max_tokens for its reasoning models and takes
        # max_completion_tokens for all; compatible servers expect max_tokens.
        host = httpx2.URL(self.url).host
        self._max_tokens_key = "max_completion_tokens" if host == "api.openai.com" else "max_tokens"
        # OpenAI routes requests that share a prompt_cache_key (and a prefix) to the same
        # machine, where their prefix is cached; compatible servers may refuse the field.
        self._sends_cache_key = host == "api.openai.com"

    def _body(self, request: CompletionRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": request.model, "messages": request.messages}
        if request.max_tokens is not None:
            body[self._max_tokens_key] = request.max_tokens
        if request.cache_key and self._sends_cache_key:
            body["prompt_cache_key"] = request.cache_key
        if request.response_schema is not None:
            schema, _ = object_schema(request.response_schema)
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": ANSWER_TOOL, "schema": schema, "strict": False},
            }
        return body

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
        """Stream the answer (``include_usage`` so the last chunk still carries usage)."""
        if request.response_schema is not None:  # structured answers are not streamed
            return await self.complete(request)
        body = {
            **self._body(request),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        return await self.post_stream(
            body,
            reader=OpenAIStreamReader(self.url),
            on_text=on_text,
            whole=self._parse,
        )

    def _error_in_body(self, response: httpx2.Response, error: object) -> ProviderStatusError:
        """An error inside a 200 response (OpenRouter and some proxies do this)."""
        code = error.get("code") if isinstance(error, dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else 502
        message = error.get("message") if isinstance(error, dict) else error
        return status_error(
            self.url,
            response,
            status=status,
            detail=str(message)[:300],
            where=f"{self.url} answered HTTP 200 with an error (treated as {status})",
        )

    def _parse(self, response: httpx2.Response) -> Completion:
        try:
            data = response.json()
            if isinstance(data, dict) and "error" in data and not data.get("choices"):
                raise self._error_in_body(response, data["error"])
            choice = data["choices"][0]
            text = choice["message"]["content"] or ""
            if not isinstance(text, str):
                raise TypeError("message content is not a string")
        except BAD_SHAPE as exc:
            raise bad_reply(self.url, response) from exc
        usage = data.get("usage")
        metadata = usage_metadata(data, usage if isinstance(usage, dict) else {})
        if not isinstance(usage, dict) or not usage:
            metadata["usage"] = "missing"  # the gate estimates it
            usage = {}
        limits = parse_rate_limit_headers(response.headers)
        if limits:
            metadata["ratelimit"] = limits
        return Completion(
            text=clean_text(text),
            model=str(data.get("model") or ""),
            input_tokens=count_tokens(usage.get("prompt_tokens")),
            output_tokens=count_tokens(usage.get("completion_tokens")),
            finish_reason=choice.get("finish_reason") if isinstance(choice, dict) else None,
            metadata=metadata,
        )
