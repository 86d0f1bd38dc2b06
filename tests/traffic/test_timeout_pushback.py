"""A local server with one slot queues what it cannot work on; a request that waits past
``request_timeout`` times out, and its retry joins the same queue (issue 31, item 2).

Timeouts count as push-back for adaptive concurrency: the sub lane comes down until the
server's queue drains, and every request is answered.  Before, the lane stayed at 16,
each retry rejoined a queue the abandoned attempts kept long, and most requests failed.

Virtual time: the real OpenAI provider over an httpx2 ``MockTransport`` whose server
works on one request at a time in arrival order, a request whose client gave up
included (as llama.cpp's server does: it finds out only when it answers).
"""

from __future__ import annotations

import math

import httpx2
import trio

from rlm._events import CapacityChanged, EventBus, LLMResponse, LLMRetry
from rlm._traffic.gate import Gate
from rlm._traffic.limiter import TieredLimiter
from rlm._traffic.pacer import Pacer
from rlm._traffic.retry import RetryPolicy
from rlm.errors import ProviderTimeout
from rlm.providers._http import ResponseLimits, make_http_client
from rlm.providers.base import CompletionRequest
from rlm.providers.openai import OpenAIProvider

REPLY = {
    "id": "x", "model": "local", "usage": {"prompt_tokens": 5, "completion_tokens": 2},
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}],
}


class OneSlotServer:
    """Works on one request at a time, ``service`` seconds each, first come first served;
    never refuses, and works on a request whose client went away all the same."""

    def __init__(self, service: float) -> None:
        self.service = service
        self._send, self._receive = trio.open_memory_channel[trio.Event](math.inf)
        self.worked = 0
        self.longest_queue = 0

    async def work(self) -> None:
        async for done in self._receive:
            await trio.sleep(self.service)
            self.worked += 1
            done.set()

    async def handler(self, request: httpx2.Request) -> httpx2.Response:
        done = trio.Event()
        self._send.send_nowait(done)
        self.longest_queue = max(self.longest_queue, self._receive.statistics().current_buffer_used)
        await done.wait()
        return httpx2.Response(200, json=REPLY)


async def test_timeouts_against_a_one_slot_server_bring_concurrency_down_and_all_succeed(
    autojump_clock: trio.abc.Clock,
) -> None:
    server = OneSlotServer(service=10.0)
    events = EventBus()
    outcomes: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.work)
        async with make_http_client(
            max_connections=16, request_timeout=60.0,
            transport=httpx2.MockTransport(server.handler),
        ) as client:
            provider = OpenAIProvider(
                client, "http://127.0.0.1:8080/v1", None,
                limits=ResponseLimits(request_timeout=60.0),
            )
            gate = Gate(
                limiter=TieredLimiter(16, 0), providers={"root": provider, "sub": provider},
                events=events, pacer=Pacer(), retry=RetryPolicy(max_retries=10),
            )
            request = CompletionRequest(
                messages=[{"role": "user", "content": "task"}], model="local", lane="sub",
            )

            async def one() -> None:
                try:
                    await gate.complete(request)
                    outcomes.append("ok")
                except ProviderTimeout:
                    outcomes.append("timed out")

            async with trio.open_nursery() as requests:
                for _ in range(16):
                    requests.start_soon(one)
        nursery.cancel_scope.cancel()
    assert outcomes == ["ok"] * 16
    cuts = [e.new for e in events.events
            if isinstance(e, CapacityChanged) and e.reason == "overload"]
    assert cuts and min(cuts) <= 2  # down to what one slot can take
    retries = [e for e in events.events if isinstance(e, LLMRetry)]
    assert retries and all(e.brief == "timed out after 60s (request_timeout)" for e in retries)
    responses = [e for e in events.events if isinstance(e, LLMResponse)]
    assert sum(e.status == "ok" for e in responses) == 16
