"""A reply far longer than ``max_reply_chars`` is kept cut in its call's conversation,
so every later step sends a bounded conversation; its code still runs whole."""

from __future__ import annotations

from rlm import RLM
from rlm.testing.provider import FunctionProvider
from tests.helpers import repl

HUGE = 2_000_000
CAP = 10_000


async def test_huge_replies_are_kept_cut_and_each_step_sends_a_bounded_conversation() -> None:
    padding = "word " * (HUGE // 5)
    replies = [
        # Prose first, its code past the cut: the block still runs.
        f"{padding}\n{repl('steps = 1')}",
        # A block holding a huge literal: its echo in the feedback is cut too.
        repl(f"blob = {'a' * HUGE!r}\nsteps += 1\nprint(len(blob))"),
        f"{padding}\n{repl('steps += 1')}",
        repl("answer = f'{steps} steps'\nFINAL_VAR('answer')"),
    ]
    provider = FunctionProvider.scripted(replies)
    model = RLM(providers={"root": provider, "sub": provider}, max_reply_chars=CAP)
    result = await model.acompletion("q", "ctx")

    assert result.status == "answered" and result.answer == "3 steps"  # every block ran
    sizes = [sum(len(m["content"]) for m in r.messages) for r in provider.root_requests()]
    # Three replies of 2 MB went by: each later request grew by about the cap, not by them.
    assert max(sizes) < 5 * CAP, sizes
    last = provider.root_requests()[-1].messages
    cut = [m["content"] for m in last if "[rlm cut this reply here" in m["content"]]
    assert len(cut) == 3 and all(f"keeps the first {CAP:,}" in text for text in cut)
    assert any(f"# [rlm cut this block here: {CAP:,} of its" in m["content"] for m in last)

    steps = [e for e in result.trace if e["event"] == "step_completed"]
    assert [e["reply_chars"] for e in steps[:3]] == [len(r) for r in replies[:3]]
    assert [e["reply_cut_chars"] for e in steps] == [
        *(len(r) - CAP for r in replies[:3]), 0
    ]
    # The trace keeps the reply as the conversation did: bounded too.
    assert all(len(e["reply"]) < 2 * CAP for e in steps)


async def test_a_reply_within_the_cap_is_kept_whole() -> None:
    provider = FunctionProvider.scripted(["FINAL(short)"])
    model = RLM(providers={"root": provider, "sub": provider}, max_reply_chars=1_000)
    result = await model.acompletion("q", "ctx")
    step = next(e for e in result.trace if e["event"] == "step_completed")
    assert result.answer == "short"
    assert step["reply"] == "FINAL(short)" and step["reply_cut_chars"] == 0
