"""What one sub-query over HTTP costs in CPU: our process and the fixture server.

Run: ``python benchmarks/http_bench.py [--requests N] [--rounds R]``.

- **no network**: ``OpenAIProvider.complete`` on the run's HTTP client
  (``make_http_client``) over an ``httpx2.MockTransport`` that answers at once, so
  neither the kernel nor a server is measured: what the provider and httpx2's client
  cost above the transport.  Minimum and median CPU per request over the rounds.
- **over loopback**: ``N`` sub-queries (6 KB prompts, as batched-32's) at 16 at a
  time against ``rlm fixture-server`` in its own process, through the run's client:
  CPU per request of this process and of the server (from /proc, so Linux only).

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

import httpx2
import trio

from rlm.fixtures import generate_needle
from rlm.providers._http import make_http_client
from rlm.providers.base import CompletionRequest
from rlm.providers.openai import OpenAIProvider

_TEXT = generate_needle(200_000, seed=1).text
_CHUNK = len(_TEXT) // 32
PROMPTS = [f"What is the magic number?\nText:\n{_TEXT[i * _CHUNK:(i + 1) * _CHUNK]}"
           for i in range(32)]
_REPLY = {
    "id": "chatcmpl-fixture-1", "object": "chat.completion", "created": 0, "model": "fixture:32",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "NOT FOUND"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1600, "completion_tokens": 3, "total_tokens": 1603},
}


def _request(i: int) -> CompletionRequest:
    return CompletionRequest(messages=[{"role": "user", "content": PROMPTS[i % 32]}],
                             model="fixture:32")


async def no_network(requests: int, rounds: int) -> None:
    body = json.dumps(_REPLY).encode()
    transport = httpx2.MockTransport(
        lambda request: httpx2.Response(
            200, content=body, headers={"content-type": "application/json"}
        )
    )
    async with make_http_client(max_connections=17, request_timeout=60,
                                transport=transport) as client:
        provider = OpenAIProvider(client, "http://127.0.0.1:9/v1", "bench")
        await provider.complete(_request(0))
        cpu: list[float] = []
        for _ in range(rounds):
            started = time.process_time()
            for i in range(requests):
                await provider.complete(_request(i))
            cpu.append((time.process_time() - started) / requests * 1e6)
    print("no network (CPU of this process per request, above the transport):")
    print(f"  OpenAIProvider.complete  min {min(cpu):6.0f} us   "
          f"median {statistics.median(cpu):6.0f} us")


def _process_cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def over_loopback(url: str, server_pid: int, requests: int, rounds: int) -> None:
    async with make_http_client(max_connections=16, request_timeout=60) as client:
        provider = OpenAIProvider(client, url, "bench")
        slots = trio.CapacityLimiter(16)

        async def one(i: int) -> None:
            async with slots:
                await provider.complete(_request(i))

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
    print(f"over loopback, {requests} requests at 16 at a time (CPU per request):")
    for who, values in (("this process", ours), ("fixture server", theirs)):
        median = statistics.median(values)
        print(f"  {who:14s} min {min(values):5.2f} ms   median {median:5.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=320)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    trio.run(no_network, args.requests, args.rounds)
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
