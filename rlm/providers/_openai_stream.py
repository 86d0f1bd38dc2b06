"""Reading an OpenAI-compatible chat completion stream.

Each ``data:`` event is a ``chat.completion.chunk``; text is in
``choices[0].delta.content``, the finish reason in the chunk that ends the
choice, and usage in a last chunk with no choices (``stream_options.
include_usage``).  ``data: [DONE]`` is the final event: a stream that ends
before it was cut.  An ``error`` object inside the stream (OpenRouter and some
proxies send one mid-stream) is the status error its ``code`` names, else 502.
"""

from __future__ import annotations

import math
from typing import Any

import httpx2

from rlm.providers._http import classify_status, count_tokens, parse_rate_limit_headers
from rlm.providers._stream import JSONEventReader
from rlm.providers.base import Completion

__all__ = ["OpenAIStreamReader", "usage_metadata"]


def usage_metadata(data: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    """Facts worth reporting from a completion (or its last chunk) and its usage."""
    metadata: dict[str, Any] = {}
    for key in ("system_fingerprint", "id"):
        if isinstance(data.get(key), str):
            metadata[key] = data[key]
    cost = usage.get("cost")
    if isinstance(cost, int | float) and math.isfinite(cost) and cost >= 0:
        metadata["cost"] = float(cost)
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and count_tokens(details.get("cached_tokens")):
        metadata["cached_tokens"] = count_tokens(details.get("cached_tokens"))
    return metadata


class OpenAIStreamReader(JSONEventReader):
    """Accumulates one streamed chat completion."""

    what = "chat completion chunk"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._model = ""
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] = {}
        self._facts: dict[str, Any] = {}

    def feed(self, event: httpx2.ServerSentEvent) -> str:
        if event.data.strip() == "[DONE]":
            self.finished = True
            return ""
        return super().feed(event)

    def read(self, event: httpx2.ServerSentEvent, chunk: dict[str, Any]) -> str:
        if "error" in chunk and not chunk.get("choices"):
            raise self._error(chunk["error"])
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self._model = chunk["model"]
        self._facts.update(
            {k: chunk[k] for k in ("id", "system_fingerprint") if isinstance(chunk.get(k), str)}
        )
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        choices = chunk.get("choices") or []
        if not choices:
            return ""
        choice = choices[0]
        if isinstance(choice.get("finish_reason"), str):
            self._finish_reason = choice["finish_reason"]
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if content is None:
            return ""
        if not isinstance(content, str):
            raise TypeError("delta content is not a string")
        return content

    def _error(self, error: object) -> Exception:
        code = error.get("code") if isinstance(error, dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else 502
        message = error.get("message") if isinstance(error, dict) else error
        detail = str(message)[:300]
        where = f"{self.url} sent an error mid-stream (treated as HTTP {status})"
        return classify_status(self.url, status, f"{where}: {detail}", detail)

    def completion(self, response: httpx2.Response) -> Completion:
        metadata = usage_metadata(self._facts, self._usage)
        limits = parse_rate_limit_headers(response.headers)
        if limits:
            metadata["ratelimit"] = limits
        metadata["streamed"] = True
        if not self._usage:  # asked for (include_usage), and not sent: llama.cpp's server
            metadata["usage"] = "missing"
        return Completion(
            text="".join(self.parts),
            model=self._model,
            input_tokens=count_tokens(self._usage.get("prompt_tokens")),
            output_tokens=count_tokens(self._usage.get("completion_tokens")),
            finish_reason=self._finish_reason,
            metadata=metadata,
        )
