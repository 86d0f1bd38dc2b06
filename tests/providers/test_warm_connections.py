"""Connections opened while the root's first step is generated (rlm/providers/_warm.py).

Unit tests dial through an in-process fake in virtual time; the loopback test
checks against the fixture server that warming sends no request and leaves
no connection open.
"""

from __future__ import annotations

from collections.abc import Iterable

import httpcore2
import trio

from rlm import RLM
from rlm._config import RunConfig
from rlm.fixtures.needle import generate_needle
from rlm.providers._warm import MAX_WARM_CONNECTIONS, WarmConnections
from rlm.providers.base import CompletionRequest
from rlm.providers.open import open_providers
from tests.helpers import serving


class FakeStream(httpcore2.AsyncNetworkStream):
    def __init__(self, host: str, port: int) -> None:
        self.origin = (host, port)
        self.closed = False
        self.server_closed = False  # then it reads as readable while idle (EOF waiting)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        await trio.lowlevel.checkpoint()
        return b""

    async def aclose(self) -> None:
        self.closed = True

    def get_extra_info(self, info: str) -> object:
        return self.server_closed if info == "is_readable" else None


class FakeDialer(httpcore2.AsyncNetworkBackend):
    """Each connect takes ``delay`` seconds of trio's clock; every stream is kept."""

    def __init__(self, delay: float = 0.01) -> None:
        self.delay = delay
        self.dialled: list[FakeStream] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's backend interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> FakeStream:
        await trio.sleep(self.delay)
        stream = FakeStream(host, port)
        self.dialled.append(stream)
        return stream


async def warmed(warm: WarmConnections, count: int) -> None:
    """The run's first request dials and is sent (its client reads); then ``count`` warm."""
    first = await warm.connect_tcp("h", 80)
    await first.read(1)
    await warm.open("h", 80, count)


async def test_nothing_is_dialled_ahead_before_the_first_request_is_sent(
    autojump_clock: object,
) -> None:
    dialer = FakeDialer()
    warm = WarmConnections(dialer)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(warm.open, "h", 80, 3)
        await trio.sleep(5)
        assert dialer.dialled == []  # the root's request must not queue behind the dials
        first = await warm.connect_tcp("h", 80)
        await trio.sleep(5)
        assert len(dialer.dialled) == 1  # connected, but its request is not out yet
        await first.read(1)  # the client reads the response: the request is on the wire
        await trio.sleep(5)
        assert len(dialer.dialled) == 4 and warm.ready("h", 80) == 3


async def test_the_pool_takes_pre_opened_connections_before_dialling(
    autojump_clock: object,
) -> None:
    dialer = FakeDialer()
    warm = WarmConnections(dialer)
    await warmed(warm, 3)
    ahead = dialer.dialled[1:]
    assert len(ahead) == 3 and warm.ready("h", 80) == 3
    taken = [await warm.connect_tcp("h", 80) for _ in range(3)]
    assert len(dialer.dialled) == 4  # no new dial for these
    assert set(map(id, taken)) == set(map(id, ahead)) and warm.taken == 3
    fifth = await warm.connect_tcp("h", 80)
    other = await warm.connect_tcp("elsewhere", 80)
    assert dialer.dialled[4:] == [fifth, other] and warm.taken == 3


async def test_a_connection_the_server_closed_is_closed_not_handed_out(
    autojump_clock: object,
) -> None:
    dialer = FakeDialer()
    warm = WarmConnections(dialer)
    await warmed(warm, 2)
    dead, alive = dialer.dialled[1:]
    dead.server_closed = True
    first = await warm.connect_tcp("h", 80)
    second = await warm.connect_tcp("h", 80)
    assert first is alive and dead.closed and second is dialer.dialled[3]


async def test_unused_connections_are_closed_and_late_ones_on_arrival(
    autojump_clock: object,
) -> None:
    dialer = FakeDialer(delay=1.0)
    warm = WarmConnections(dialer)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(warmed, warm, 2)
        await trio.sleep(2.5)  # the first request's connection, then both warm ones
        assert warm.ready("h", 80) == 2
        nursery.start_soon(warm.open, "h", 80, 1)
        await trio.sleep(0.5)  # the third is still connecting when the client closes
        await warm.aclose()
    assert len(dialer.dialled) == 4 and all(stream.closed for stream in dialer.dialled[1:])
    assert warm.ready("h", 80) == 0


async def test_warming_is_bounded(autojump_clock: object) -> None:
    dialer = FakeDialer()
    warm = WarmConnections(dialer)
    await warmed(warm, 10 * MAX_WARM_CONNECTIONS)
    assert len(dialer.dialled) == 1 + MAX_WARM_CONNECTIONS
    await warm.aclose()


async def test_providers_open_the_sub_lanes_connections_once_the_first_request_is_out() -> None:
    async with serving(root_latency=0.5) as (url, server):
        config = RunConfig(model="fixture:4", base_url=url, max_concurrent=5, root_permits=1)
        root = CompletionRequest(
            messages=[{"role": "system", "content": "llm_query_batched"},
                      {"role": "user", "content": "Query: What is the magic number?"}],
            model="fixture:4", lane="root",
        )
        sub = CompletionRequest(
            messages=[{"role": "user", "content": "What is the magic number? 7"}],
            model="fixture:4", lane="sub",
        )
        async with open_providers(config) as providers:
            await trio.sleep(0.2)
            assert server.stats.connections == 0  # nothing before the first request
            async with trio.open_nursery() as nursery:
                nursery.start_soon(providers["root"].complete, root)
                with trio.fail_after(10):  # while the root's step is generated (0.5 s)
                    while server.stats.connections < 5:  # noqa: ASYNC110 (server's counter)
                        await trio.sleep(0.01)
            assert server.stats.total_requests == 1  # warming opens, it never asks
            async with trio.open_nursery() as nursery:
                for _ in range(5):
                    nursery.start_soon(providers["sub"].complete, sub)
            # They went out on the connections already open: none was dialled for them.
            assert server.stats.connections == 5 and server.stats.total_requests == 6
        with trio.fail_after(10):
            while server.stats.open_connections:  # noqa: ASYNC110 (the server's own counter)
                await trio.sleep(0.01)


async def test_a_run_over_http_sends_only_its_own_requests() -> None:
    needle = generate_needle(20_000, seed=3)
    async with serving(root_latency=0.2) as (url, server):
        model = RLM(base_url=url, model="fixture:4", max_concurrent=5, root_permits=1)
        result = await model.acompletion("What is the magic number?", needle.text)
    assert result.answer == needle.answer
    assert server.stats.total_requests == result.usage.llm_calls
