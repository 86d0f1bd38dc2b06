"""When the fixture server's latency starts: at the request's arrival (virtual time,
over an in-memory stream: no socket under the autojumping clock; and over a real
loopback socket, with the real clock)."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
import trio
import trio.testing

from rlm.testing.arrival import stamps_arrivals
from rlm.testing.server import FixtureServer, FixtureServerOptions

BODY = json.dumps({
    "model": "fixture",
    "messages": [{"role": "user", "content": "What is the magic number?\nthe magic number is 7"}],
}).encode()
HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: fixture\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\n\r\n" % len(BODY)
)


async def reply_after(
    body_delay: float, slept: list[float] | None = None
) -> tuple[float, bytes]:
    """Send the head, then the body ``body_delay`` s later; when the reply's first
    bytes came (seconds after the head) and the reply.  The server's sleeps go to
    ``slept``."""

    async def sleep(seconds: float) -> None:
        (slept if slept is not None else []).append(seconds)
        await trio.sleep(seconds)

    server = FixtureServer(FixtureServerOptions(sub_latency=1.0), sleep=sleep)
    client, served = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server._handle_connection, served)
        start = trio.current_time()
        await client.send_all(HEAD)
        await trio.sleep(body_delay)
        await client.send_all(BODY)
        reply = await client.receive_some()
        took = trio.current_time() - start
        await client.aclose()
    return took, bytes(reply)


async def test_the_latency_counts_from_the_first_bytes_of_the_request(
    autojump_clock: object,
) -> None:
    slept: list[float] = []
    took, reply = await reply_after(0.25, slept)
    assert slept == [0.75]  # through the sleep it was given (a timerfd in rlm fixture-server)
    # As a provider's: a request that is slow to arrive is not answered any later
    # than its latency after it began to arrive, and the server's own work is inside it.
    assert took == 1.0
    assert reply.startswith(b"HTTP/1.1 200") and b'"content":"7"' in reply.replace(b" ", b"")


async def test_a_request_slower_than_the_latency_is_answered_once_whole(
    autojump_clock: object,
) -> None:
    took, _ = await reply_after(1.5)
    assert took == 1.5


@pytest.mark.skipif(not stamps_arrivals(), reason="sockets here cannot say when bytes arrived")
async def test_over_a_socket_the_latency_counts_from_when_the_bytes_reached_the_host() -> None:
    """A server busy when a request arrives (its thread blocked here) still answers it
    its latency after the bytes came, not after it got round to reading them."""
    slept: list[float] = []
    sleeping = trio.Event()

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        sleeping.set()
        await trio.sleep(seconds)

    server = FixtureServer(FixtureServerOptions(sub_latency=0.5), sleep=sleep)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        go, sent = threading.Event(), threading.Event()

        def client() -> None:
            with socket.create_connection(("127.0.0.1", port)) as sock:
                go.wait(5.0)
                sock.sendall(HEAD + BODY)
                sent.set()
                sock.recv(65536)

        nursery.start_soon(trio.to_thread.run_sync, client)
        await trio.sleep(0.05)  # connected (and accepted)
        go.set()
        # The server's thread is busy (blocked) while the request arrives.
        time.sleep(0.25)  # noqa: ASYNC251
        assert sent.is_set()
        await sleeping.wait()
        nursery.cancel_scope.cancel()
    assert slept[0] <= 0.5 - 0.2  # the 0.25 s it was busy counted as latency
