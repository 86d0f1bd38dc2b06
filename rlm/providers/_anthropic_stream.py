"""Reading an Anthropic Messages stream.

Events: ``message_start`` (model, id, input and cached-input usage),
``content_block_delta`` with a ``text_delta`` (the text), ``message_delta``
(``stop_reason`` and the output token count so far), ``ping``, and
``message_stop``, the final event: a stream that ends before it was cut.  An
``error`` event mid-stream (``overloaded_error`` is common) becomes the status
error its type stands for, so an overload is retried like a 529 answer.
"""

from __future__ import annotations

from typing import Any

import httpx2

from rlm.providers._http import classify_status, count_tokens, parse_rate_limit_headers
from rlm.providers._stream import JSONEventReader
from rlm.providers.base import Completion

__all__ = ["AnthropicStreamReader"]

# https://docs.anthropic.com/en/api/errors: the error types and their HTTP statuses.
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


class AnthropicStreamReader(JSONEventReader):
    """Accumulates one streamed Messages answer."""

    what = "Messages event"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._model = ""
        self._id: str | None = None
        self._input = 0
        self._cached = 0
        self._written = 0
        self._output = 0
        self._stop_reason: str | None = None

    def read(self, event: httpx2.ServerSentEvent, data: dict[str, Any]) -> str:
        kind = data.get("type", event.event)
        if kind == "error":
            raise self._error(data.get("error"))
        return self._read(kind, data)

    def _read(self, kind: object, data: dict[str, Any]) -> str:
        if kind == "message_start":
            message = data["message"]
            self._model = str(message.get("model") or "")
            self._id = message.get("id") if isinstance(message.get("id"), str) else None
            usage = message.get("usage") or {}
            self._input = count_tokens(usage.get("input_tokens"))
            self._cached = count_tokens(usage.get("cache_read_input_tokens"))
            self._written = count_tokens(usage.get("cache_creation_input_tokens"))
            self._output = count_tokens(usage.get("output_tokens"))
        elif kind == "content_block_delta":
            delta = data["delta"]
            if delta.get("type") == "text_delta":
                text = delta["text"]
                if not isinstance(text, str):
                    raise TypeError("text_delta text is not a string")
                return text
        elif kind == "message_delta":
            stop = data.get("delta", {}).get("stop_reason")
            if isinstance(stop, str):
                self._stop_reason = stop
            usage = data.get("usage") or {}
            if "output_tokens" in usage:
                self._output = count_tokens(usage.get("output_tokens"))
        elif kind == "message_stop":
            self.finished = True
        return ""

    def _error(self, error: object) -> Exception:
        kind = error.get("type") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        status = _ERROR_STATUS.get(str(kind), 500)
        detail = f"{kind}: {message}"[:300]
        where = f"{self.url} sent an error mid-stream (treated as HTTP {status})"
        return classify_status(self.url, status, f"{where}: {detail}", detail)

    def completion(self, response: httpx2.Response) -> Completion:
        metadata: dict[str, Any] = {"streamed": True}
        if self._id:
            metadata["id"] = self._id
        if self._cached:
            metadata["cached_tokens"] = self._cached
        if self._written:
            metadata["cache_write_tokens"] = self._written
        limits = parse_rate_limit_headers(response.headers)
        if limits:
            metadata["ratelimit"] = limits
        return Completion(
            text="".join(self.parts),
            model=self._model,
            # Anthropic counts cached input apart; the ledger wants all input.
            input_tokens=self._input + self._cached + self._written,
            output_tokens=self._output,
            finish_reason=self._stop_reason,
            metadata=metadata,
        )
