"""Auto-batching end to end: real sandboxes, sub-queries to the loopback fixture server.

The root is scripted (each test's loop is its first block); every sub-query goes
over HTTP to the fixture server, which counts the requests it holds at once.  Each
loop runs twice, with ``auto_batch`` off and on: the printed output must be the
same, and with it on the server must have held 16 sub-queries at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest

from rlm import RLM, RunResult
from rlm.fixtures.needle import generate_needle
from rlm.providers.openai import OpenAIProvider
from rlm.testing.provider import FunctionProvider
from rlm.testing.server import FixtureServer
from tests.helpers import repl, serving

SUB_S = 0.05
CHUNKS = 'chunks = [context[i * 40:(i + 1) * 40] for i in range(16)]\n'

FORMS = {
    "for loop": """
results = []
for chunk in chunks:
    results.append(llm_query(f"What is the magic number?\\n\\nText:\\n{chunk}"))
print(results)
""",
    "while loop and a helper": """
def ask(text):
    return llm_query("What is the magic number? " + text.strip())
i, results = 0, []
while i < len(chunks):
    results.append(ask(chunks[i]))
    print(i, results[-1][:20])
    i += 1
""",
    "nested loops": """
docs = [chunks[:8], chunks[8:]]
for d, doc in enumerate(docs):
    for part in doc:
        print(d, llm_query(f"Magic number in: {part}")[:20])
""",
    "ThreadPoolExecutor.map": """
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(max_workers=4) as pool:
    print(list(pool.map(llm_query, [f"Magic number? {c}" for c in chunks])))
""",
    "asyncio.gather over to_thread": """
import asyncio
async def main():
    return await asyncio.gather(*[asyncio.to_thread(llm_query, f"Number? {c}")
                                  for c in chunks])
print(asyncio.run(main()))
""",
}


@asynccontextmanager
async def sub_model(**options: Any) -> AsyncIterator[tuple[OpenAIProvider, FixtureServer]]:
    """The fixture server on loopback, and a provider that sends it sub-queries."""
    async with serving(sub_latency=SUB_S, **options) as (url, server), httpx2.AsyncClient(
    ) as client:
        yield OpenAIProvider(client, url, None), server


async def run(code: str, *, auto_batch: bool, **settings: Any
              ) -> tuple[RunResult, FixtureServer]:
    async with sub_model() as (sub, server):
        root = FunctionProvider.scripted([repl(code), "FINAL(done)"])
        model = RLM(providers={"root": root, "sub": sub}, max_concurrent=17,
                    auto_batch=auto_batch, **settings)
        context = generate_needle(700, seed=3).text
        return await model.acompletion("q", context), server


def printed(result: RunResult) -> str:
    """What the root's first block printed."""
    executed = next(e for e in result.trace
                    if e["event"] == "code_executed" and e["call_id"] == "root")
    assert executed["ok"], executed["error"]
    return str(executed["output"])


@pytest.mark.parametrize("form", sorted(FORMS))
async def test_each_form_sends_16_at_once_and_prints_what_it_printed_before(form: str) -> None:
    sequential, one_by_one = await run(CHUNKS + FORMS[form], auto_batch=False)
    batched, at_once = await run(CHUNKS + FORMS[form], auto_batch=True)
    assert printed(batched) == printed(sequential)
    assert one_by_one.stats.max_in_flight == 1
    assert at_once.stats.max_in_flight == 16
    assert at_once.stats.sub_requests == one_by_one.stats.sub_requests == 16


async def test_a_loop_that_breaks_at_item_10_sends_at_most_26() -> None:
    code = """
prompts = [f"Is the magic number here? item {i}" for i in range(100)]
for n, p in enumerate(prompts):
    answer = llm_query(p)
    if n == 9 or "NOT FOUND" not in answer:
        break
print("stopped at", n)
"""
    sequential, one_by_one = await run(code, auto_batch=False)
    batched, at_once = await run(code, auto_batch=True)
    assert printed(batched) == printed(sequential) == "stopped at 9\n"
    assert one_by_one.stats.sub_requests == 10
    assert 10 < at_once.stats.sub_requests <= 10 + 16
    [loop] = [e for e in batched.trace if e["event"] == "loop_batched"]
    # Started ahead, some were cancelled before a permit let them reach the server.
    assert loop["used"] == 10 and at_once.stats.sub_requests <= loop["calls"] <= 10 + 16


async def test_a_loop_whose_prompts_depend_on_answers_gives_the_sequential_answer() -> None:
    code = CHUNKS + """
summary = ""
for chunk in chunks:
    summary = llm_query(f"Magic number so far: {summary[:20]}. Text: {chunk}")
print(summary)
"""
    sequential, _ = await run(code, auto_batch=False)
    batched, server = await run(code, auto_batch=True)
    assert printed(batched) == printed(sequential)
    assert server.stats.max_in_flight == 1 and server.stats.sub_requests == 16
    assert not [e for e in batched.trace if e["event"] == "loop_batched"]


async def test_child_calls_with_a_context_run_concurrently_at_depth_2() -> None:
    needle = generate_needle(4_000, seed=8)
    code = """
parts = [context[i * 1000:(i + 1) * 1000 + 100] for i in range(4)]
answers = [llm_query("What is the magic number?", context=p) for p in parts]
print([a.strip() for a in answers])
"""
    outputs = []
    for auto_batch in (False, True):
        async with sub_model() as (sub, _):
            root = FunctionProvider.scripted([repl(code), "FINAL(done)"])
            model = RLM(providers={"root": root, "sub": sub}, max_concurrent=9, max_depth=2,
                        model="fixture:2", auto_batch=auto_batch)
            result = await model.acompletion("q", needle.text)
        outputs.append(printed(result))
        children = [e for e in result.trace if e["event"] == "call_started" and e["depth"] == 1]
        assert len(children) == 4
        started = sorted(e["t"] for e in children)
        first_done = min(e["t"] for e in result.trace
                         if e["event"] == "call_finished" and e["depth"] == 1)
        alive_together = sum(1 for t in started if t < first_done)
        assert alive_together == (4 if auto_batch else 1)
    assert outputs[0] == outputs[1] and needle.answer in outputs[0]
