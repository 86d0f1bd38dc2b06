"""An endpoint that sends one byte a second for ever: each read is quick, the response
never ends.  ``request_timeout`` bounds the whole attempt, its response included.

Virtual time through an httpx2 MockTransport (whose body trickles on trio's clock), and
one real loopback server with a short limit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

import httpx2
import pytest
import trio
import trio.testing

from rlm.errors import ProviderConnectionError
from rlm.providers._http import ResponseLimits, make_http_client
from rlm.providers.base import CompletionRequest
from rlm.providers.openai import OpenAIProvider
from tests.raw_http import read_head

REQUEST = CompletionRequest(messages=[{"role": "user", "content": "hi"}], model="m")
STREAMED = pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])


class Trickle(httpx2.AsyncByteStream):
    """One byte a second, for ever: JSON whitespace, or SSE blank lines (no event)."""

    def __init__(self, byte: bytes) -> None:
        self.byte = byte
        self.sent = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            await trio.sleep(1)
            self.sent += 1
            yield self.byte


async def keep(text: str) -> None:
    await trio.lowlevel.checkpoint()


@STREAMED
async def test_a_response_trickling_for_ever_ends_at_the_request_timeout(
    streamed: bool, autojump_clock: trio.testing.MockClock
) -> None:
    kind = "text/event-stream" if streamed else "application/json"
    trickle = Trickle(b"\n" if streamed else b" ")

    async def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": kind}, stream=trickle)

    transport = httpx2.MockTransport(handler)
    async with make_http_client(
        max_connections=2, request_timeout=30, transport=transport
    ) as client:
        limits = ResponseLimits(request_timeout=30, stream_idle_timeout=5)
        provider = OpenAIProvider(client, "http://model.test/v1", None, limits=limits)
        started = trio.current_time()
        with trio.move_on_after(3600) as guard, pytest.raises(ProviderConnectionError) as caught:
            if streamed:
                await provider.stream(REQUEST, keep)
            else:
                await provider.complete(REQUEST)
    assert not guard.cancelled_caught, "the attempt was still reading after an hour"
    assert trio.current_time() - started == pytest.approx(30)
    assert 25 <= trickle.sent <= 31  # every read was quick: only the whole was too long
    message = str(caught.value)
    assert "did not finish its response within 30 s (request_timeout" in message, message
    assert caught.value.retryable  # a slow answer may be quicker next time


async def _one_byte_at_a_time(stream: trio.abc.Stream) -> None:
    try:
        if await read_head(stream) is None:
            return
        await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
        while True:
            await trio.sleep(0.1)
            await stream.send_all(b"\n")
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the client gave up: what we want
    finally:
        await trio.aclose_forcefully(stream)


async def test_a_real_trickling_stream_ends_at_a_short_request_timeout() -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            partial(trio.serve_tcp, _one_byte_at_a_time, 0, host="127.0.0.1")
        )
        url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/v1"
        async with make_http_client(max_connections=2, request_timeout=10) as client:
            provider = OpenAIProvider(
                client, url, None, limits=ResponseLimits(request_timeout=0.5)
            )
            with trio.fail_after(30), pytest.raises(
                ProviderConnectionError, match=r"within 0\.5 s \(request_timeout; 0 chars"
            ):
                await provider.stream(REQUEST, keep)
        nursery.cancel_scope.cancel()
