"""Streaming end to end over the loopback fixture server (real sockets, normal clock)."""

from __future__ import annotations

from collections import defaultdict

import httpx2
import trio

from rlm._events import Event, EventBus, LLMResponse, StreamDiscarded, TextDelta
from rlm._traffic.gate import Gate
from rlm._traffic.limiter import TieredLimiter
from rlm._traffic.retry import RetryPolicy
from rlm.providers.base import CompletionRequest
from rlm.providers.fixture import fixture_reply
from rlm.providers.openai import OpenAIProvider
from rlm.streaming import StreamMerger
from tests.helpers import serving

QUESTION = "What is the magic number?"
FAST = "fixture-fast:4"
SLOW = [f"fixture-slow{i}:4" for i in range(7)]


def root_request(call_id: str, model: str) -> CompletionRequest:
    """A root step of the scripted fixture model: a reply of ~1,500 characters."""
    return CompletionRequest(
        messages=[
            {"role": "system", "content": "RLM prompt: use llm_query_batched(prompts)."},
            {"role": "user", "content": f"context: str\nQuery: {QUESTION} ({call_id})"},
        ],
        model=model,
        lane="sub",
        call_id=call_id,
        parent_id="root",
        depth=1,
    )


async def test_eight_concurrent_streams_over_loopback_merge_attributed() -> None:
    delays = {FAST: 0.001, **{model: 0.02 + 0.005 * i for i, model in enumerate(SLOW)}}
    seen: list[tuple[float, Event]] = []
    finals: dict[str, str] = {}
    models = {f"root.{i}": model for i, model in enumerate([FAST, *SLOW])}
    async with (
        serving(chunk_chars=80, model_chunk_delay=delays) as (url, server),
        httpx2.AsyncClient() as client,
    ):
        provider = OpenAIProvider(client, url, None)
        events = EventBus()
        merger = StreamMerger(capacity=16)
        events.add_stream(merger)
        gate = Gate(
            limiter=TieredLimiter(9, 1),
            providers={"root": provider, "sub": provider},
            events=events,
            adaptive=False,
        )

        async def consume() -> None:
            async for event in merger:
                seen.append((trio.current_time(), event))

        async def one(call_id: str) -> None:
            completion = await gate.complete(root_request(call_id, models[call_id]))
            finals[call_id] = completion.text

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            async with trio.open_nursery() as calls:
                for call_id in models:
                    calls.start_soon(one, call_id)
            merger.close()
    assert server.stats.streams == 8 and server.stats.max_in_flight >= 1
    by_call: dict[str, list[tuple[float, TextDelta]]] = defaultdict(list)
    for at, event in seen:
        if isinstance(event, TextDelta):
            by_call[event.call_id].append((at, event))
    assert set(by_call) == set(models)
    for call_id, pieces in by_call.items():
        request = root_request(call_id, models[call_id])
        expected = fixture_reply(request.messages, models[call_id])
        assert "".join(e.text for _, e in pieces) == finals[call_id] == expected
        assert {(e.parent_id, e.depth, e.lane, e.attempt) for _, e in pieces} == {
            ("root", 1, "sub", 1)
        }
        assert len(pieces) > 10
    fast_last = by_call["root.0"][-1][0]
    for call_id in list(models)[1:]:
        assert fast_last < by_call[call_id][-1][0], f"the fast stream waited for {call_id}"
    # Arrival order, not round-robin: every chunk of the fast stream was delivered
    # while the slowest stream had sent fewer than half of its own.
    slowest = by_call[list(models)[-1]]
    before = [at for at, _ in slowest if at <= fast_last]
    assert len(before) < len(slowest) // 2, (len(before), len(slowest))
    responses = [e for _, e in seen if isinstance(e, LLMResponse)]
    assert len(responses) == 8 and all(r.ttft_s is not None for r in responses)


async def test_a_cut_stream_is_retried_and_the_answer_has_none_of_its_text() -> None:
    async with (
        serving(chunk_chars=50, cut_streams=1) as (url, server),
        httpx2.AsyncClient() as client,
    ):
        provider = OpenAIProvider(client, url, None)
        events = EventBus()
        merger = StreamMerger()
        events.add_stream(merger)
        gate = Gate(
            limiter=TieredLimiter(4, 1),
            providers={"root": provider, "sub": provider},
            events=events,
            retry=RetryPolicy(base_s=0.01),
            adaptive=False,
        )
        request = root_request("root.1", "fixture:4")
        completion = await gate.complete(request)
        merger.close()
    seen = [e async for e in merger]
    first = "".join(e.text for e in seen if isinstance(e, TextDelta) and e.attempt == 1)
    second = "".join(e.text for e in seen if isinstance(e, TextDelta) and e.attempt == 2)
    discarded = [e for e in seen if isinstance(e, StreamDiscarded)]
    assert server.stats.cut_streams == 1 and server.stats.streams == 2
    assert len(discarded) == 1 and discarded[0].chars == len(first) > 0
    # The answer is exactly the second attempt, not the cut text followed by it.
    assert completion.text == second == fixture_reply(request.messages, "fixture:4")
    assert len(first) < len(second)
