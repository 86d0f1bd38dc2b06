"""The OpenAI-compatible provider against httpx2.MockTransport: shapes, errors, headers."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx2
import pytest

from rlm.errors import (
    AuthenticationError,
    ProviderResponseError,
    ProviderStatusError,
    QuotaExceededError,
    RateLimitError,
)
from rlm.providers._http import make_http_client
from rlm.providers.base import CompletionRequest
from rlm.providers.openai import OpenAIProvider

URL = "http://llm.test/v1"
Handler = Callable[[httpx2.Request], httpx2.Response]


def provider(handler: Handler) -> OpenAIProvider:
    client = make_http_client(
        max_connections=4, request_timeout=10, transport=httpx2.MockTransport(handler)
    )
    return OpenAIProvider(client, URL, api_key="sk-test")


def request() -> CompletionRequest:
    return CompletionRequest(messages=[{"role": "user", "content": "hi"}], model="m")


def chat(content: object = "hello", usage: object = None, **extra: object) -> dict[str, object]:
    body: dict[str, object] = {
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        **extra,
    }
    if usage is not None:
        body["usage"] = usage
    return body


async def test_a_completion_with_usage_and_the_key_in_the_header_only() -> None:
    seen: list[httpx2.Request] = []

    def handler(req: httpx2.Request) -> httpx2.Response:
        seen.append(req)
        usage = {
            "prompt_tokens": 12,
            "completion_tokens": 3,
            "cost": 0.001,
            "prompt_tokens_details": {"cached_tokens": 4},
        }
        return httpx2.Response(
            200, json=chat(usage=usage), headers={"x-ratelimit-limit-requests": "500",
                                                  "x-ratelimit-remaining-requests": "499"}
        )

    done = await provider(handler).complete(request())
    assert (done.text, done.input_tokens, done.output_tokens) == ("hello", 12, 3)
    assert done.metadata["cost"] == 0.001 and done.metadata["cached_tokens"] == 4
    assert done.metadata["ratelimit"]["requests_limit"] == 500.0
    assert done.metadata["ratelimit"]["requests_remaining"] == 499.0
    assert seen[0].headers["authorization"] == "Bearer sk-test"
    assert b"sk-test" not in seen[0].content
    assert json.loads(seen[0].content) == {"model": "m", "messages": request().messages}


@pytest.mark.parametrize(
    "usage",
    [
        "n/a",
        {"prompt_tokens": "12k"},
        {"prompt_tokens": 1e400},
        {"prompt_tokens": -5, "completion_tokens": True},
    ],
)
async def test_malformed_usage_counts_as_zero_instead_of_crashing(usage: object) -> None:
    def handler(req: httpx2.Request) -> httpx2.Response:
        body = json.dumps(chat(usage=usage)).replace("Infinity", "1e400")
        return httpx2.Response(200, content=body, headers={"content-type": "application/json"})

    done = await provider(handler).complete(request())
    assert done.text == "hello" and done.input_tokens == 0 and done.output_tokens == 0


async def test_lone_surrogates_in_a_reply_are_replaced() -> None:
    def handler(req: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=b'{"choices":[{"message":{"content":"a\\ud83db"}}]}')

    done = await provider(handler).complete(request())
    done.text.encode("utf-8")  # travels on without UnicodeEncodeError
    assert done.text.startswith("a") and done.text.endswith("b")


async def test_lone_surrogates_anywhere_in_a_reply_or_an_error_are_replaced() -> None:
    """A JSON escape such as \\ud800 decodes to text no trace, journal or terminal
    can write: every string a provider hands on is cleaned where it enters."""
    answer = (
        b'{"id":"c\\ud800","model":"m\\ud800","system_fingerprint":"f\\udfff",'
        b'"choices":[{"message":{"content":"ok"},"finish_reason":"stop\\ud800"}]}'
    )
    done = await provider(lambda req: httpx2.Response(200, content=answer)).complete(request())
    assert (done.model, done.finish_reason) == ("m?", "stop?")
    assert (done.metadata["id"], done.metadata["system_fingerprint"]) == ("c?", "f?")
    refusal = b'{"error": {"message": "bad input \\ud800 here"}}'
    with pytest.raises(ProviderStatusError) as caught:
        await provider(lambda req: httpx2.Response(400, content=refusal)).complete(request())
    assert str(caught.value).endswith("answered HTTP 400: bad input ? here")


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (401, {"error": {"message": "bad key"}}, AuthenticationError),
        (402, {"error": {"message": "pay up"}}, QuotaExceededError),
        (429, {"error": {"code": "insufficient_quota", "message": "quota"}}, QuotaExceededError),
        (429, {"error": {"message": "slow down"}}, RateLimitError),
        (400, {"error": {"message": "bad request"}}, ProviderStatusError),
    ],
)
async def test_status_errors_map_to_the_error_tree(
    status: int, body: object, error: type[Exception]
) -> None:
    def handler(req: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, json=body, headers={"retry-after-ms": "1500"})

    with pytest.raises(error) as caught:
        await provider(handler).complete(request())
    assert URL in str(caught.value) and "sk-test" not in str(caught.value)
    if error is RateLimitError:
        assert caught.value.retry_after == 1.5  # type: ignore[attr-defined]
        assert caught.value.retryable  # type: ignore[attr-defined]
    if status == 400:
        assert not caught.value.retryable  # type: ignore[attr-defined]


async def test_an_error_inside_a_200_is_an_error_and_says_so() -> None:
    def handler(req: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json={"error": {"code": 502, "message": "upstream died"}})

    with pytest.raises(ProviderStatusError, match="HTTP 200 with an error") as caught:
        await provider(handler).complete(request())
    assert caught.value.status == 502 and caught.value.retryable


async def test_a_non_json_reply_names_the_url_and_shows_what_came_back() -> None:
    def handler(req: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            200, text="<html>proxy login</html>", headers={"content-type": "text/html"}
        )

    with pytest.raises(ProviderResponseError, match="proxy login") as caught:
        await provider(handler).complete(request())
    assert f"{URL}/chat/completions" in str(caught.value) and "text/html" in str(caught.value)


@pytest.mark.parametrize(
    ("base_url", "key"),
    [
        ("https://api.openai.com/v1", "max_completion_tokens"),
        ("http://vllm.local/v1", "max_tokens"),
    ],
)
async def test_the_output_cap_uses_the_parameter_the_endpoint_accepts(
    base_url: str, key: str
) -> None:
    bodies: list[dict[str, object]] = []

    def handler(req: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(req.content))
        return httpx2.Response(200, json=chat())

    client = make_http_client(
        max_connections=4, request_timeout=10, transport=httpx2.MockTransport(handler)
    )
    capped = CompletionRequest(
        messages=[{"role": "user", "content": "hi"}], model="m", max_tokens=64
    )
    await OpenAIProvider(client, base_url, api_key=None).complete(capped)
    assert bodies[0][key] == 64
    assert ("max_tokens" in bodies[0]) == (key == "max_tokens")
