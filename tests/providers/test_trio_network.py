"""The HTTP pool's network streams (rlm/providers/_trio_network.py) raise httpcore2's
errors for what trio's raise, as httpcore2's own trio backend does: over real loopback
sockets (no fake clock)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpcore2
import pytest
import trio

from rlm.providers._trio_network import TrioNetwork


@asynccontextmanager
async def listener() -> AsyncIterator[tuple[int, trio.MemoryReceiveChannel[trio.SocketStream]]]:
    """A loopback listener; the connections it accepts arrive on the channel."""
    send, receive = trio.open_memory_channel[trio.SocketStream](8)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def accept() -> None:
        while True:
            await send.send(await listeners[0].accept())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(accept)
        yield port, receive
        nursery.cancel_scope.cancel()
    for one in listeners:
        await one.aclose()


async def test_a_refused_connection_is_a_connect_error() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    await listeners[0].aclose()  # nothing listens there now
    with pytest.raises(httpcore2.ConnectError):
        await TrioNetwork().connect_tcp("127.0.0.1", port, timeout=5.0)


async def test_reads_and_writes_pass_bytes_and_a_silent_peer_is_a_read_timeout() -> None:
    async with listener() as (port, accepted):
        stream = await TrioNetwork().connect_tcp("127.0.0.1", port, timeout=5.0)
        peer = await accepted.receive()
        await stream.write(b"ping", timeout=5.0)
        assert await peer.receive_some(16) == b"ping"
        await peer.send_all(b"pong")
        assert await stream.read(16, timeout=5.0) == b"pong"
        assert stream.get_extra_info("is_readable") is False
        assert stream.get_extra_info("server_addr")[1] == port
        with pytest.raises(httpcore2.ReadTimeout):
            await stream.read(16, timeout=0.05)
        await peer.aclose()
        assert stream.get_extra_info("is_readable") is True  # at EOF
        assert await stream.read(16, timeout=5.0) == b""
        await stream.aclose()


async def test_a_closed_stream_is_a_read_and_a_write_error() -> None:
    async with listener() as (port, accepted):
        stream = await TrioNetwork().connect_tcp("127.0.0.1", port, timeout=5.0)
        await accepted.receive()
        await stream.aclose()
        with pytest.raises(httpcore2.WriteError):
            await stream.write(b"late", timeout=5.0)
        with pytest.raises(httpcore2.ReadError):
            await stream.read(16, timeout=5.0)


async def test_a_negative_timeout_is_refused_as_trio_refuses_it() -> None:
    async with listener() as (port, accepted):
        stream = await TrioNetwork().connect_tcp("127.0.0.1", port, timeout=5.0)
        await accepted.receive()
        with pytest.raises(ValueError, match="non-negative"):
            await stream.read(16, timeout=-1.0)
        await stream.aclose()
