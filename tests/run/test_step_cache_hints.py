"""What a call's steps tell providers about prompt caching: each step's conversation is
sent again at the next step (``cache_end``), under one key per run (``cache_key``), kept
across a session's questions; one-shot sub-queries carry neither."""

from __future__ import annotations

from rlm import RLM
from rlm.testing.provider import FunctionProvider, is_root_request
from tests.helpers import repl


async def test_a_runs_steps_share_one_key_and_each_run_has_its_own() -> None:
    provider = FunctionProvider.scripted([repl("x = llm_query('hi')"), "FINAL(done)"])
    model = RLM(providers={"root": provider, "sub": provider})
    await model.acompletion("q", "ctx")
    await model.acompletion("q", "ctx")
    roots = provider.root_requests()
    keys = [r.cache_key for r in roots]
    assert len(keys) == 4 and keys[0] == keys[1] != keys[2] == keys[3]
    assert all(k is not None and k.startswith("rlm-") for k in keys)
    assert all(r.cache_end for r in roots)
    subs = [r for r in provider.requests if not is_root_request(r)]
    assert subs and all(not r.cache_end and r.cache_key is None for r in subs)


async def test_a_sessions_questions_share_its_key() -> None:
    provider = FunctionProvider.scripted([repl("x = 1"), "FINAL(one)"])
    async with RLM(providers={"root": provider, "sub": provider}).asession("ctx") as session:
        await session.acompletion("first?")
        await session.acompletion("second?")
    keys = {r.cache_key for r in provider.root_requests()}
    assert len(keys) == 1 and None not in keys
