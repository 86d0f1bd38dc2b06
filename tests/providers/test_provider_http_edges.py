"""HTTP edges of the providers against real loopback servers: credentials in the base URL
(Basic auth, never shown), an untrusted certificate, a body that does not decompress.

Each server is a few lines of trio speaking raw HTTP/1.1, so a test controls exactly
what goes over the wire and sees exactly what the provider sent.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest
import trio

from rlm.errors import ProviderConnectionError, ProviderResponseError, ProviderStatusError
from rlm.providers._http import make_http_client
from rlm.providers.base import Completion, CompletionRequest
from rlm.providers.openai import OpenAIProvider
from tests.raw_http import header, raw_server, reply, self_signed

REQUEST = CompletionRequest(messages=[{"role": "user", "content": "hi"}], model="m")
CHAT = json.dumps(
    {"model": "m", "choices": [{"message": {"content": "hello"}, "finish_reason": "stop"}]}
).encode()
BASIC_ALICE = b"Basic YWxpY2U6czNjcmV0"  # base64("alice:s3cret")

def run_client() -> httpx2.AsyncClient:
    return make_http_client(max_connections=2, request_timeout=10, tls=False)


# The run's own client (the direct POST below httpx2's client) and any other client.
CLIENTS = pytest.mark.parametrize("make_client", [run_client, httpx2.AsyncClient])


async def ask(provider: OpenAIProvider, streamed: bool) -> Completion:
    async def ignore(text: str) -> None:
        await trio.lowlevel.checkpoint()

    if streamed:
        return await provider.stream(REQUEST, ignore)
    return await provider.complete(REQUEST)


@CLIENTS
@pytest.mark.parametrize("streamed", [False, True])
async def test_user_and_password_in_the_base_url_are_sent_as_basic_auth(
    make_client: Callable[[], httpx2.AsyncClient], streamed: bool
) -> None:
    def only_with_basic_auth(head: bytes) -> bytes:
        if header(head, b"authorization") == BASIC_ALICE:
            return reply("200 OK", CHAT)
        return reply("401 Unauthorized", b'{"error": {"message": "auth required"}}')

    async with raw_server(only_with_basic_auth) as (port, heads), make_client() as client:
        provider = OpenAIProvider(client, f"http://alice:s3cret@127.0.0.1:{port}/v1", None)
        completion = await ask(provider, streamed)
    assert completion.text == "hello"
    assert heads[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert header(heads[0], b"host") == b"127.0.0.1:%d" % port


@CLIENTS
@pytest.mark.parametrize("streamed", [False, True])
async def test_an_error_names_the_url_without_its_credentials(
    make_client: Callable[[], httpx2.AsyncClient], streamed: bool
) -> None:
    def broken(head: bytes) -> bytes:
        return reply("503 Service Unavailable", b'{"error": {"message": "overloaded"}}')

    async with raw_server(broken) as (port, _), make_client() as client:
        provider = OpenAIProvider(client, f"http://alice:s3cret@127.0.0.1:{port}/v1", None)
        with pytest.raises(ProviderStatusError) as caught:
            await ask(provider, streamed)
    assert f"http://***@127.0.0.1:{port}/v1/chat/completions answered HTTP 503" in str(caught.value)
    assert "s3cret" not in str(caught.value) and "s3cret" not in caught.value.url


@pytest.fixture(scope="module")
def untrusted_tls(tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    """A server context with a fresh self-signed certificate (trusted by no CA bundle)."""
    made = self_signed(tmp_path_factory.mktemp("tls"))
    if made is None:
        pytest.skip("openssl is not installed: no self-signed certificate can be made")
    cert, key = made
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(Path(cert), Path(key))
    return context


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("streamed", [False, True])
async def test_an_untrusted_certificate_says_so_and_what_to_set(
    untrusted_tls: ssl.SSLContext, direct: bool, streamed: bool
) -> None:
    def fine(head: bytes) -> bytes:
        return reply("200 OK", CHAT)

    client = (
        make_http_client(max_connections=2, request_timeout=10) if direct else httpx2.AsyncClient()
    )
    async with raw_server(fine, untrusted_tls) as (port, heads), client:
        provider = OpenAIProvider(client, f"https://127.0.0.1:{port}/v1", None)
        with pytest.raises(ProviderConnectionError) as caught:
            await ask(provider, streamed)
    message = str(caught.value)
    assert "certificate verify failed" in message and "SSL_CERT_FILE" in message, message
    assert caught.value.retryable is False  # no retry can make it trusted
    assert heads == []


@CLIENTS
@pytest.mark.parametrize("streamed", [False, True])
async def test_a_body_that_does_not_decompress_is_a_response_error(
    make_client: Callable[[], httpx2.AsyncClient], streamed: bool
) -> None:
    def corrupt(head: bytes) -> bytes:
        return reply("200 OK", b"not-gzip", b"content-encoding: gzip")

    async with raw_server(corrupt) as (port, _), make_client() as client:
        provider = OpenAIProvider(client, f"http://127.0.0.1:{port}/v1", None)
        with pytest.raises(ProviderResponseError) as caught:
            await ask(provider, streamed)
    assert "cannot be decoded" in str(caught.value)
