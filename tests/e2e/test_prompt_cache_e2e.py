"""The root conversation is read from Anthropic's prompt cache, step after step, against
the loopback fixture server billing cached reads and writes as the Messages API does."""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio

from rlm import RLM, RunResult
from rlm import prompts as shipped
from rlm._traffic.prices import PriceTable
from rlm.testing.anthropic_dialect import CacheBlock, PromptCache
from rlm.testing.server import FixtureServer
from tests.helpers import serving

MODEL = "claude-sonnet-4"  # priced; the fixture server answers any name as its model
# No "the magic number is" in it: the root's first code finds nothing, so a second step
# comes, which sends the first one again.
HAYSTACK = "Nothing to see in this line of the log.\n" * 400


def _events(result: RunResult, kind: str, **match: Any) -> list[dict[str, Any]]:
    return [e for e in result.trace if e["event"] == kind
            and all(e.get(k) == v for k, v in match.items())]


async def _run(url: str, query: str = "What is the magic number?") -> RunResult:
    model = RLM(provider="anthropic", base_url=url.removesuffix("/v1"), api_key="k",
                model=MODEL)
    return await model.acompletion(query, HAYSTACK)


async def test_each_step_reads_the_steps_before_it_from_the_cache_and_pays_the_cached_rate(
) -> None:
    async with serving(chunks=4) as (url, _):
        result = await _run(url)
        # Another run, another question: only the system prompt is as it was.
        again = await _run(url, "What is the secret code?")
    steps = _events(result, "step_completed", call_id="root")
    assert len(steps) == 2, [s["reply"] for s in steps]
    first, second = steps
    # Step 1 wrote its whole conversation (system prompt and query); step 2 read all of
    # it back, and wrote only what step 1's reply and its output added.
    assert first["cached_input_tokens"] == 0
    assert first["cache_write_tokens"] == first["input_tokens"] > 1024
    assert second["cached_input_tokens"] == first["input_tokens"]
    assert second["cache_write_tokens"] == second["input_tokens"] - first["input_tokens"] > 0

    # Cost: cached input at the cached rate, writes at the write rate.
    price = PriceTable.default().lookup(MODEL)
    assert price is not None
    root = _events(result, "llm_response", lane="root", status="ok")
    for step, response in zip(steps, root, strict=True):
        expected = price.cost(step["input_tokens"], step["output_tokens"],
                              step["cached_input_tokens"], step["cache_write_tokens"])
        assert response["cost"] == pytest.approx(expected)
    plain = price.cost(second["input_tokens"], second["output_tokens"])
    assert root[1]["cost"] < plain  # most of step 2 came from the cache

    # Sub-queries are one-shot: nothing of theirs is marked, written or read.
    subs = _events(result, "llm_response", lane="sub")
    assert subs and not any(s["metadata"].get("cached_tokens") for s in subs)
    assert not any(s["metadata"].get("cache_write_tokens") for s in subs)

    # The system prompt's breakpoint stays: another run reads it from the cache at once.
    system_tokens = math.ceil(len(shipped.load("system")) / 4)
    opening = _events(again, "step_completed", call_id="root")[0]
    assert opening["cached_input_tokens"] == system_tokens


async def test_the_page_shows_each_steps_cached_input(tmp_path: Any) -> None:
    from rlm.view import load_trace
    from rlm.view.model import build_model

    async with serving(chunks=4) as (url, _):
        model = RLM(provider="anthropic", base_url=url.removesuffix("/v1"), api_key="k",
                    model=MODEL, trace_path=str(tmp_path / "t.jsonl"))
        result = await model.acompletion("What is the magic number?", HAYSTACK)
    # The page's model runs trio itself (its ideal-makespan figure): not inside this test's.
    page = await trio.to_thread.run_sync(build_model, load_trace(tmp_path / "t.jsonl"))
    root = next(c for c in page["calls"] if c["id"] == "root")
    traced = _events(result, "step_completed", call_id="root")
    assert [s["cached_input_tokens"] for s in root["steps"]] == [
        s["cached_input_tokens"] for s in traced
    ]
    assert root["steps"][1]["cached_input_tokens"] > 0


def test_the_fixture_cache_looks_back_20_blocks_and_writes_only_long_prefixes() -> None:
    cache = PromptCache(min_tokens=10)
    long = "x" * 40  # 10 tokens

    def blocks(n: int, marked_at: tuple[int, ...]) -> list[CacheBlock]:
        return [CacheBlock("user", long, i in marked_at) for i in range(n)]

    assert cache.usage("m", blocks(2, (1,))) == (0, 20)
    cache.write("m", blocks(2, (1,)))
    assert cache.usage("m", blocks(2, (1,))) == (20, 0)  # the same request again
    assert cache.usage("m", blocks(21, (20,))) == (20, 190)  # 19 blocks back: found
    assert cache.usage("m", blocks(23, (22,))) == (0, 230)  # 21 back: past the lookback
    assert cache.usage("other", blocks(2, (1,))) == (0, 20)  # a cache per model
    short = [CacheBlock("user", "tiny", True)]
    assert cache.usage("m", short) == (0, 0)  # below min_tokens: never written


async def test_more_than_four_breakpoints_are_refused_as_the_api_does() -> None:
    import httpx2

    block = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
    body = {"model": MODEL, "max_tokens": 10,
            "messages": [{"role": "user", "content": [block] * 5}]}
    async with serving(server=FixtureServer()) as (url, _), httpx2.AsyncClient() as client:
        answer = await client.post(f"{url}/messages", json=body)
    assert answer.status_code == 400
    assert "A maximum of 4 blocks with cache_control" in answer.text
