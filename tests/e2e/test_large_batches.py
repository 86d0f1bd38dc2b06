"""Requests larger than a frame: carried between sandbox and host in parts (issue 31 item 10).

A child frame may hold 16 MiB; model code that sends a batch of 2,000 prompts of
10 KB (or a loop whose calls auto-batching sends ahead at 2 MB each) must never meet
that cap.  Real sandboxes; the sub-model answers each prompt with its number and size.
"""

from __future__ import annotations

from typing import Any

import pytest

from rlm import RLM, RunResult
from rlm.testing.provider import FunctionProvider
from rlm_sandbox.protocol import CHILD_FRAME_MAX_BYTES
from tests.helpers import repl


def numbered(request: Any) -> str:
    """The first word of the sub-query (the item's number) and how long it was."""
    text = str(request.messages[-1]["content"])
    return f"{text.split(maxsplit=1)[0]} of {len(text)}"


async def first_block(code: str, **settings: Any) -> dict[str, Any]:
    fake = FunctionProvider.scripted([repl(code), "FINAL(done)"], sub=numbered)
    model = RLM(providers=fake, max_llm_calls=None, max_concurrent=65, **settings)
    result: RunResult = await model.acompletion("q", "ctx")
    return next(e for e in result.trace
                if e["event"] == "code_executed" and e["call_id"] == "root")


@pytest.mark.parametrize("where", ["prompts", "contexts"])
async def test_a_batch_of_2000_prompts_of_10_kb_is_answered_in_order(where: str) -> None:
    assert CHILD_FRAME_MAX_BYTES < 2_000 * 10_000
    texts = "[f'{i} ' + 'x' * 10_000 for i in range(2_000)]"
    call = ("llm_query_batched(texts)" if where == "prompts" else
            "llm_query_batched([t.split()[0] for t in texts], contexts=texts)")
    executed = await first_block(f"""
texts = {texts}
answers = {call}
print(len(answers), answers[0].split()[0], answers[-1].split()[0])
print(all(a.split()[0] == str(i) for i, a in enumerate(answers)))
""")
    assert executed["ok"], executed["error"]
    assert executed["output"] == "2000 0 1999\nTrue\n"


async def test_a_loop_whose_calls_are_sent_ahead_may_ask_prompts_of_2_mb() -> None:
    """16 prompts of 2 MB each, sent ahead at once: 32 MB for one offer."""
    code = """
answers = []
for i in range(16):
    answers.append(llm_query(f"{i} " + "y" * 2_000_000))
print([a.split()[0] for a in answers] == [str(i) for i in range(16)], answers[-1])
"""
    outputs = [await first_block(code, auto_batch=auto_batch) for auto_batch in (False, True)]
    assert outputs[0]["ok"] and outputs[1]["ok"], outputs[1]["error"]
    assert outputs[0]["output"] == outputs[1]["output"] == "True 15 of 2000003\n"
