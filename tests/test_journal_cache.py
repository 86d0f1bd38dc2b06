"""The response cache in front of the gate, in virtual time over a real SQLite journal.

Store calls run inline (no threads), so trio's autojump clock stays exact.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import trio

from rlm import RLM
from rlm._events import EventBus, LLMCached
from rlm._run.bridge import Bridge
from rlm._run.call import Call
from rlm._traffic.budget import Budget, BudgetLimits
from rlm._traffic.gate import Gate
from rlm._traffic.limiter import TieredLimiter
from rlm.errors import JournalError
from rlm.journal import JournalStore, ResponseCache, open_store, request_digest
from rlm.journal._threads import GroupCommit, inline_run_sync
from rlm.journal.cache import CacheMode
from rlm.providers.base import CompletionRequest
from rlm.testing.provider import FunctionProvider
from tests.test_gate import fake_provider, request


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


def _bridge(gate: Gate) -> Bridge:
    return Bridge(
        config=RLM(provider="fixture").config,
        events=gate._events,
        gate=gate,
        budget=gate.ledger,
        abort=lambda exc: None,
        deadline=lambda: float("inf"),
    )


_ASKER = cast(Call, SimpleNamespace(call_id="root", parent_id=None, depth=0, iteration=1))


def _batch(prompts: list[str]) -> dict[str, Any]:
    return {"fn": "llm_query_batched", "prompts": prompts, "contexts": None}


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
