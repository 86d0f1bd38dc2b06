"""The stream merger and streamed requests through the gate, in virtual time."""

from __future__ import annotations

from collections import defaultdict

import pytest
import trio
import trio.testing

from rlm._events import Event, EventBus, LLMResponse, StreamDiscarded, TextDelta
from rlm._traffic.gate import Gate
from rlm._traffic.limiter import TieredLimiter
from rlm.errors import ProviderConnectionError
from rlm.providers.base import Completion, CompletionRequest, Provider
from rlm.providers.fixture import FixtureProvider
from rlm.streaming import StreamMerger
from rlm.testing.provider import FunctionProvider


def paced(delays: dict[str, float], size: int = 3) -> FunctionProvider:
    """Streams ``answer of CALL: xxx…`` in ``size``-char pieces, ``delays[call]`` s before each."""

    async def reply(request: CompletionRequest) -> Completion:
        text = f"answer of {request.call_id}: " + "x" * 20
        return Completion(text=text, model=request.model, output_tokens=len(text) // 4)

    return FunctionProvider(reply, chunk_chars=size, chunk_delay=lambda r: delays[r.call_id])


def request(call_id: str, lane: str = "sub", task: int | None = None) -> CompletionRequest:
    return CompletionRequest(
        messages=[{"role": "user", "content": "hi"}],
        model="m",
        lane="root" if lane == "root" else "sub",
        call_id=call_id,
        parent_id="root" if call_id != "root" else None,
        depth=0 if call_id == "root" else 1,
        task=task,
        task_title=None if task is None else f"task-{task}.txt",
    )


def gate_for(provider: Provider, events: EventBus, permits: int = 16) -> Gate:
    return Gate(
        limiter=TieredLimiter(permits, 1),
        providers={"root": provider, "sub": provider},
        events=events,
        adaptive=False,
    )


async def consume(merger: StreamMerger, seen: list[tuple[float, Event]], pause: float = 0) -> None:
    async for event in merger:
        seen.append((trio.current_time(), event))
        await trio.sleep(pause)


async def test_eight_streams_at_different_rates_merge_as_they_arrive(
    autojump_clock: trio.testing.MockClock,
) -> None:
    delays = {f"root.{i}": 0.01 * (i + 1) for i in range(8)}  # root.0 is the fastest
    events = EventBus()
    merger = StreamMerger(capacity=8)
    events.add_stream(merger)
    provider = paced(delays)
    gate = gate_for(provider, events)
    seen: list[tuple[float, Event]] = []
    finals: dict[str, str] = {}

    async def one(index: int) -> None:
        completion = await gate.complete(request(f"root.{index}", task=index + 1))
        finals[f"root.{index}"] = completion.text

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume, merger, seen)
        async with trio.open_nursery() as calls:
            for i in range(8):
                calls.start_soon(one, i)
        merger.close()

    deltas = [(at, e) for at, e in seen if isinstance(e, TextDelta)]
    by_call: dict[str, list[tuple[float, TextDelta]]] = defaultdict(list)
    for at, e in deltas:
        by_call[e.call_id].append((at, e))
    assert set(by_call) == set(delays)
    for call_id, pieces in by_call.items():
        assert "".join(e.text for _, e in pieces) == finals[call_id]
        index = int(call_id.split(".")[1])
        assert {(e.parent_id, e.depth, e.lane, e.task, e.task_title) for _, e in pieces} == {
            ("root", 1, "sub", index + 1, f"task-{index + 1}.txt")
        }
    fast_done = by_call["root.0"][-1][0]
    for call_id, pieces in by_call.items():
        if call_id != "root.0":
            assert fast_done < pieces[-1][0], f"the fast stream waited for {call_id}"
    # Arrival order, not round-robin: the fast stream's pieces come back to back
    # while the slow ones have sent only a few.
    slow_before = [e for at, e in deltas if at <= fast_done and e.call_id == "root.7"]
    assert len(slow_before) < len(by_call["root.7"]) // 3
    ttft = {e.call_id: e.ttft_s for _, e in seen if isinstance(e, LLMResponse)}
    assert ttft == pytest.approx(delays)
    assert provider.streamed == len(provider.requests) == 8  # a consumer is attached: streamed


