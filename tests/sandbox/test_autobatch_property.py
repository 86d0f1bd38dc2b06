"""Property: a generated loop means the same with auto-batching as one call at a time.

Hypothesis writes loops — ``for`` over a list or ``enumerate``, ``while`` over an
index, comprehensions — whose bodies ask sub-queries with prompts that do or do not
depend on earlier answers, print, change state, ``continue``, ``break`` on an answer
and raise on one.  Run with a window of 0 and with a window of 1 to 8 against the
in-process host, the namespace, the printed output, the error and the prompts whose
answers were used must be equal; what speculation sent and did not use is at most
one window, and was cancelled.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.sandbox.autobatch_host import FakeHost, Ran, run_block

#: Statements of a loop body; ``x`` is the item, ``n`` its index.
STATEMENTS = [
    'a = llm_query(f"q {x}")',  # independent
    'a = llm_query(f"q {x} {n}", context=x)',
    'a = llm_query("about " + x.upper())',
    'b = llm_query(f"then {a[-6:]}")',  # depends on this item's answer
    'a = llm_query(f"after {prev[-6:]}: {x}")',  # depends on the previous item's answer
    'a = llm_query(f"count {k}: {x}")',  # carried state, predictable
    'a = llm_query(f"{len(out)} so far: {x}")',  # reads what the loop appends
    "out.append(a)",
    "out.append((x, a, len(a)))",
    "seen[x] = a",
    'print(n, x, a[:20])',
    "k += 1",
    "prev = a",
    'if x.endswith("3"):\n    continue',
    'if "STOP" in a:\n    break',
    'if "BOOM" in a:\n    raise ValueError("boom at " + x)',
    'if k % 3 == 0:\n    out.append(llm_query(f"every third {x}"))',
    'out.append(ask(x))',
]
PRELUDE = """\
out, seen, k, prev, a, b = [], {}, 0, "", "", ""
def ask(item):
    return llm_query(f"helper {item}")
"""


def answer_for(marks: dict[str, str]) -> object:
    def answer(prompt: str, context: str | None) -> str:
        for needle, word in marks.items():
            if needle in prompt:
                return f"{word} for {prompt}"
        return f"answer to {prompt}"
    return answer


def indent(code: str, by: str) -> str:
    return "\n".join(by + line for line in code.splitlines())


@st.composite
def loops(draw: st.DrawFn) -> str:
    body = "\n".join(draw(st.lists(st.sampled_from(STATEMENTS), min_size=1, max_size=5)))
    if "n" not in body and "x" not in body:
        body += "\nout.append(a)"
    form = draw(st.sampled_from(["for", "enumerate", "while", "comprehension"]))
    if form == "for":
        return f"n = 0\nfor x in items:\n{indent(body, '    ')}\n    n += 1"
    if form == "enumerate":
        return f"for n, x in enumerate(items):\n{indent(body, '    ')}"
    if form == "while":
        # the index moves first, so that continue cannot skip it
        return (f"i = 0\nwhile i < len(items):\n    x = items[i]\n    n = i\n    i += 1\n"
                f"{indent(body, '    ')}")
    return ('results = [(x, llm_query(f"c {x}"), ask(x)) for x in items if not x.endswith("7")]'
            if draw(st.booleans()) else
            'results = {x: llm_query(f"c {n} {x}") for n, x in enumerate(items)}')


def outcome(ran: Ran) -> tuple[object, ...]:
    data, skipped = ran.repl.export()
    return ran.result["output"], ran.result["error"], json.loads(data), skipped


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    loop=loops(),
    items=st.lists(st.sampled_from(["a1", "b2", "c3", "d4", "e5", "f6", "g7", "a1"]),
                   max_size=12),
    marks=st.dictionaries(st.sampled_from(["a1", "c3", "e5", "g7", "helper b2"]),
                          st.sampled_from(["STOP", "BOOM", "plain"]), max_size=2),
    window=st.integers(1, 8),
)
def test_a_generated_loop_means_the_same_with_and_without_auto_batching(
    loop: str, items: list[str], marks: dict[str, str], window: int
) -> None:
    code = f"items = {items!r}\n{PRELUDE}{loop}\n"
    answer = answer_for(marks)
    sequential = run_block(code, window=0, host=FakeHost(answer=answer))  # type: ignore[arg-type]
    batched = run_block(code, window=window, host=FakeHost(answer=answer))  # type: ignore[arg-type]
    assert outcome(batched) == outcome(sequential), code
    assert sorted(batched.host.prompts(used=True)) == sorted(sequential.host.prompts()), code
    unused = [call for call in batched.host.sent if not call.used]
    assert len(unused) <= window and all(call.cancelled for call in unused), code
    assert batched.host.speculative == {}, code  # nothing is left outstanding after the block
