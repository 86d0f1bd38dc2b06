"""Provider failures a newcomer meets (issue 11, item 9): unknown hosts, refused or missing keys."""

from __future__ import annotations

import socket

import httpx2
import pytest

from rlm.errors import AuthenticationError, ProviderConnectionError
from rlm.providers._http import post_json

URL = "https://api.example.test/v1/chat/completions"


def _client(handler: httpx2.MockTransport) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=handler)


def _raise_dns(code: int, text: str) -> httpx2.MockTransport:
    def handler(request: httpx2.Request) -> httpx2.Response:
        try:
            raise socket.gaierror(code, text)
        except socket.gaierror as exc:
            raise httpx2.ConnectError(f"[Errno {code}] {text}", request=request) from exc

    return httpx2.MockTransport(handler)


async def test_an_unknown_host_is_not_retried() -> None:
    async with _client(_raise_dns(socket.EAI_NONAME, "Name or service not known")) as client:
        with pytest.raises(ProviderConnectionError) as caught:
            await post_json(client, URL, {}, {})
    assert caught.value.retryable is False
    assert "does not resolve" in str(caught.value) and "check base_url" in str(caught.value)


async def test_a_resolver_that_timed_out_is_retried() -> None:
    async with _client(_raise_dns(socket.EAI_AGAIN, "Temporary failure")) as client:
        with pytest.raises(ProviderConnectionError) as caught:
            await post_json(client, URL, {}, {})
    assert caught.value.retryable is True


def _answer_401() -> httpx2.MockTransport:
    body = {"error": {"message": "Incorrect API key provided."}}
    return httpx2.MockTransport(lambda request: httpx2.Response(401, json=body))


@pytest.mark.parametrize(
    ("headers", "advice"),
    [
        ({"Authorization": "Bearer sk-wrong"}, "The provider refused the key"),
        ({}, "No API key was sent: set RLM_API_KEY"),
    ],
)
async def test_a_401_says_whether_a_key_was_sent(headers: dict[str, str], advice: str) -> None:
    async with _client(_answer_401()) as client:
        with pytest.raises(AuthenticationError) as caught:
            await post_json(client, URL, {}, headers)
    message = str(caught.value)
    assert ".." not in message and advice in message
    assert "Incorrect API key provided" in message and "sk-wrong" not in message
