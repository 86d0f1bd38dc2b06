"""The pool's own HTTP/1.1 connection (rlm/providers/_h11_connection.py), over real
loopback sockets against the fixture server (no fake clock)."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Protocol

import httpcore2
import pytest
import trio

from rlm.providers._pool import ConnectionPool
from tests.helpers import serving
from tests.raw_http import raw_server, reply, self_signed

BODY = (b'{"model":"fixture","messages":[{"role":"user","content":'
        b'"What is the magic number?\\nthe magic number is 7"}]}')


def chat(url: str, *, read: float | None = None) -> httpcore2.Request:
    return httpcore2.Request(
        b"POST",
        url + "/chat/completions",
        headers=[(b"Host", b"127.0.0.1"), (b"Content-Type", b"application/json"),
                 (b"Content-Length", b"%d" % len(BODY))],
        content=BODY,
        extensions={"timeout": {"connect": 5.0, "read": read, "write": 5.0, "pool": 5.0}},
    )


async def post_streamed(pool: ConnectionPool, url: str, *, read: float | None = None) -> bytes:
    """A request through httpcore2's interface (httpx2's client, streaming)."""
    response = await pool.handle_async_request(chat(url, read=read))
    try:
        await response.aread()
    finally:
        await response.aclose()
    assert response.status == 200
    return response.content


async def post_whole(pool: ConnectionPool, url: str, *, read: float | None = None) -> bytes:
    """The same request as one exchange (the direct POST's path)."""
    request = chat(url, read=read)
    status, _, body = await pool.exchange(
        request.url.origin, request.url.target, request.headers, BODY,
        request.extensions["timeout"],
    )
    assert status == 200
    return body


class Post(Protocol):
    async def __call__(
        self, pool: ConnectionPool, url: str, *, read: float | None = None
    ) -> bytes: ...


@pytest.fixture(params=["streamed", "whole"])
def post(request: pytest.FixtureRequest) -> Post:
    """Each test runs over both of the pool's ways to send a request."""
    return post_streamed if request.param == "streamed" else post_whole


async def test_keep_alive_serves_requests_in_turn_on_one_connection(post: Post) -> None:
    async with serving() as (url, server), ConnectionPool(
        max_connections=4, keepalive_expiry=5.0
    ) as pool:
        for _ in range(3):
            assert b'"7"' in (await post(pool, url)).replace(b" ", b"")
        assert server.stats.connections == 1 and pool.connections == 1


async def test_an_expired_connection_is_not_reused(post: Post) -> None:
    async with serving() as (url, server), ConnectionPool(
        max_connections=4, keepalive_expiry=0.0
    ) as pool:
        await post(pool, url)
        await trio.sleep(0.01)  # past its keep-alive of 0 s
        await post(pool, url)
        assert server.stats.connections == 2


async def test_a_body_closed_before_its_end_closes_the_connection() -> None:
    async with serving() as (url, server), ConnectionPool(
        max_connections=4, keepalive_expiry=5.0
    ) as pool:
        response = await pool.handle_async_request(chat(url))
        await response.aclose()  # nothing of the body read
        assert pool.connections == 0 and pool.in_flight == 0
        await post_streamed(pool, url)  # a fresh connection: the old one may hold half an answer
        assert server.stats.connections == 2


async def test_a_read_timeout_is_httpcores_and_closes_the_connection(post: Post) -> None:
    async with serving(sub_latency=5.0) as (url, _), ConnectionPool(
        max_connections=4, keepalive_expiry=5.0
    ) as pool:
        with pytest.raises(httpcore2.ReadTimeout):
            await post(pool, url, read=0.05)
        assert pool.connections == 0 and pool.in_flight == 0


async def test_a_cancelled_request_closes_its_connection(post: Post) -> None:
    async with serving(sub_latency=5.0) as (url, _), ConnectionPool(
        max_connections=4, keepalive_expiry=5.0
    ) as pool:
        with trio.move_on_after(0.05):
            await post(pool, url)
        assert pool.connections == 0 and pool.in_flight == 0


async def test_a_server_that_closes_without_answering_is_a_protocol_error(post: Post) -> None:
    async with serving(drop=1.0) as (url, _), ConnectionPool(
        max_connections=4, keepalive_expiry=5.0
    ) as pool:
        with pytest.raises(httpcore2.RemoteProtocolError, match="without sending a response"):
            await post(pool, url)
        assert pool.connections == 0


async def test_a_malformed_answer_is_a_protocol_error(post: Post) -> None:
    async with (
        raw_server(lambda head: b"HTTP/1.1 2OO nonsense\r\n\r\n") as (port, _),
        ConnectionPool(max_connections=2, keepalive_expiry=5.0) as pool,
    ):
        with pytest.raises(httpcore2.RemoteProtocolError):
            await post(pool, f"http://127.0.0.1:{port}/v1")
        assert pool.connections == 0


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


async def test_https_speaks_http11_over_tls_with_the_pools_context(
    post: Post,
    trusted_tls: tuple[ssl.SSLContext, Path],
) -> None:
    server_context, cert = trusted_tls
    server_context.set_alpn_protocols(["http/1.1"])
    async with raw_server(lambda head: reply("200 OK", b'{"ok":1}'), server_context) as (
        port, heads,
    ):
        client_context = ssl.create_default_context(cafile=str(cert))
        async with ConnectionPool(
            max_connections=2, keepalive_expiry=5.0, ssl_context=client_context
        ) as pool:
            assert await post(pool, f"https://127.0.0.1:{port}/v1") == b'{"ok":1}'
    assert heads[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
