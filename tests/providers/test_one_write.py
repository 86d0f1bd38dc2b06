"""A request in one write (rlm/providers/_one_write.py).

Unit tests hold an in-process fake stream; the loopback test counts what the
fixture server receives for a real request through the run's HTTP client.
"""

from __future__ import annotations

from collections.abc import Iterable

import httpcore2
import trio

from rlm.providers._http import make_http_client
from rlm.providers._one_write import FLUSH_BYTES, OneWriteBackend, OneWriteStream
from rlm.providers.base import CompletionRequest
from rlm.providers.openai import OpenAIProvider
from tests.helpers import serving


class FakeStream(httpcore2.AsyncNetworkStream):
    """Records each write; reads answer ``reply``; a write may be set to fail."""

    def __init__(self, reply: bytes = b"HTTP/1.1 200 OK\r\n") -> None:
        self.writes: list[bytes] = []
        self.reply = reply
        self.fail_writes = False
        self.closed = False

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        await trio.lowlevel.checkpoint()
        return self.reply

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await trio.lowlevel.checkpoint()
        if self.fail_writes:
            raise httpcore2.WriteError("connection reset")
        self.writes.append(buffer)

    async def aclose(self) -> None:
        self.closed = True

    def get_extra_info(self, info: str) -> object:
        return "seen" if info == "is_readable" else None


class FakeDialer(httpcore2.AsyncNetworkBackend):
    def __init__(self) -> None:
        self.dialled: list[FakeStream] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's backend interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> FakeStream:
        await trio.lowlevel.checkpoint()
        self.dialled.append(FakeStream())
        return self.dialled[-1]


async def test_head_and_body_go_out_in_one_write_before_the_first_read() -> None:
    inner = FakeStream()
    stream = OneWriteStream(inner)
    await stream.write(b"POST / HTTP/1.1\r\n\r\n")
    await stream.write(b"")
    await stream.write(b'{"a": 1}')
    assert inner.writes == []  # held: the request is not complete yet
    assert await stream.read(100) == inner.reply
    assert inner.writes == [b'POST / HTTP/1.1\r\n\r\n{"a": 1}']
    await stream.read(100)  # nothing held: nothing written again
    assert len(inner.writes) == 1
    assert stream.get_extra_info("is_readable") == "seen"


async def test_a_large_body_is_not_held_whole() -> None:
    inner = FakeStream()
    stream = OneWriteStream(inner)
    await stream.write(b"h" * 100)
    await stream.write(b"b" * FLUSH_BYTES)
    assert [len(w) for w in inner.writes] == [100 + FLUSH_BYTES]
    await stream.write(b"tail")
    await stream.read(10)
    assert inner.writes[1:] == [b"tail"]


async def test_a_failed_write_is_left_to_the_read_as_httpcore_does() -> None:
    inner = FakeStream()
    inner.fail_writes = True
    stream = OneWriteStream(inner)
    await stream.write(b"request")
    # The read still happens: a server that closed early may have answered.
    assert await stream.read(100) == inner.reply
    inner.fail_writes = False
    await stream.read(100)
    assert inner.writes == []  # what failed is not sent again


async def test_closing_drops_what_is_held() -> None:
    inner = FakeStream()
    stream = OneWriteStream(inner)
    await stream.write(b"never sent")
    await stream.aclose()
    assert inner.closed and inner.writes == []


async def test_the_backend_wraps_every_stream_it_dials() -> None:
    dialer = FakeDialer()
    backend = OneWriteBackend(dialer)
    stream = await backend.connect_tcp("h", 80)
    assert isinstance(stream, OneWriteStream)
    await stream.write(b"a")
    await stream.write(b"b")
    await stream.read(1)
    assert dialer.dialled[0].writes == [b"ab"]


async def test_the_server_receives_each_request_in_one_read() -> None:
    """Over loopback, through the run's HTTP client, the server reads each request
    whole: its head and its body arrive together."""
    async with serving() as (url, server):
        async with make_http_client(
            max_connections=2, request_timeout=10, tls=False, network=OneWriteBackend()
        ) as client:
            provider = OpenAIProvider(client, url, None)
            request = CompletionRequest(
                messages=[{"role": "user", "content": "What is the magic number? " + "x" * 5000}],
                model="fixture",
            )
            for _ in range(3):
                completion = await provider.complete(request)
                assert completion.text == "NOT FOUND"
        assert server.stats.total_requests == 3 and server.stats.reads == 3
