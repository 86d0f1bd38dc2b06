"""HTTP edges of the providers against real loopback servers, through the run's HTTP
client (``make_http_client``, as ``open_providers`` builds it): credentials in the base URL
(Basic auth, never shown), an untrusted certificate and one SSL_CERT_FILE trusts, bodies
that are or are not compressed, a server that closes without answering or answers
nonsense, a refused connection, a server slower than the request timeout.

Each server is a few lines of trio speaking raw HTTP/1.1, so a test controls exactly
what goes over the wire and sees exactly what the provider sent.
"""

from __future__ import annotations

import gzip
import json
import socket
import ssl
from pathlib import Path

import httpx2
import pytest
import trio

from rlm.errors import ProviderConnectionError, ProviderResponseError, ProviderStatusError
from rlm.providers._http import make_http_client
from rlm.providers.base import Completion, CompletionRequest
from rlm.providers.openai import OpenAIProvider
from tests.helpers import serving
from tests.raw_http import header, raw_server, reply, self_signed

REQUEST = CompletionRequest(messages=[{"role": "user", "content": "hi"}], model="m")
CHAT = json.dumps(
    {"model": "m", "choices": [{"message": {"content": "hello"}, "finish_reason": "stop"}]}
).encode()
BASIC_ALICE = b"Basic YWxpY2U6czNjcmV0"  # base64("alice:s3cret")

def run_client(request_timeout: float = 10) -> httpx2.AsyncClient:
    return make_http_client(max_connections=2, request_timeout=request_timeout)


async def ask(provider: OpenAIProvider, streamed: bool) -> Completion:
    async def ignore(text: str) -> None:
        await trio.lowlevel.checkpoint()

    if streamed:
        return await provider.stream(REQUEST, ignore)
    return await provider.complete(REQUEST)


STREAMED = pytest.mark.parametrize("streamed", [False, True])


@STREAMED
async def test_user_and_password_in_the_base_url_are_sent_as_basic_auth(streamed: bool) -> None:
    def only_with_basic_auth(head: bytes) -> bytes:
        if header(head, b"authorization") == BASIC_ALICE:
            return reply("200 OK", CHAT)
        return reply("401 Unauthorized", b'{"error": {"message": "auth required"}}')

    async with raw_server(only_with_basic_auth) as (port, heads), run_client() as client:
        provider = OpenAIProvider(client, f"http://alice:s3cret@127.0.0.1:{port}/v1", None)
        completion = await ask(provider, streamed)
    assert completion.text == "hello"
    assert heads[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert header(heads[0], b"host") == b"127.0.0.1:%d" % port


@STREAMED
async def test_an_error_names_the_url_without_its_credentials(streamed: bool) -> None:
    def broken(head: bytes) -> bytes:
        return reply("503 Service Unavailable", b'{"error": {"message": "overloaded"}}')

    async with raw_server(broken) as (port, _), run_client() as client:
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


@STREAMED
async def test_an_untrusted_certificate_says_so_and_what_to_set(
    untrusted_tls: ssl.SSLContext, streamed: bool
) -> None:
    def fine(head: bytes) -> bytes:
        return reply("200 OK", CHAT)

    async with raw_server(fine, untrusted_tls) as (port, heads), run_client() as client:
        provider = OpenAIProvider(client, f"https://127.0.0.1:{port}/v1", None)
        with pytest.raises(ProviderConnectionError) as caught:
            await ask(provider, streamed)
    message = str(caught.value)
    assert "certificate verify failed" in message and "SSL_CERT_FILE" in message, message
    assert caught.value.retryable is False  # no retry can make it trusted
    assert heads == []


@STREAMED
async def test_a_body_that_does_not_decompress_is_a_response_error(streamed: bool) -> None:
    def corrupt(head: bytes) -> bytes:
        return reply("200 OK", b"not-gzip", b"content-encoding: gzip")

    async with raw_server(corrupt) as (port, _), run_client() as client:
        provider = OpenAIProvider(client, f"http://127.0.0.1:{port}/v1", None)
        with pytest.raises(ProviderResponseError) as caught:
            await ask(provider, streamed)
    assert "cannot be decoded" in str(caught.value)


@pytest.fixture(scope="module")
def trusted_tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, Path]:
    """A server context with a self-signed certificate for 127.0.0.1, and that certificate."""
    made = self_signed(tmp_path_factory.mktemp("tls"), "-addext", "subjectAltName=IP:127.0.0.1")
    if made is None:
        pytest.skip("openssl is not installed: no self-signed certificate can be made")
    cert, key = made
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context, cert


