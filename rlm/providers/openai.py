"""OpenAI-compatible chat completions (OpenAI, OpenRouter, vLLM, llama.cpp, Ollama).

One attempt per call, no hidden retries: the shared ``httpx2.AsyncClient`` is
built with ``retries=0`` and the gate decides what to do with a failure.
httpx2's exceptions are translated here into :mod:`rlm.errors` types that name
the URL and what came back.  The API key travels only in the Authorization
header; it is never logged and never part of an error message.
"""

from __future__ import annotations

import json
import math
from typing import Any

import httpx2

from rlm.errors import (
    AuthenticationError,
    ProviderConnectionError,
    ProviderResponseError,
    ProviderStatusError,
    QuotaExceededError,
    RateLimitError,
)
from rlm.providers.base import Completion, CompletionRequest

__all__ = [
    "OpenAIProvider",
    "clean_text",
    "make_http_client",
    "parse_rate_limit_headers",
    "parse_retry_after",
]

_RETRYABLE_STATUS = frozenset({408, 409, 425, 500, 502, 503, 504, 529})


def make_http_client(
    *, max_connections: int, request_timeout: float, tls: bool = True
) -> httpx2.AsyncClient:
    """The one HTTP client a run shares across every provider.

    With ``tls=False`` (every endpoint is plain ``http://``, e.g. a local
    vLLM or Ollama) the CA bundle is not loaded: that saves ~30 ms per run and
    no TLS connection can be made anyway, since redirects are not followed.
    """
    return httpx2.AsyncClient(
        verify=tls,
        timeout=httpx2.Timeout(request_timeout, connect=30.0),
        limits=httpx2.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
        transport=httpx2.AsyncHTTPTransport(retries=0),
        follow_redirects=False,
    )


class OpenAIProvider:
    """Chat completions at ``{base_url}/chat/completions``."""

    name = "openai"

    def __init__(self, client: httpx2.AsyncClient, base_url: str, api_key: str | None) -> None:
        self._client = client
        self.url = base_url.rstrip("/") + "/chat/completions"
        # OpenAI's own API refuses max_tokens for its reasoning models and takes
        # max_completion_tokens for all; compatible servers expect max_tokens.
        host = httpx2.URL(self.url).host
        self._max_tokens_key = "max_completion_tokens" if host == "api.openai.com" else "max_tokens"
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"

    async def aclose(self) -> None:
        """The shared client is closed by its owner, the runtime."""

    async def complete(self, request: CompletionRequest) -> Completion:
        body: dict[str, Any] = {"model": request.model, "messages": request.messages}
        if request.max_tokens is not None:
            body[self._max_tokens_key] = request.max_tokens
        try:
            response = await self._client.post(self.url, json=body, headers=self._headers)
        except httpx2.TimeoutException as exc:
            raise ProviderConnectionError(
                f"{self.url} timed out ({type(exc).__name__})", url=self.url
            ) from exc
        except httpx2.TransportError as exc:
            raise ProviderConnectionError(
                f"cannot reach {self.url}: {exc or type(exc).__name__}", url=self.url
            ) from exc
        if response.status_code >= 400:
            raise self._status_error(response)
        return self._parse(response)

    def _error_in_body(self, response: httpx2.Response, error: object) -> ProviderStatusError:
        """An error inside a 200 response (OpenRouter and some proxies do this)."""
        code = error.get("code") if isinstance(error, dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else 502
        message = error.get("message") if isinstance(error, dict) else error
        return self._status_error(
            response,
            status=status,
            detail=str(message)[:300],
            where=f"{self.url} answered HTTP 200 with an error (treated as {status})",
        )

    def _status_error(
        self,
        response: httpx2.Response,
        *,
        status: int | None = None,
        detail: str | None = None,
        where: str | None = None,
    ) -> ProviderStatusError:
        status = status or response.status_code
        detail = _error_detail(response) if detail is None else detail
        where = where or f"{self.url} answered HTTP {status}"
        message = f"{where}: {detail}" if detail else where
        retry_after = parse_retry_after(response.headers)
        if status in (401, 403):
            return AuthenticationError(
                f"{message}. The provider refused the credentials: check RLM_API_KEY",
                url=self.url,
                status=status,
            )
        if status == 402 or (status == 429 and "insufficient_quota" in response.text):
            return QuotaExceededError(
                f"{message}. The account is out of credit", url=self.url, status=status
            )
        if status == 429:
            return RateLimitError(
                message, url=self.url, status=status, retryable=True, retry_after=retry_after
            )
        return ProviderStatusError(
            message,
            url=self.url,
            status=status,
            retryable=status in _RETRYABLE_STATUS,
            retry_after=retry_after,
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
        except (
            json.JSONDecodeError,
            UnicodeDecodeError,
            KeyError,
            IndexError,
            TypeError,
            AttributeError,
        ) as exc:
            kind = response.headers.get("content-type", "no content-type")
            raise ProviderResponseError(
                f"{self.url} did not answer with a chat completion (HTTP {response.status_code}, "
                f"{kind}): {response.text[:200]!r}",
                url=self.url,
            ) from exc
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
        if isinstance(details, dict) and _count(details.get("cached_tokens")):
            metadata["cached_tokens"] = _count(details.get("cached_tokens"))
        limits = parse_rate_limit_headers(response.headers)
        if limits:
            metadata["ratelimit"] = limits
        return Completion(
            text=clean_text(text),
            model=str(data.get("model") or ""),
            input_tokens=_count(usage.get("prompt_tokens")),
            output_tokens=_count(usage.get("completion_tokens")),
            finish_reason=choice.get("finish_reason") if isinstance(choice, dict) else None,
            metadata=metadata,
        )


def _count(value: object) -> int:
    """A token count from JSON, or 0 when it is missing or not a sane number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if not math.isfinite(value) or value < 0:
        return 0
    return int(value)


def clean_text(text: str) -> str:
    """Replace lone surrogates (valid JSON escapes, invalid text) so the text can travel on."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _error_detail(response: httpx2.Response) -> str:
    try:
        data = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return response.text[:200].strip()
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:300]
    if isinstance(error, str):
        return error[:300]
    return response.text[:200].strip()


def _header_number(headers: httpx2.Headers, *names: str) -> float | None:
    for name in names:
        raw = headers.get(name)
        if raw:
            try:
                return float(raw)
            except ValueError:
                continue
    return None


def parse_rate_limit_headers(headers: httpx2.Headers) -> dict[str, float | str]:
    """Per-minute request and token limits announced by the provider, if any.

    Understands OpenAI-style ``x-ratelimit-limit-*`` and Anthropic-style
    ``anthropic-ratelimit-*-limit`` headers.
    """
    found: dict[str, float | str] = {}
    requests = _header_number(
        headers, "x-ratelimit-limit-requests", "anthropic-ratelimit-requests-limit"
    )
    tokens = _header_number(headers, "x-ratelimit-limit-tokens", "anthropic-ratelimit-tokens-limit")
    if requests:
        found["requests_limit"] = requests
    if tokens:
        found["tokens_limit"] = tokens
    if found:
        found["source"] = "headers"
    return found


def parse_retry_after(headers: httpx2.Headers) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds form)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw:
        try:
            return max(0.0, float(raw))
        except ValueError:
            return None
    return None
