"""What one sub-query over HTTP costs in CPU: our process, by layer, and the fixture server.

Run: ``python benchmarks/http_bench.py [--requests N] [--rounds R]``.

- **by layer, no network**: the run's HTTP client (``make_http_client``) over an
  in-memory network stream that answers at once, so neither the kernel nor a
  server is measured: ``OpenAIProvider.complete`` (all of it: it posts on the
  pool directly, ``rlm/providers/_direct.py``), the same POST through httpx2's
  client (what a provider given another client pays), httpx2's ``build_request``
  alone, and the pool alone (``rlm/providers/_pool.py`` over httpcore2's
  connections and h11: what is left of a request below httpx2).  Minimum and
  median CPU per request over the rounds.
- **over loopback**: ``N`` sub-queries (6 KB prompts, as batched-32's) at 16 at
  a time against ``rlm fixture-server`` in its own process, with the run's
  connection stack (pre-opened connections, one write per request): CPU per
  request of this process and of the server (from /proc, so Linux only).

Not a test: nothing here asserts.  The machine's load moves every figure; run it
interleaved with a baseline to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable

import httpcore2
import httpx2
import trio

from rlm.fixtures import generate_needle
from rlm.providers._http import make_http_client
from rlm.providers._one_write import OneWriteBackend
from rlm.providers._warm import WarmConnections
from rlm.providers.base import CompletionRequest
from rlm.providers.openai import OpenAIProvider

_TEXT = generate_needle(200_000, seed=1).text
_CHUNK = len(_TEXT) // 32
PROMPTS = [f"What is the magic number?\nText:\n{_TEXT[i * _CHUNK:(i + 1) * _CHUNK]}"
           for i in range(32)]
_REPLY = json.dumps({
    "id": "chatcmpl-fixture-1", "object": "chat.completion", "created": 0, "model": "fixture:32",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "NOT FOUND"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1600, "completion_tokens": 3, "total_tokens": 1603},
}).encode()
_RESPONSE = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
             % len(_REPLY) + _REPLY)


class _AnsweringStream(httpcore2.AsyncNetworkStream):
    """Takes every write, answers every read with one whole response (a checkpoint each,
    as a socket's would)."""

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        await trio.lowlevel.checkpoint()
        return _RESPONSE

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        pass

    def get_extra_info(self, info: str) -> object:
        return False if info == "is_readable" else None


class _NoNetwork(httpcore2.AsyncNetworkBackend):
    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return _AnsweringStream()


async def by_layer(requests: int, rounds: int) -> None:
    url = "http://127.0.0.1:9/v1"
    request = CompletionRequest(messages=[{"role": "user", "content": PROMPTS[0]}],
                                model="fixture:32")
    async with make_http_client(max_connections=17, request_timeout=60, tls=False,
                                network=OneWriteBackend(_NoNetwork())) as client:
        provider = OpenAIProvider(client, url, "bench")
        target = httpx2.URL(url + "/chat/completions")
        body = {"model": "fixture:32", "messages": request.messages}
        raw = json.dumps(body).encode()
        headers = [(b"Host", b"127.0.0.1:9"), (b"Content-Type", b"application/json"),
                   (b"Authorization", b"Bearer bench"), (b"Content-Length", b"%d" % len(raw))]
        pool = client.pool

        async def complete() -> None:
            await provider.complete(request)

        async def through_httpx() -> None:
            response = await client.post(target, json=body, headers=provider._headers)
            response.json()

        async def build() -> None:
            client.build_request("POST", target, json=body)

        async def core() -> None:
            await pool.request("POST", str(target), headers=headers, content=raw)

        layers: dict[str, Callable[[], Awaitable[None]]] = {
            "OpenAIProvider.complete": complete, "httpx2 client.post": through_httpx,
            "httpx2 build_request": build, "pool.request": core,
        }
        await complete()
        cpu: dict[str, list[float]] = {name: [] for name in layers}
        for _ in range(rounds):
            for name, layer in layers.items():
                started = time.process_time()
                for _ in range(requests):
                    await layer()
                cpu[name].append((time.process_time() - started) / requests * 1e6)
    print("by layer, no network (CPU of this process per request):")
    for name, values in cpu.items():
        median = statistics.median(values)
        print(f"  {name:26s} min {min(values):6.0f} us   median {median:6.0f} us")


def _process_cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def over_loopback(url: str, server_pid: int, requests: int, rounds: int) -> None:
    warm = WarmConnections(OneWriteBackend())
    async with make_http_client(max_connections=17, request_timeout=60, tls=False,
                                network=warm) as client:
        provider = OpenAIProvider(client, url, "bench")
        slots = trio.CapacityLimiter(16)

        async def one(i: int) -> None:
            async with slots:
                await provider.complete(CompletionRequest(
                    messages=[{"role": "user", "content": PROMPTS[i % 32]}], model="fixture:32"))

        async def wave(n: int) -> None:
            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(one, i)

        await wave(16)  # connections open
        ours: list[float] = []
        theirs: list[float] = []
        for _ in range(rounds):
            server_before, started = _process_cpu(server_pid), time.process_time()
            await wave(requests)
            ours.append((time.process_time() - started) / requests * 1e3)
            theirs.append((_process_cpu(server_pid) - server_before) / requests * 1e3)
        await warm.aclose()
    print(f"over loopback, {requests} requests at 16 at a time (CPU per request):")
    for who, values in (("this process", ours), ("fixture server", theirs)):
        median = statistics.median(values)
        print(f"  {who:14s} min {min(values):5.2f} ms   median {median:5.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=320)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    trio.run(by_layer, args.requests, args.rounds)
    server = subprocess.Popen(
        [sys.executable, "-m", "rlm", "fixture-server", "--port", "0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert server.stderr is not None
        found = re.search(r"listening on (http://\S+)", server.stderr.readline())
        if found is None:
            raise SystemExit("the fixture server did not start")
        trio.run(over_loopback, found.group(1), server.pid, args.requests, args.rounds)
    finally:
        server.kill()
        server.wait()
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
