"""The run's connection pool and the direct JSON POST (rlm/providers/_pool.py, _direct.py).

Unit tests run in virtual time over an in-process fake server injected as the
pool's network backend; the loopback tests use real sockets and no fake clock.
"""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
from collections.abc import Iterable

import httpcore2
import httpx2
import pytest
import trio
import trio.testing

from rlm.errors import (
    AuthenticationError,
    ProviderConnectionError,
    ProviderStatusError,
    RateLimitError,
)
from rlm.providers._direct import Reply
from rlm.providers._http import make_http_client
from rlm.providers.anthropic import AnthropicProvider
from rlm.providers.base import CompletionRequest
from rlm.providers.openai import OpenAIProvider
from tests.helpers import serving

_ANSWER = {
    "model": "m",
    "choices": [{"message": {"content": "42"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}
REQUEST = CompletionRequest(messages=[{"role": "user", "content": "hi"}], model="m")


def reply(body: bytes, *extra: bytes, status: bytes = b"200 OK") -> bytes:
    head = b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n" + b"".join(
        line + b"\r\n" for line in extra
    )
    return head + b"content-length: %d\r\n\r\n" % len(body) + body


class FakeConnection(httpcore2.AsyncNetworkStream):
    """Answers each whole request it is sent with ``server.reply``, once ``server.go`` is set."""

    def __init__(self, server: FakeServer) -> None:
        self.server = server
        self.sent = b""
        self.closed = False
        self.server_closed = False  # then it reads as readable while idle (EOF waiting)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await trio.lowlevel.checkpoint()
        self.sent += buffer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        await self.server.go.wait()
        self.server.requests.append(self.sent)
        self.sent = b""
        return self.server.reply

    async def aclose(self) -> None:
        self.closed = True

    def get_extra_info(self, info: str) -> object:
        return self.server_closed if info == "is_readable" else None


class FakeServer(httpcore2.AsyncNetworkBackend):
    def __init__(
        self, body: bytes = json.dumps(_ANSWER).encode(), *extra: bytes, status: bytes = b"200 OK"
    ) -> None:
        self.reply = reply(body, *extra, status=status)
        self.go = trio.Event()
        self.go.set()
        self.dialled: list[tuple[str, FakeConnection]] = []
        self.requests: list[bytes] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's backend interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> FakeConnection:
        await trio.lowlevel.checkpoint()
        connection = FakeConnection(self)
        self.dialled.append((f"{host}:{port}", connection))
        return connection


def provider(server: FakeServer, *, max_connections: int = 4, url: str = "http://h/v1",
             request_timeout: float = 60) -> OpenAIProvider:
    client = make_http_client(max_connections=max_connections, request_timeout=request_timeout,
                              tls=False, network=server)
    return OpenAIProvider(client, url, "sk-test")


async def test_requests_one_after_another_reuse_one_connection(autojump_clock: object) -> None:
    server = FakeServer()
    openai = provider(server)
    for _ in range(3):
        assert (await openai.complete(REQUEST)).text == "42"
    assert len(server.dialled) == 1 and len(server.requests) == 3
    assert openai._client.pool.in_flight == 0  # type: ignore[attr-defined]


async def test_in_flight_requests_never_exceed_max_connections(autojump_clock: object) -> None:
    server = FakeServer()
    server.go = trio.Event()
    openai = provider(server, max_connections=2)
    pool = openai._client.pool  # type: ignore[attr-defined]
    answers: list[str] = []

    async def one() -> None:
        answers.append((await openai.complete(REQUEST)).text)

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(one)
        await trio.testing.wait_all_tasks_blocked()
        assert pool.in_flight == 2 and len(server.dialled) == 2  # the other 3 wait
        server.go.set()
    assert answers == ["42"] * 5
    assert len(server.dialled) == 2 and pool.in_flight == 0


async def test_a_cancelled_request_gives_its_connection_back(autojump_clock: object) -> None:
    server = FakeServer()
    server.go = trio.Event()
    openai = provider(server, max_connections=1)
    pool = openai._client.pool  # type: ignore[attr-defined]
    with trio.move_on_after(1):
        await openai.complete(REQUEST)  # no answer comes: cancelled waiting for it
    assert pool.in_flight == 0 and pool.connections == 0
    assert server.dialled[0][1].closed  # a half-done exchange never goes back to the pool
    server.go.set()
    assert (await openai.complete(REQUEST)).text == "42"
    assert len(server.dialled) == 2


async def test_waiting_for_a_connection_past_the_timeout_is_an_error(
    autojump_clock: object,
) -> None:
    server = FakeServer()
    server.go = trio.Event()
    openai = provider(server, max_connections=1, request_timeout=5)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(openai.complete, REQUEST)  # holds the only connection
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(ProviderConnectionError, match=r"timed out.*PoolTimeout"):
            await openai.complete(REQUEST)
        server.go.set()
    assert openai._client.pool.in_flight == 0  # type: ignore[attr-defined]


async def test_a_connection_the_server_closed_while_idle_is_replaced(
    autojump_clock: object,
) -> None:
    server = FakeServer()
    openai = provider(server)
    await openai.complete(REQUEST)
    first = server.dialled[0][1]
    first.server_closed = True
    assert (await openai.complete(REQUEST)).text == "42"
    assert first.closed and len(server.dialled) == 2


async def test_opening_past_max_connections_closes_the_longest_idle(
    autojump_clock: object,
) -> None:
    server = FakeServer()
    client = make_http_client(max_connections=1, request_timeout=60, tls=False, network=server)
    a = OpenAIProvider(client, "http://a/v1", None)
    b = OpenAIProvider(client, "http://b/v1", None)
    await a.complete(REQUEST)
    await b.complete(REQUEST)
    assert [host for host, _ in server.dialled] == ["a:80", "b:80"]
    assert server.dialled[0][1].closed and client.pool.connections == 1
    await client.aclose()
    assert server.dialled[1][1].closed


async def test_the_direct_post_sends_what_httpx_sends(autojump_clock: object) -> None:
    """Same head (in any order) and the same body bytes as the client's own post."""
    server = FakeServer()
    openai = provider(server)
    body = {"model": "m", "messages": [{"role": "user", "content": "h\u00e9llo \U0001f600"}]}
    await openai.post(body)
    await openai._client.post(openai.url, json=body, headers=openai._headers)
    direct, through_httpx = (request.split(b"\r\n\r\n", 1) for request in server.requests)
    assert sorted(direct[0].split(b"\r\n")) == sorted(through_httpx[0].split(b"\r\n"))
    assert direct[1] == through_httpx[1]
    assert b"Authorization: Bearer sk-test" in direct[0]


async def test_a_compressed_answer_is_decoded(autojump_clock: object) -> None:
    server = FakeServer(gzip.compress(json.dumps(_ANSWER).encode()), b"content-encoding: gzip")
    assert (await provider(server).complete(REQUEST)).text == "42"


async def test_the_reply_carries_what_the_provider_reads(autojump_clock: object) -> None:
    """Headers by any case, a repeated one joined as httpx2 joins it, the rate limits."""
    server = FakeServer(json.dumps(_ANSWER).encode(), b"X-RateLimit-Limit-Requests: 500",
                        b"Vary: a", b"vary: b")
    openai = provider(server)
    response = await openai.post({"model": "m", "messages": []})
    assert isinstance(response, Reply)
    assert response.headers["vary"] == "a, b" and response.status_code == 200
    completion = await openai.complete(REQUEST)
    assert completion.metadata["ratelimit"] == {"requests_limit": 500.0, "source": "headers"}


@pytest.mark.parametrize(
    ("status", "extra", "error", "match"),
    [
        (b"429 Too Many Requests", b"Retry-After: 2", RateLimitError, "slow down"),
        (b"401 Unauthorized", b"X-Request-Id: r1", AuthenticationError, "refused the key"),
        (b"503 Service Unavailable", b"Retry-After-Ms: 1500", ProviderStatusError, "slow down"),
    ],
)
async def test_error_statuses_on_the_direct_path_are_translated(
    autojump_clock: object, status: bytes, extra: bytes, error: type[Exception], match: str
) -> None:
    body = json.dumps({"error": {"message": "slow down"}}).encode()
    openai = provider(FakeServer(body, extra, status=status))
    with pytest.raises(error, match=match) as caught:
        await openai.complete(REQUEST)
    if b"Retry" in extra:
        assert caught.value.retry_after in (2.0, 1.5)  # type: ignore[attr-defined]


async def test_a_client_of_another_kind_posts_through_httpx() -> None:
    """A provider given any other client (a MockTransport here) goes through it."""
    seen: list[httpx2.Request] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, json=_ANSWER)

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
    assert (await OpenAIProvider(client, "http://h/v1", None).complete(REQUEST)).text == "42"
    assert len(seen) == 1


async def test_a_refused_connection_says_what_to_check() -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = make_http_client(max_connections=2, request_timeout=10, tls=False)
    openai = OpenAIProvider(client, f"http://127.0.0.1:{port}/v1", None)
    with pytest.raises(ProviderConnectionError, match=r"cannot reach .*base_url"):
        await openai.complete(REQUEST)
    assert client.pool.in_flight == 0 and client.pool.connections == 0
    await client.aclose()


async def test_over_loopback_a_fan_out_answers_every_request_on_bounded_connections() -> None:
    async with serving() as (url, server):
        client = make_http_client(max_connections=4, request_timeout=10, tls=False)
        openai = OpenAIProvider(client, url, None)
        answers: list[str] = []

        async def one() -> None:
            answers.append((await openai.complete(CompletionRequest(
                messages=[{"role": "user", "content": "What is the magic number?"}],
                model="fixture",
            ))).text)

        async with trio.open_nursery() as nursery:
            for _ in range(12):
                nursery.start_soon(one)
        assert answers == ["NOT FOUND"] * 12
        assert client.pool.connections <= 4 and server.stats.total_requests == 12
        await client.aclose()
        assert client.pool.connections == 0


def test_loading_the_transport_loads_what_a_run_opens_its_providers_with() -> None:
    """So that a run's clock does not pay for it (rlm run and rlm bench call it first)."""
    code = (
        "import sys; from rlm.providers._http import load_http_transport; "
        "load_http_transport(); "
        "print(all(m in sys.modules for m in ('rlm.providers.openai', 'rlm.providers.anthropic',"
        " 'rlm.providers._warm', 'rlm.providers._one_write', 'encodings.idna')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"


@pytest.mark.parametrize("kind", [OpenAIProvider, AnthropicProvider])
async def test_both_providers_stream_and_post_on_the_pool_over_loopback(
    kind: type[OpenAIProvider] | type[AnthropicProvider],
) -> None:
    """A stream (through httpx2's client), a stream cut short (its connection is closed,
    not reused) and a whole answer (the direct POST) share the run's pool."""
    from tests.providers.test_provider_streaming import ROOT, SUB, Pieces

    async with serving(chunk_chars=5, cut_streams=1) as (url, server):
        client = make_http_client(max_connections=2, request_timeout=10, tls=False)
        provider = kind(client, url, "k")
        with pytest.raises(ProviderConnectionError) as caught:
            await provider.stream(ROOT, Pieces())
        assert caught.value.retryable
        whole = Pieces()
        streamed = await provider.stream(ROOT, whole)
        assert streamed.text == whole.text and len(whole.pieces) > 1
        assert (await provider.complete(SUB)).text == "31337"
        assert client.pool.in_flight == 0 and client.pool.connections <= 2
        assert server.stats.streams == 2 and server.stats.total_requests == 3
        await client.aclose()
