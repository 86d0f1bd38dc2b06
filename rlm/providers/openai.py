"""OpenAI-compatible chat completions (OpenAI, OpenRouter, vLLM, llama.cpp, Ollama).

The key travels only in the Authorization header.  HTTP handling and error
translation are shared with the other providers in ``_http.py``.
"""

from __future__ import annotations

import math
from typing import Any

import httpx2

from rlm.errors import ProviderStatusError
from rlm.providers._http import (
    BAD_SHAPE,
    JSONProvider,
    bad_reply,
    clean_text,
    count_tokens,
    make_http_client,
    parse_rate_limit_headers,
    parse_retry_after,
    status_error,
)
from rlm.providers.base import Completion, CompletionRequest

__all__ = [
    "OpenAIProvider",
    "clean_text",
    "make_http_client",
    "parse_rate_limit_headers",
    "parse_retry_after",
]


class OpenAIProvider(JSONProvider):
    """Chat completions at ``{base_url}/chat/completions``."""

    name = "openai"

    def __init__(self, client: httpx2.AsyncClient, base_url: str, api_key: str | None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        super().__init__(client, base_url.rstrip("/") + "/chat/completions", headers)
        # OpenAI's own API refuses max_tokens for its reasoning models and takes
        # max_completion_tokens for all; compatible servers expect max_tokens.
        host = httpx2.URL(self.url).host
        self._max_tokens_key = "max_completion_tokens" if host == "api.openai.com" else "max_tokens"

    async def complete(self, request: CompletionRequest) -> Completion:
        body: dict[str, Any] = {"model": request.model, "messages": request.messages}
        if request.max_tokens is not None:
            body[self._max_tokens_key] = request.max_tokens
        return self._parse(await self.post(body))

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
        usage = usage if isinstance(usage, dict) else {}
        metadata: dict[str, Any] = {}
        for key in ("system_fingerprint", "id"):
            if isinstance(data.get(key), str):
                metadata[key] = data[key]
        if data.get("system_fingerprint") == "rlm-fixture":
            metadata["fixture"] = True
        cost = usage.get("cost")
        if isinstance(cost, int | float) and math.isfinite(cost) and cost >= 0:
            metadata["cost"] = float(cost)
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and count_tokens(details.get("cached_tokens")):
            metadata["cached_tokens"] = count_tokens(details.get("cached_tokens"))
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
