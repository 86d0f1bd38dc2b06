"""Provider failures a newcomer meets (issue 11, item 9): unknown hosts, refused or missing keys."""

from __future__ import annotations

import socket
from collections.abc import Mapping

import httpx2
import pytest

from rlm._spelling import settings_spelled_as
from rlm.cli._flags import cli_setting
from rlm.errors import AuthenticationError, ProviderConnectionError
from rlm.providers._http import make_http_client, post_json

URL = "https://api.example.test/v1/chat/completions"


def _client(handler: httpx2.MockTransport) -> httpx2.AsyncClient:
    return make_http_client(max_connections=4, request_timeout=10, transport=handler)


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
        ({}, "No API key was sent: pass the key to RLM(api_key=KEY)"),
    ],
)
async def test_a_401_says_whether_a_key_was_sent(headers: dict[str, str], advice: str) -> None:
    async with _client(_answer_401()) as client:
        with pytest.raises(AuthenticationError) as caught:
            await post_json(client, URL, {}, headers)
    message = str(caught.value)
    assert ".." not in message and advice in message
    assert "Incorrect API key provided" in message and "sk-wrong" not in message


@pytest.mark.parametrize(
    ("headers", "advice"),
    [
        ({"Authorization": "Bearer sk-wrong"}, "The provider refused the key: check RLM_API_KEY"),
        ({}, "No API key was sent: set RLM_API_KEY (or OPENAI_API_KEY / ANTHROPIC_API_KEY)"),
    ],
)
async def test_from_the_command_line_a_401_names_the_environment_variables(
    headers: dict[str, str], advice: str
) -> None:
    # The command line takes no key as an argument: the environment is where it comes from.
    async with _client(_answer_401()) as client:
        with settings_spelled_as(cli_setting), pytest.raises(AuthenticationError) as caught:
            await post_json(client, URL, {}, headers)
    assert advice in str(caught.value)


def _answer_403(body: Mapping[str, object] | None) -> httpx2.MockTransport:
    return httpx2.MockTransport(
        lambda request: httpx2.Response(403, json=body) if body else httpx2.Response(403)
    )


@pytest.mark.parametrize(
    ("url", "headers", "sent"),
    [
        (URL, {"Authorization": "Bearer sk-wrong"}, "may not accept the key for it"),
        ("https://***@api.example.test/v1/chat/completions", {},
         "may not accept the user:password in the base URL (shown as ***@) for it"),
        (URL, {}, "No API key was sent: if it wants one, pass the key to RLM(api_key=KEY)"),
    ],
)
async def test_a_403_says_what_the_server_said_and_the_credentials_are_one_possible_cause(
    url: str, headers: dict[str, str], sent: str
) -> None:
    # A 403 is often not about the credentials at all: a policy, a region, a model.
    body = {"error": {"message": "Model m-large is not available in your region."}}
    async with _client(_answer_403(body)) as client:
        with pytest.raises(AuthenticationError) as caught:
            await post_json(client, url, {}, headers)
    message = str(caught.value)
    assert "answered HTTP 403: Model m-large is not available in your region" in message
    assert "The server forbade the request (its message says why)" in message, message
    assert sent in message and "region" in message, message
    assert "refused" not in message and "sk-wrong" not in message, message
    assert caught.value.status == 403 and caught.value.exit_code == 4


async def test_a_403_with_no_message_says_the_server_gave_no_reason() -> None:
    async with _client(_answer_403(None)) as client:
        with pytest.raises(AuthenticationError) as caught:
            await post_json(client, URL, {}, {"Authorization": "Bearer sk-x"})
    message = str(caught.value)
    assert "answered HTTP 403" in message and "(it gave no reason)" in message, message
