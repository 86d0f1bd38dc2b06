"""The response cache in front of the gate, in virtual time over a real SQLite journal.

Store calls run inline (no threads), so trio's autojump clock stays exact.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
import trio

from rlm import RLM
from rlm._config import RunConfig
from rlm._events import BudgetRefused, EventBus, LLMCached
from rlm._run.bridge import Bridge
from rlm._run.call import Call, CallParts
from rlm._traffic.budget import Budget, BudgetLimits
from rlm._traffic.gate import Gate
from rlm._traffic.limiter import TieredLimiter
from rlm.errors import JournalError, RLMError
from rlm.journal import JournalStore, ResponseCache, open_store, request_digest
from rlm.journal._threads import GroupCommit, inline_run_sync
from rlm.journal.cache import CacheMode
from rlm.providers.base import CompletionRequest
from rlm.testing.provider import FunctionProvider
from rlm.testing.sandboxes import LineLauncher
from rlm_sandbox.protocol import QueryRequest
from tests.helpers import assistant_turns, repl
from tests.traffic.test_gate import fake_provider, request


@pytest.fixture
def store(tmp_path: Path) -> Iterator[JournalStore]:
    opened = open_store(str(tmp_path / "cache.sqlite3"))
    yield opened
    opened.close()


def _gate(store: JournalStore, provider: FunctionProvider, mode: CacheMode, calls: int) -> Gate:
    return Gate(
        limiter=TieredLimiter(4, 0),
        providers={"root": provider, "sub": provider},
        events=EventBus(),
        ledger=Budget(limits=BudgetLimits(max_llm_calls=calls)),
        cache=ResponseCache(store, mode, run_sync=inline_run_sync),
    )


async def test_a_cached_answer_is_not_sent_and_takes_no_budget(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    provider = fake_provider(latency=1.0)
    first = _gate(store, provider, "read-write", calls=1)
    sent = await first.complete(request())
    again = _gate(store, provider, "read-write", calls=1)
    started = trio.current_time()
    replies = [await again.complete(dataclasses.replace(request(), call_id=c)) for c in "abc"]
    assert trio.current_time() == started  # no latency: nothing was sent
    assert len(provider.times) == 1
    assert [r.text for r in replies] == [sent.text] * 3
    assert again.cached_calls == 3 and again.ledger.usage().llm_calls == 0
    cached = [e for e in again._events.events if isinstance(e, LLMCached)]
    assert len(cached) == 3 and cached[0].input_tokens == 10 and cached[0].provider == "fake"


async def test_read_only_never_stores_and_refresh_never_replays(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    provider = fake_provider(latency=1.0)
    await _gate(store, provider, "read-only", calls=5).complete(request())
    await _gate(store, provider, "read-write", calls=5).complete(request())
    assert len(provider.times) == 2  # read-only stored nothing
    refresh = _gate(store, provider, "refresh", calls=5)
    await refresh.complete(request())
    assert len(provider.times) == 3 and refresh.cached_calls == 0


def test_the_digest_covers_what_decides_the_answer() -> None:
    base = CompletionRequest(messages=[{"role": "user", "content": "q"}], model="m")
    same = dataclasses.replace(base, lane="root", call_id="root.3", depth=2)
    assert request_digest("openai", base) == request_digest("openai", same)
    # Attribution only: a sub-query's parent is the asking call, so keeping it would tie
    # each entry to one place in the call tree and to how call ids were numbered.
    labelled = dataclasses.replace(base, parent_id="root.2", task=7, task_title="t7")
    assert request_digest("openai", base) == request_digest("openai", labelled)
    for other in (
        dataclasses.replace(base, model="m2"),
        dataclasses.replace(base, max_tokens=5),
        dataclasses.replace(base, messages=[{"role": "user", "content": "q2"}]),
    ):
        assert request_digest("openai", other) != request_digest("openai", base)
    assert request_digest("openai http://a", base) != request_digest("openai http://b", base)


async def test_group_commit_writes_many_items_in_few_transactions(
    autojump_clock: trio.abc.Clock,
) -> None:
    batches: list[list[int]] = []

    def commit(items: Sequence[int]) -> None:
        batches.append(list(items))

    async def slow_run_sync(fn, *args):  # type: ignore[no-untyped-def]
        await trio.sleep(0.01)  # a commit takes time; writers queue meanwhile
        return fn(*args)

    group: GroupCommit[int] = GroupCommit(commit, slow_run_sync)
    async with trio.open_nursery() as nursery:
        for i in range(100):
            nursery.start_soon(group.write, i)
    assert sorted(i for b in batches for i in b) == list(range(100))
    assert len(batches) <= 3


async def test_group_commit_reports_a_failed_commit_to_every_writer(
    autojump_clock: trio.abc.Clock,
) -> None:
    def commit(items: Sequence[int]) -> None:
        raise JournalError("disk full")

    group: GroupCommit[int] = GroupCommit(commit, inline_run_sync)
    failures = []

    async def write(i: int) -> None:
        try:
            await group.write(i)
        except JournalError as exc:
            failures.append(str(exc))

    async with trio.open_nursery() as nursery:
        for i in range(5):
            nursery.start_soon(write, i)
    assert failures == ["disk full"] * 5


def _bridge(gate: Gate, config: RunConfig | None = None) -> Bridge:
    return Bridge(
        config=config or RLM(provider="fixture").config,
        events=gate._events,
        gate=gate,
        budget=gate.ledger,
        abort=lambda exc: None,
        deadline=lambda: float("inf"),
    )


_ASKER = cast(Call, SimpleNamespace(call_id="root", parent_id=None, depth=0, iteration=1))


def _batch(prompts: list[str]) -> QueryRequest:
    return QueryRequest(1, True, prompts, None, None)


async def test_a_batch_is_checked_against_what_it_sends_not_what_the_cache_answers(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    provider = fake_provider(latency=1.0)
    prompts = [f"q{i}" for i in range(16)]
    filled = await _bridge(_gate(store, provider, "read-write", calls=20)).serve(
        _ASKER, _batch(prompts)
    )
    assert filled["ok"] and len(provider.times) == 16
    # --max-llm-calls 1: the 16 cached answers cost nothing, one new item may still be sent.
    replay = _gate(store, provider, "read-write", calls=1)
    answer = await _bridge(replay).serve(_ASKER, _batch(prompts))
    assert answer["ok"] and answer["value"] == ["ok"] * 16
    assert replay.cached_calls == 16 and len(provider.times) == 16
    answer = await _bridge(replay).serve(_ASKER, _batch([*prompts, "new"]))
    assert answer["ok"] and len(provider.times) == 17
    # Two uncached items over the one call left: the batch is refused whole, nothing sent.
    spent = _gate(store, provider, "read-write", calls=1)
    refused = await _bridge(spent).serve(_ASKER, _batch([*prompts, "a", "b"]))
    assert not refused["ok"] and refused["kind"] == "budget"
    assert len(provider.times) == 17 and spent.cached_calls == 0


_DEPTH_2 = RunConfig(max_depth=2).validate()


def _tree_run(gate: Gate) -> tuple[CallParts, LineLauncher]:
    """A run's parts at --max-depth 2 (an ``llm_query`` item is a child call), by hand."""
    launcher = LineLauncher()
    aborted: list[RLMError] = []
    bridge = _bridge(gate, _DEPTH_2)
    return CallParts(_DEPTH_2, gate._events, gate, launcher, bridge, aborted.append), launcher


