"""A reply of 100 MB against the response cap (``max_response_bytes``), over real loopback.

The server sends 100 MB, streamed or whole, announced or not, and counts what the
kernel took from it; the provider must stop at its cap with an error naming the
setting, holding no more than the cap: measured with tracemalloc (what Python held),
not with a clock.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio

from rlm.errors import ProviderResponseError
from rlm.providers._http import ResponseLimits, make_http_client
from rlm.providers.anthropic import AnthropicProvider
from rlm.providers.base import CompletionRequest
from rlm.providers.openai import OpenAIProvider
from tests.raw_http import read_head

REQUEST = CompletionRequest(messages=[{"role": "user", "content": "hi"}], model="m")
HUGE = 100 * 2**20
CAP = 1 * 2**20
PIECE = 16 * 2**10


def _whole_chunks() -> tuple[bytes, bytes, bytes]:
    """The JSON reply around a 100 MB content: its head, one repeated chunk, its tail."""
    head = b'{"model": "m", "choices": [{"message": {"content": "'
    tail = b'"}, "finish_reason": "stop"}]}'
    return head, b"x" * 65536, tail


def _event() -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"content": "x" * PIECE}}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class HugeServer:
    """Answers every request with 100 MB (``announced``: with a content-length)."""

    def __init__(self, *, streamed: bool, announced: bool, one_event: bool = False) -> None:
        self.streamed = streamed
        self.announced = announced
        self.one_event = one_event  # streamed: one event of 100 MB, never ended
        self.sent = 0  # bytes the kernel accepted from us

    def _head(self) -> bytes:
        kind = b"text/event-stream" if self.streamed else b"application/json"
        lines = [b"HTTP/1.1 200 OK", b"content-type: " + kind, b"connection: close"]
        if self.announced:
            head, _, tail = _whole_chunks()
            lines.append(b"content-length: %d" % (len(head) + HUGE + len(tail)))
        return b"\r\n".join(lines) + b"\r\n\r\n"

    async def handle(self, stream: trio.abc.Stream) -> None:
        try:
            if await read_head(stream) is None:
                return
            await self._send(stream, self._head())
            if self.one_event:
                await self._send(stream, b"data: ")
                for _ in range(HUGE // 65536):
                    await self._send(stream, b"x" * 65536)
            elif self.streamed:
                event = _event()
                for _ in range(HUGE // len(event)):
                    await self._send(stream, event)
            else:
                head, chunk, tail = _whole_chunks()
                await self._send(stream, head)
                for _ in range(HUGE // len(chunk)):
                    await self._send(stream, chunk)
                await self._send(stream, tail)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client stopped reading: what we want
        finally:
            await trio.aclose_forcefully(stream)

    async def _send(self, stream: trio.abc.Stream, data: bytes) -> None:
        await stream.send_all(data)
        self.sent += len(data)


@asynccontextmanager
async def huge_server(server: HugeServer) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1"))
        yield f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/v1"
        nursery.cancel_scope.cancel()


async def keep(text: str) -> None:
    await trio.lowlevel.checkpoint()


async def _ask(provider: OpenAIProvider, streamed: bool) -> None:
    if streamed:
        await provider.stream(REQUEST, keep)
    else:
        await provider.complete(REQUEST)


@pytest.mark.parametrize(
    ("streamed", "announced"), [(False, True), (False, False), (True, False)],
    ids=["whole-with-length", "whole-until-close", "streamed"],
)
async def test_a_100_mb_reply_stops_at_the_cap_with_an_error_naming_it(
    streamed: bool, announced: bool
) -> None:
    server = HugeServer(streamed=streamed, announced=announced)
    async with huge_server(server) as url, make_http_client(
        max_connections=2, request_timeout=30
    ) as client:
        provider = OpenAIProvider(client, url, None, limits=ResponseLimits(max_response_bytes=CAP))
        tracemalloc.start()
        try:
            with pytest.raises(ProviderResponseError) as caught:
                await _ask(provider, streamed)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    message = str(caught.value)
    assert "max_response_bytes (1MiB)" in message and "nothing more of it was read" in message
    assert ("of 100MiB" in message) == announced  # announced: refused before reading it
    assert caught.value.retryable is False  # the same request would get the same reply
    assert peak < 4 * CAP, f"held {peak:,} bytes for a cap of {CAP:,}"
    # The client hung up at the cap: the kernel took a few socket buffers more, not 100 MB.
    assert server.sent < HUGE // 4, f"the server got {server.sent:,} bytes out"


@pytest.mark.parametrize("one_event", [False, True], ids=["many-events", "one-event"])
async def test_an_anthropic_stream_past_the_cap_fails_the_same_way(one_event: bool) -> None:
    server = HugeServer(streamed=True, announced=False, one_event=one_event)
    async with huge_server(server) as url, make_http_client(
        max_connections=2, request_timeout=30
    ) as client:
        provider = AnthropicProvider(
            client, url, "k", limits=ResponseLimits(max_response_bytes=CAP)
        )
        with pytest.raises(ProviderResponseError, match="max_response_bytes"):
            await provider.stream(REQUEST, keep)
    assert server.sent < HUGE // 4
