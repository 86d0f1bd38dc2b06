"""The gate against a real loopback fixture server: hidden caps and injected faults."""

from __future__ import annotations

from rlm import RLM
from rlm.fixtures.needle import generate_needle
from tests.helpers import serving

QUESTION = "What is the magic number?"


async def test_32_way_batch_under_a_hidden_cap_of_3_converges() -> None:
    needle = generate_needle(200_000, seed=11)
    async with serving(max_concurrent=3, sub_latency=0.2) as (url, server):
        model = RLM(
            base_url=url, model="fixture:32", max_concurrent=8, root_permits=1, max_retries=10
        )
        result = await model.acompletion(QUESTION, needle.text)
    assert result.answer == needle.answer
    sub = [e for e in result.trace if e["event"] == "llm_response" and e["lane"] == "sub"]
    assert sum(1 for e in sub if e["status"] == "ok") == 32
    rejected = server.stats.by_status.get(429, 0)
    assert rejected <= 16  # few 429s: well under one per sub-query
    changes = [e for e in result.trace if e["event"] == "capacity_changed"]
    assert changes and changes[0]["reason"] == "overload"
    assert min(e["new"] for e in changes) <= 3
    assert server.stats.max_in_flight <= 8
    assert result.traffic["lanes"]["sub"]["rate_limited"] == rejected


async def test_faulty_server_still_gives_the_right_answer_and_every_result() -> None:
    needle = generate_needle(200_000, seed=12)
    async with serving(fail_500=0.10, drop=0.05, fail_529=0.05, sub_latency=0.01, seed=5) as (
        url,
        server,
    ):
        model = RLM(base_url=url, model="fixture:32", max_retries=6)
        result = await model.acompletion(QUESTION, needle.text)
    assert result.status == "answered" and result.answer == needle.answer
    bridge = [e for e in result.trace if e["event"] == "bridge_call_finished"]
    assert bridge[0]["items"] == 32 and bridge[0]["failed_items"] == 0
    retries = [e for e in result.trace if e["event"] == "llm_retry"]
    assert retries  # the faults happened and were retried
    assert result.usage.llm_calls == server.stats.total_requests
