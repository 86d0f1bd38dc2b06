"""Plain requests, which the fixture server reads without h11: read as h11 reads them,
answered with h11's bytes, and anything else still left to h11 (real loopback)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import h11
import pytest
import trio

from rlm.testing.plain_http import MAX_PLAIN_HEAD, Need, PlainRequest, RequestHead, parse_plain
from rlm.testing.server import FixtureServer, FixtureServerOptions, _send_all

BODY = json.dumps({"model": "fixture", "messages": [
    {"role": "user", "content": "What is the magic number?\nText:\nThe magic number is 31337."},
]}).encode()


def request(*headers: bytes, method: bytes = b"POST", body: bytes = BODY,
            version: bytes = b"HTTP/1.1") -> bytes:
    lines = [method + b" /v1/chat/completions " + version, *headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def plain_headers(body: bytes = BODY) -> tuple[bytes, ...]:
    return (b"Host: 127.0.0.1:8000", b"Content-Length: " + str(len(body)).encode())


def h11_reads(data: bytes) -> tuple[RequestHead, bytes]:
    """What h11 makes of one whole request."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    event = conn.next_event()
    assert isinstance(event, h11.Request)
    head = RequestHead(event.method, event.target, list(event.headers))
    body = b""
    while not isinstance(event := conn.next_event(), h11.EndOfMessage):
        assert isinstance(event, h11.Data)
        body += event.data
    return head, body


@pytest.mark.parametrize("data", [
    request(*plain_headers()),
    request(b"hOsT:x", b"content-length:   " + str(len(BODY)).encode() + b" \t",
            b"Authorization: Bearer  two  spaces ", b"X-Empty:", b"connection: Keep-Alive"),
    request(b"Host: x", method=b"GET", body=b""),
    request(b"Host: x", b"Content-Length: 0", body=b""),
    request(b"Host: x", b"X-Obs-Text: caf\xc3\xa9", *plain_headers()[1:]),
])
def test_a_plain_request_reads_as_h11_reads_it(data: bytes) -> None:
    found = parse_plain(data + b"GET /next", 1 << 20)  # the next request's start stays
    assert isinstance(found, PlainRequest)
    head, body = h11_reads(data)
    assert found.head == head
    assert data[found.body_start:found.end] == body and found.end == len(data)


@pytest.mark.parametrize("data", [
    request(b"Host: x", b"Expect: 100-continue", *plain_headers()[1:]),
    request(b"Host: x", b"Transfer-Encoding: chunked", body=b"0\r\n\r\n"),
    request(b"Host: x", b"Connection: close", *plain_headers()[1:]),
    request(b"Host: x", b"Upgrade: h2c", *plain_headers()[1:]),
    request(*plain_headers(), version=b"HTTP/1.0"),
    request(*plain_headers(), method=b"PUT"),
    request(b"Content-Length: 2", body=b"{}"),  # no Host
    request(b"Host: x", b"Host: y", b"Content-Length: 2", body=b"{}"),
    request(b"Host: x", b"Content-Length: 2", b"Content-Length: 2", body=b"{}"),
    request(b"Host: x", b"Content-Length: 2, 2", body=b"{}"),
    request(b"Host: x", b"Content-Length: -2", body=b"{}"),
    request(b"Host: x", b"X-Folded: a", b" b", b"Content-Length: 2", body=b"{}"),
    request(b"Host: x", b"Bad Name: a", b"Content-Length: 2", body=b"{}"),
    b"POST /v1/chat/completions HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}",
    b"\x00\x01 not http at all\r\n\r\n",
    b"get / HTTP/1.1\r\nHost: x\r\n\r\n",
])
def test_anything_else_is_left_to_h11(data: bytes) -> None:
    assert parse_plain(data, 1 << 20) is Need.H11


