"""The Anthropic Messages provider against httpx2.MockTransport."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx2
import pytest

from rlm import RLM
from rlm.errors import AuthenticationError, ProviderStatusError, QuotaExceededError
from rlm.providers._http import make_http_client
from rlm.providers.anthropic import DEFAULT_MAX_TOKENS, AnthropicProvider
from rlm.providers.base import CompletionRequest

Handler = Callable[[httpx2.Request], httpx2.Response]


def provider(handler: Handler, base_url: str = "https://api.anthropic.com") -> AnthropicProvider:
    client = make_http_client(
        max_connections=4, request_timeout=10, transport=httpx2.MockTransport(handler)
    )
    return AnthropicProvider(client, base_url, api_key="sk-ant-test")


def message(text: str = "hello") -> dict[str, object]:
    return {
        "id": "msg_1",
        "type": "message",
        "model": "claude-sonnet-4",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 20, "output_tokens": 5, "cache_read_input_tokens": 30},
    }


async def test_system_messages_become_the_system_field_and_the_key_a_header() -> None:
    seen: list[httpx2.Request] = []

    def handler(req: httpx2.Request) -> httpx2.Response:
        seen.append(req)
        return httpx2.Response(
            200, json=message(), headers={"anthropic-ratelimit-requests-limit": "50",
                                            "anthropic-ratelimit-requests-remaining": "49"}
        )

    request = CompletionRequest(
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "again"},
        ],
        model="claude-sonnet-4",
    )
    done = await provider(handler).complete(request)
    body = json.loads(seen[0].content)
    assert str(seen[0].url) == "https://api.anthropic.com/v1/messages"
    assert body["system"] == "be brief" and body["max_tokens"] == DEFAULT_MAX_TOKENS
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert seen[0].headers["x-api-key"] == "sk-ant-test"
    assert seen[0].headers["anthropic-version"] and "authorization" not in seen[0].headers
    assert (done.text, done.input_tokens, done.output_tokens) == ("hello", 50, 5)
    assert done.metadata["cached_tokens"] == 30
    assert done.metadata["ratelimit"]["requests_limit"] == 50.0
    assert done.metadata["ratelimit"]["requests_remaining"] == 49.0


@pytest.mark.parametrize(
    ("status", "body", "error", "retryable"),
    [
        (
            529,
            {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
            ProviderStatusError,
            True,
        ),
        (
            401,
            {"type": "error", "error": {"type": "authentication_error", "message": "no"}},
            AuthenticationError,
            False,
        ),
        (
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "Your credit balance is too low",
                },
            },
            QuotaExceededError,
            False,
        ),
        (
            400,
            {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}},
            ProviderStatusError,
            False,
        ),
    ],
)
async def test_errors_map_to_the_error_tree(
    status: int, body: object, error: type[Exception], retryable: bool
) -> None:
    def handler(req: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, json=body)

    request = CompletionRequest(messages=[{"role": "user", "content": "hi"}], model="m")
    with pytest.raises(error) as caught:
        await provider(handler, "https://proxy.test/v1").complete(request)
    assert type(caught.value) is error
    assert caught.value.retryable is retryable  # type: ignore[attr-defined]
    assert "sk-ant-test" not in str(caught.value)
    assert "https://proxy.test/v1/messages" in str(caught.value)


def test_anthropic_needs_no_base_url_but_a_model() -> None:
    assert RLM(provider="anthropic", model="claude-sonnet-4").config.base_url is None
    from rlm.errors import UsageError

    with pytest.raises(UsageError, match="pass model="):
        RLM(provider="anthropic", model="")