def _tree_script(batch: int) -> FunctionProvider:
    """The root asks for ``batch`` child calls, then answers; each child answers at once."""

    def reply(request: CompletionRequest) -> str:
        if request.call_id != "root":
            return "FINAL(c)"
        return repl(f"batch {batch}") if assistant_turns(request) == 0 else "FINAL(root)"

    return FunctionProvider.scripted(reply)


async def test_cached_child_calls_do_not_count_against_the_call_limit(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    # Depth 2: each batch item is a child call.  A first run fills the cache ...
    first = _tree_script(3)
    parts, _ = _tree_run(_gate(store, first, "read-write", calls=100))
    assert (await Call.root(parts, "q", "ctx").run()).answer == "root"
    assert len(first.requests) == 5  # two root steps, one step per child
    # ... and a replay under --max-llm-calls 1 sends nothing: all five are cached.
    replay = _tree_script(3)
    gate = _gate(store, replay, "read-write", calls=1)
    parts, launcher = _tree_run(gate)
    assert (await Call.root(parts, "q", "ctx").run()).answer == "root"
    assert replay.requests == [] and gate.cached_calls == 5
    assert launcher.opened[0].executed and not any(
        isinstance(e, BudgetRefused) for e in gate._events.events
    )


async def test_uncached_child_calls_still_count_one_request_each(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    await Call.root(_tree_run(_gate(store, _tree_script(3), "read-write", calls=100))[0],
                    "q", "ctx").run()  # children "item 0" to "item 2" are cached
    # Another query, at --max-llm-calls 2: its root step is sent (1 left), and "batch 5"
    # has two new children: one call short, the batch is refused whole, no child starts.
    short = _tree_script(5)
    gate = _gate(store, short, "read-write", calls=2)
    await Call.root(_tree_run(gate)[0], "q2", "ctx").run()
    assert [r.call_id for r in short.requests] == ["root", "root"]  # its two steps only
    refused = [e for e in gate._events.events if isinstance(e, BudgetRefused)]
    assert [e.items for e in refused if e.scope == "batch"] == [5]
    # At 4 the two new children fit (the three cached ones are free), and the last step.
    enough = _tree_script(5)
    gate = _gate(store, enough, "read-write", calls=4)
    outcome = await Call.root(_tree_run(gate)[0], "q3", "ctx").run()
    assert outcome.answer == "root" and gate.cached_calls == 3
    assert sorted(r.call_id for r in enough.requests) == ["root", "root", "root.4", "root.5"]


async def test_cached_structured_items_are_free_at_any_depth(
    autojump_clock: trio.abc.Clock, store: JournalStore
) -> None:
    # With a schema every item is a sub-query, even where plain items would be child
    # calls (--max-depth 2): cached ones are looked up as such and cost nothing.
    provider = FunctionProvider.scripted(["unused"], sub=lambda request: '{"n": 1}')
    frame = _batch(["a", "b", "c"])._replace(schema='{"type": "object"}')
    filled = await _bridge(_gate(store, provider, "read-write", calls=10), _DEPTH_2).serve(
        _ASKER, frame
    )
    assert filled["ok"]
    replay = _gate(store, provider, "read-write", calls=1)
    answer = await _bridge(replay, _DEPTH_2).serve(_ASKER, frame)
    assert answer["ok"], answer
    assert len(provider.requests) == 3 and replay.cached_calls == 3