def test_a_request_that_has_not_all_arrived_needs_more_and_a_big_one_is_h11s() -> None:
    data = request(*plain_headers())
    for end in (0, 1, 20, data.index(b"\r\n\r\n") + 2, len(data) - 1):
        assert parse_plain(data[:end], 1 << 20) is Need.MORE, end
    assert parse_plain(data, len(BODY) - 1) is Need.H11  # over the cap: the server's 413
    long_head = request(b"Host: x", b"X-Pad: " + b"a" * MAX_PLAIN_HEAD, body=b"")
    assert parse_plain(long_head[:MAX_PLAIN_HEAD + 1], 1 << 20) is Need.H11
    assert parse_plain(long_head, 1 << 20) is Need.H11


@asynccontextmanager
async def connected(**options: object) -> AsyncIterator[trio.SocketStream]:
    server = FixtureServer(FixtureServerOptions(**options))  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        try:
            yield stream
        finally:
            await stream.aclose()
            nursery.cancel_scope.cancel()


async def responses(stream: trio.SocketStream, count: int) -> list[bytes]:
    """The next ``count`` whole responses (content-length framed) on ``stream``."""
    data = b""
    out: list[bytes] = []
    while len(out) < count:
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(65536)
        head = data[:data.index(b"\r\n\r\n") + 4]
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        while len(data) < len(head) + length:
            data += await stream.receive_some(65536)
        out.append(data[:len(head) + length])
        data = data[len(head) + length:]
    assert data == b""
    return out


#: Replies whose bytes do not change from one request to the next: routes, errors, limits.
PROBES = [
    b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /v2/else HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n",
    request(b"Host: x", b"Content-Length: 9", body=b"{not json"),
    request(*plain_headers()),  # 429: rate_429=1.0
]


async def test_plain_and_h11_connections_get_the_same_bytes() -> None:
    """One connection stays plain; on the other, a first request with ``Expect`` hands
    it to h11 for good: both get the same responses, byte for byte."""
    async with connected(rate_429=1.0) as plain, connected(rate_429=1.0) as via_h11:
        expect = request(b"Host: x", b"Expect: 100-continue", *plain_headers()[1:])
        await via_h11.send_all(expect[:expect.index(b"\r\n\r\n") + 4])
        assert (await via_h11.receive_some(4096)).startswith(b"HTTP/1.1 100 ")
        await via_h11.send_all(BODY)
        assert (await responses(via_h11, 1))[0].startswith(b"HTTP/1.1 429 ")
        for probe in PROBES:
            await plain.send_all(probe)
            await via_h11.send_all(probe)
            mine, h11s = (await responses(plain, 1))[0], (await responses(via_h11, 1))[0]
            assert mine == h11s
        assert mine.startswith(b"HTTP/1.1 429 Too Many Requests\r\n")


async def test_pipelined_plain_requests_are_answered_in_order() -> None:
    async with connected() as stream:
        await stream.send_all(PROBES[0] + PROBES[1] + request(*plain_headers()))
        models, missing, answer = await responses(stream, 3)
        assert models.startswith(b"HTTP/1.1 200 ") and missing.startswith(b"HTTP/1.1 404 ")
        assert b'"content": "31337"' in answer


async def test_a_stream_on_a_plain_connection_then_a_plain_request() -> None:
    """h11 frames a streamed reply; the connection is plain again after it."""
    streamed = json.dumps({**json.loads(BODY), "stream": True}).encode()
    async with connected() as stream:
        await stream.send_all(request(*plain_headers(streamed), body=streamed))
        data = b""
        while not data.endswith(b"0\r\n\r\n"):
            data += await stream.receive_some(65536)
        assert data.startswith(b"HTTP/1.1 200 ") and b"transfer-encoding: chunked" in data.lower()
        assert b"data: [DONE]" in data
        await stream.send_all(request(*plain_headers()))
        assert b'"content": "31337"' in (await responses(stream, 1))[0]


async def test_send_all_writes_what_the_socket_does_not_take_at_once() -> None:
    left, right = trio.socket.socketpair()
    data = bytes(range(256)) * 40_000  # 10 MB: more than a socket buffer
    got = bytearray()

    async def read() -> None:
        reader = trio.SocketStream(right)
        while len(got) < len(data):
            got.extend(await reader.receive_some(1 << 20))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await _send_all(trio.SocketStream(left), data)
    assert bytes(got) == data
    left.close()
    right.close()
