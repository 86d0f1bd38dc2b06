"""``RLM.astream``: live events of a real run (loopback server, real sandboxes, real clock)."""

from __future__ import annotations

import pytest
import trio

from rlm import RLM
from rlm._events import Event, TextDelta
from rlm.fixtures.needle import generate_needle
from tests.helpers import pid_alive, serving
from tests.run.test_invariants import sandbox_descendants

QUESTION = "What is the magic number?"


async def test_astream_yields_attributed_deltas_that_add_up_to_each_reply() -> None:
    fixture = generate_needle(20_000, seed=3)
    async with serving(chunk_chars=32) as (url, _):
        model = RLM(base_url=url, model="fixture:4")
        seen: list[Event] = []
        async with model.astream(QUESTION, fixture.text) as events:
            async for event in events:
                seen.append(event)
    finished = seen[-1]
    assert finished.kind == "run_finished" and finished.status == "answered"  # type: ignore[attr-defined]
    deltas = [e for e in seen if isinstance(e, TextDelta)]
    root = "".join(e.text for e in deltas if e.lane == "root" and e.call_id == "root")
    assert "```repl" in root
    subs = {e.request_id for e in deltas if e.lane == "sub"}
    assert len(subs) >= 4 and all(
        (e.call_id, e.parent_id, e.depth) == ("root", "root", 1) for e in deltas if e.lane == "sub"
    )
    # every step's reply came as deltas, attributed to the root call
    assert {(e.parent_id, e.depth) for e in deltas if e.lane == "root"} == {(None, 0)}


@pytest.mark.parametrize("after", ["run_started", "text_delta"])
async def test_breaking_out_of_astream_leaves_no_process_and_no_connection(after: str) -> None:
    fixture = generate_needle(20_000, seed=4)
    before = sandbox_descendants()
    started: list[int] = []

    def watch(event: Event) -> None:
        if event.kind == "sandbox_started":
            started.append(event.pid)  # type: ignore[attr-defined]

    async with serving(chunk_chars=8, chunk_delay=0.05) as (url, server):
        model = RLM(base_url=url, model="fixture:4", sinks=[watch])
        async with model.astream(QUESTION, fixture.text) as events:
            async for event in events:
                if event.kind == after:
                    open_at_break = server.stats.open_connections
                    break
        # Left the block: the run is over and its client closed.  The server notices
        # a closed connection when it next writes to it or reads from it.
        with trio.fail_after(5):
            while server.stats.open_connections:  # noqa: ASYNC110 (the server's own counter)
                await trio.sleep(0.01)
        if after == "text_delta":
            assert open_at_break >= 1  # a reply was streaming when the consumer left
    assert not [pid for pid in started if pid_alive(pid)]
    assert not sandbox_descendants() - before


async def test_async_for_straight_over_astream_shows_the_async_with_form() -> None:
    model = RLM(provider="fixture")
    with pytest.raises(TypeError, match=r"`async with model\.astream\(\.\.\.\) as events: async"):
        # The misuse under test: what astream returns is entered, not iterated.
        async for _ in model.astream(QUESTION, "the magic number is 7"):  # type: ignore[attr-defined]
            pass
    with pytest.raises(TypeError, match=r"`async with model\.avolley_stream\(\.\.\.\) as"):
        async for _ in model.avolley_stream(["What is the magic number?"]):  # type: ignore[attr-defined]
            pass
    # The async with form over the same object runs.
    async with model.astream(QUESTION, "the magic number is 7") as events:
        kinds = [event.kind async for event in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