async def test_a_slow_consumer_slows_producers_and_the_buffer_stays_bounded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    merger = StreamMerger(capacity=4)
    events = EventBus()
    events.add_stream(merger)
    produced_until: dict[str, float] = {}

    async def produce(name: str) -> None:
        for i in range(50):
            await events.publish(
                TextDelta(call_id=name, text=str(i), lane="sub", request_id=1, attempt=1)
            )
        produced_until[name] = trio.current_time()

    seen: list[tuple[float, Event]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume, merger, seen, 1.0)  # one event per virtual second
        async with trio.open_nursery() as producers:
            producers.start_soon(produce, "a")
            producers.start_soon(produce, "b")
        merger.close()
    assert merger.high_water <= 4
    assert merger.producer_waits > 0
    # 100 events at one per second: producers could not finish before the consumer
    # had read all but the last buffer-full.
    assert max(produced_until.values()) >= 100 - 4 - 1
    for name in "ab":
        texts = [e.text for _, e in seen if isinstance(e, TextDelta) and e.call_id == name]
        assert texts == [str(i) for i in range(50)]  # in order per stream


async def test_a_cancelled_put_adds_nothing_and_close_releases_producers() -> None:
    merger = StreamMerger(capacity=1)
    merger.put_nowait(TextDelta(text="a", lane="sub", request_id=1, attempt=1))
    with trio.move_on_after(0.01):
        await merger.put(TextDelta(text="b", lane="sub", request_id=1, attempt=1))
    assert len(merger) == 1
    async with trio.open_nursery() as nursery:
        nursery.start_soon(merger.put, TextDelta(text="c", lane="sub", request_id=1, attempt=1))
        await trio.testing.wait_all_tasks_blocked()
        merger.close()  # the waiting producer returns; its event is dropped
    assert [e.text for e in [await merger.get()] if isinstance(e, TextDelta)] == ["a"]
    with pytest.raises(trio.EndOfChannel):
        await merger.get()
    assert [e async for e in merger] == []


async def test_a_cut_stream_is_retried_and_its_text_discarded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events = EventBus()
    merger = StreamMerger()
    events.add_stream(merger)
    provider = FixtureProvider(chunk_chars=4, chunk_delay=0.01, cut_streams=1)
    gate = gate_for(provider, events)
    sub = CompletionRequest(
        messages=[{"role": "user", "content": "What is the key?\nText:\nthe key is abcdefghijkl."}],
        model="fixture",
        call_id="root",
        depth=1,
    )
    seen_by_caller: list[tuple[str, int]] = []

    async def on_text(text: str, attempt: int) -> None:
        seen_by_caller.append((text, attempt))

    completion = await gate.complete(sub, on_text)
    merger.close()
    seen = [e async for e in merger]
    kinds = [e.kind for e in seen]
    assert kinds.index("stream_discarded") < kinds.index("llm_retry")
    discarded = next(e for e in seen if isinstance(e, StreamDiscarded))
    first = [e.text for e in seen if isinstance(e, TextDelta) and e.attempt == 1]
    second = [e.text for e in seen if isinstance(e, TextDelta) and e.attempt == 2]
    assert discarded.attempt == 1 and discarded.chars == len("".join(first)) > 0
    assert completion.text == "".join(second) == "abcdefghijkl"
    assert len("".join(first)) < len(completion.text)
    assert [a for _, a in seen_by_caller] == [1] * len(first) + [2] * len(second)
    responses = [e for e in seen if isinstance(e, LLMResponse)]
    assert [r.status for r in responses] == ["error", "ok"]
    assert all(r.ttft_s == pytest.approx(0.01) for r in responses)


async def test_without_a_consumer_requests_are_not_streamed() -> None:
    events = EventBus()
    provider = FixtureProvider(cut_streams=1)  # would fail if streamed
    gate = gate_for(provider, events)
    sub = CompletionRequest(
        messages=[{"role": "user", "content": "What is the key?\nText:\nthe key is 7."}],
        model="fixture",
    )
    assert (await gate.complete(sub)).text == "7"
    assert provider.cuts_left == 1
    with pytest.raises(ProviderConnectionError):
        await provider.stream(sub, _ignore)


async def _ignore(text: str) -> None:
    return None