@STREAMED
async def test_a_certificate_that_ssl_cert_file_trusts_is_accepted(
    trusted_tls: tuple[ssl.SSLContext, Path], monkeypatch: pytest.MonkeyPatch, streamed: bool
) -> None:
    server_context, cert = trusted_tls
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    async with raw_server(lambda head: reply("200 OK", CHAT), server_context) as (
        port, heads,
    ), run_client() as client:
        provider = OpenAIProvider(client, f"https://127.0.0.1:{port}/v1", None)
        assert (await ask(provider, streamed)).text == "hello"
    assert heads[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")


@STREAMED
async def test_a_compressed_answer_is_decoded(streamed: bool) -> None:
    def gzipped(head: bytes) -> bytes:
        return reply("200 OK", gzip.compress(CHAT), b"content-encoding: gzip")

    async with raw_server(gzipped) as (port, _), run_client() as client:
        provider = OpenAIProvider(client, f"http://127.0.0.1:{port}/v1", None)
        assert (await ask(provider, streamed)).text == "hello"


@STREAMED
@pytest.mark.parametrize("answer", [b"", b"HTTP/1.1 2OO nonsense\r\n\r\n"])
async def test_a_server_that_closes_or_answers_nonsense_is_a_retryable_connection_error(
    answer: bytes, streamed: bool
) -> None:
    async with raw_server(lambda head: answer) as (port, _), run_client() as client:
        provider = OpenAIProvider(client, f"http://127.0.0.1:{port}/v1", None)
        with pytest.raises(ProviderConnectionError) as caught:
            await ask(provider, streamed)
    assert caught.value.retryable
    assert f"127.0.0.1:{port}/v1/chat/completions" in str(caught.value)


async def test_a_refused_connection_says_what_to_check() -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with run_client() as client:
        provider = OpenAIProvider(client, f"http://127.0.0.1:{port}/v1", None)
        with pytest.raises(ProviderConnectionError, match=r"cannot reach .*base_url") as caught:
            await provider.complete(REQUEST)
    assert caught.value.retryable


async def test_an_answer_slower_than_the_request_timeout_is_a_retryable_timeout() -> None:
    async with serving(sub_latency=5.0) as (url, _), run_client(request_timeout=0.1) as client:
        provider = OpenAIProvider(client, url, None)
        with pytest.raises(ProviderConnectionError, match=r"timed out \(ReadTimeout\)") as caught:
            await provider.complete(REQUEST)
    assert caught.value.retryable


async def test_a_client_for_plain_http_urls_trusts_no_certificate_at_all(
    trusted_tls: tuple[ssl.SSLContext, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Made for http:// endpoints only (a local server), the client loads no CA bundle: it
    # never opens TLS, and were it asked to, verification fails even for a certificate
    # SSL_CERT_FILE trusts.  Made for https://, the same certificate is accepted.
    server_context, cert = trusted_tls
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with raw_server(lambda head: reply("200 OK", CHAT), server_context) as (port, heads):
        tls_url = f"https://127.0.0.1:{port}/v1"
        async with make_http_client(max_connections=2, request_timeout=10,
                                    urls=["http://127.0.0.1:1/v1"]) as plain:
            with pytest.raises(ProviderConnectionError, match="certificate verify failed"):
                await OpenAIProvider(plain, tls_url, None).complete(REQUEST)
        async with make_http_client(max_connections=2, request_timeout=10,
                                    urls=[tls_url]) as verifying:
            answer = await OpenAIProvider(verifying, tls_url, None).complete(REQUEST)
            assert answer.text == "hello"
        # A proxy in the environment may be reached over TLS: the CA bundle is loaded then.
        # (Here it is not used for 127.0.0.1: NO_PROXY.)
        monkeypatch.setenv("https_proxy", "https://proxy.invalid:3128")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        async with make_http_client(max_connections=2, request_timeout=10,
                                    urls=["http://127.0.0.1:1/v1"]) as proxied:
            answer = await OpenAIProvider(proxied, tls_url, None).complete(REQUEST)
            assert answer.text == "hello"
    assert len(heads) == 2
