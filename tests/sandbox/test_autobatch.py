"""Auto-batching in process: each loop form runs its sub-queries concurrently, meaning kept.

A REPL runs each block twice against the fake host of ``autobatch_host.py``: with
a window of 0 (the code as written, one call at a time) and with the window of
16 sub slots.  The printed output, the error, the variables and the prompts
whose answers were used must be the same; with the window, the 16 sub-queries
of 0.3 s overlap (the host's simulated clock: no wall clock is read).
"""

from __future__ import annotations

import pytest

from tests.sandbox.autobatch_host import FakeHost, Ran, block, run_block

CHUNKS = 'chunks = [f"c{i}" for i in range(16)]\nprompts = [f"S: {c}" for c in chunks]\n'

#: The loop forms models write (issue 28), each asking 16 independent sub-queries.
FORMS = {
    "for, append to a list": """
        results = []
        for chunk in chunks:
            results.append(llm_query(f"Summarise: {chunk}"))
        """,
    "for, assign into a dict": """
        out = {}
        for i, chunk in enumerate(chunks):
            out[i] = llm_query(f"Summarise: {chunk}")
        """,
    "list comprehension": 'results = [llm_query(f"S: {c}") for c in chunks]',
    "dict comprehension": 'results = {c: llm_query(f"S: {c}") for c in chunks}',
    "generator expression": 'joined = " | ".join(llm_query(f"S: {c}") for c in chunks)',
    "map(lambda)": 'results = list(map(lambda c: llm_query("S: " + c), chunks))',
    "map of llm_query": "results = list(map(llm_query, prompts))",
    "while over an index": """
        results = []
        i = 0
        while i < len(chunks):
            results.append(llm_query(f"S: {chunks[i]}"))
            i += 1
        """,
    "helper function": """
        def ask(c):
            prompt = f"Summarise this: {c.strip()}"
            return llm_query(prompt)
        results = []
        for c in chunks:
            results.append(ask(c))
        """,
    "dataclass from the answer": """
        from dataclasses import dataclass
        @dataclass
        class Item:
            name: str
            summary: str
        items = [Item(name=c, summary=llm_query(f"S: {c}").strip()) for c in chunks]
        summaries = [(item.name, item.summary) for item in items]
        """,
    "tuple from the answer": """
        pairs = []
        for c in chunks:
            answer = llm_query(f"S: {c}")
            pairs.append((c, answer, len(answer)))
        """,
    "print per item": """
        for n, c in enumerate(chunks):
            answer = llm_query(f"Q: {c}")
            print(n, answer)
        """,
    "nested loops": """
        docs = [chunks[i:i + 4] for i in range(0, 16, 4)]
        found = []
        for d, doc in enumerate(docs):
            for part in doc:
                found.append(llm_query(f"doc {d}: {part}"))
        """,
    "llm_query with context=": """
        results = []
        for c in chunks:
            results.append(llm_query("What is in it?", context=c))
        """,
    "slices of the context": """
        text = "".join(chunks)
        step = max(1, len(text) // 16)
        answers = []
        for start in range(0, step * 16, step):
            answers.append(llm_query(f"Find it in: {text[start:start + step]}"))
        """,
    "a skipped item": """
        answers = []
        for c in chunks + ["", "  "]:
            if not c.strip():
                continue
            answers.append(llm_query(f"S: {c}"))
        """,
    "ThreadPoolExecutor.map": """
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(llm_query, prompts))
        """,
    "submit and as_completed": """
        import concurrent.futures
        results = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            futures = {pool.submit(llm_query, p): i for i, p in enumerate(prompts)}
            for future in concurrent.futures.as_completed(futures):
                results[futures[future]] = future.result()
                print(futures[future])
        """,
    "asyncio.gather over to_thread": """
        import asyncio
        async def main():
            return await asyncio.gather(*[asyncio.to_thread(llm_query, p) for p in prompts])
        results = asyncio.run(main())
        """,
    "asyncio.gather over a coroutine helper": """
        import asyncio
        async def ask(c):
            answer = await asyncio.to_thread(llm_query, f"S: {c}")
            print("got", c)
            return answer.upper()
        async def main():
            return await asyncio.gather(*(ask(c) for c in chunks))
        results = asyncio.run(main())
        """,
}


def both(code: str, host: type[FakeHost] = FakeHost, **options: object) -> tuple[Ran, Ran]:
    """``code`` run one call at a time, then with a window of 16."""
    code = block(code)
    return (run_block(code, window=0, host=FakeHost(**options)),  # type: ignore[arg-type]
            run_block(code, window=16, host=FakeHost(**options)))  # type: ignore[arg-type]


def assert_same_meaning(sequential: Ran, batched: Ran) -> None:
    assert batched.error == sequential.error
    assert batched.output == sequential.output
    assert repr(batched.variables()) == repr(sequential.variables())
    assert sorted(batched.host.prompts(used=True)) == sorted(sequential.host.prompts())


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_independent_form_runs_its_sub_queries_at_once(form: str) -> None:
    sequential, batched = both(block(CHUNKS, FORMS[form]))
    assert sequential.error is None, sequential.error
    assert_same_meaning(sequential, batched)
    assert len(sequential.host.sent) == len(batched.host.sent) >= 16  # nothing wasted
    assert sequential.host.most_in_flight() == 1
    assert batched.host.most_in_flight() == 16
    # On the fake's simulated clock (virtual time): one round of 0.3 s instead of 16.
    assert sequential.host.clock == pytest.approx(0.3 * len(sequential.host.sent))
    assert batched.host.clock <= 0.45


def found_at_10(prompt: str, context: str | None) -> str:
    return "FOUND" if prompt.endswith("c9") else f"nothing in {prompt}"


@pytest.mark.parametrize("loop", [
    """
    hit = None
    for c in chunks:
        if llm_query(f"look at {c}") == "FOUND":
            hit = c
            break
    """,
    """
    found, i = False, 0
    while not found and i < len(chunks):
        found = llm_query(f"look at {chunks[i]}") == "FOUND"
        i += 1
    """,
])
def test_a_loop_that_breaks_at_item_10_sends_at_most_10_plus_16(loop: str) -> None:
    code = block('chunks = [f"c{i}" for i in range(100)]', loop)
    sequential, batched = both(code, answer=found_at_10)
    assert_same_meaning(sequential, batched)
    assert len(sequential.host.sent) == 10
    assert 10 < len(batched.host.sent) <= 10 + 16
    unused = [call for call in batched.host.sent if not call.used]
    assert unused and all(call.cancelled for call in unused)
    assert batched.host.loops[-1] == {"loop": 1, "cancel": len(unused), "end": True}


@pytest.mark.parametrize("loop", [
    # a running summary passed into the next prompt
    """
    summary = ""
    for c in chunks:
        summary = llm_query(f"So far: {summary[-30:]}. Next: {c}")
    """,
    # a found flag that changes the next prompt
    """
    found = False
    notes = []
    for c in chunks:
        notes.append(llm_query(f"{'check again' if found else 'look'}: {c}"))
        found = found or "c3" in notes[-1]
    """,
    # the answers so far, read through the list they are appended to
    """
    notes = []
    for c in chunks:
        notes.append(llm_query(f"{len(notes)} notes so far; next {c}"))
    """,
    # a prompt built from the previous answer in a while loop
    """
    i, last = 0, "start"
    while i < len(chunks):
        last = llm_query(f"after {last[:12]}: {chunks[i]}")
        i += 1
    """,
])
def test_a_loop_whose_prompts_depend_on_answers_runs_as_written(loop: str) -> None:
    sequential, batched = both(block(CHUNKS, loop))
    assert_same_meaning(sequential, batched)
    assert batched.host.prompts() == sequential.host.prompts()  # same calls, same order
    assert batched.host.speculative == {} and batched.host.loops == []


def test_an_exception_at_item_k_leaves_what_the_sequential_loop_left() -> None:
    code = block(CHUNKS, """
    out = []
    for n, c in enumerate(chunks):
        out.append(llm_query(f"S: {c}"))
        print(n, out[-1])
        if n == 5:
            raise ValueError(f"bad item {c}")
    """)
    sequential, batched = both(code)
    assert batched.error is not None and "ValueError: bad item c5" in batched.error
    assert_same_meaning(sequential, batched)
    assert batched.repl.namespace["out"] == [f"A[S: c{i}]" for i in range(6)]


def test_a_budget_refusal_comes_at_the_same_item() -> None:
    code = block(CHUNKS, """
    out = []
    try:
        for c in chunks:
            out.append(llm_query(f"S: {c}"))
    except BudgetExceeded:
        print("refused after", len(out))
    """)
    sequential, batched = both(code, max_calls=12)
    assert sequential.output == "refused after 12\n"
    assert_same_meaning(sequential, batched)
    assert len(batched.host.sent) == 12  # the speculation asked no more than the budget


def test_error_slots_come_back_per_item_as_they_do_today() -> None:
    def flaky(prompt: str, context: str | None) -> str:
        return "Error: ProviderError: 500" if prompt.endswith("3") else prompt.upper()

    sequential, batched = both(block(CHUNKS, 'r = [llm_query(f"S: {c}") for c in chunks]'),
                               answer=flaky)
    assert_same_meaning(sequential, batched)
    assert batched.repl.namespace["r"][3].startswith("Error:")


def test_prints_keep_loop_order_whatever_order_the_answers_come_in() -> None:
    slow_first = FakeHost()
    code = block(CHUNKS, """
    for c in chunks[:4]:
        print("before", c)
        print("answer", llm_query(f"S: {c}"))
    """)
    ran = run_block(code, host=slow_first)
    assert ran.output.splitlines()[:4] == ["before c0", "answer A[S: c0]", "before c1",
                                           "answer A[S: c1]"]


def test_a_helper_from_an_earlier_block_is_predicted_too() -> None:
    host = FakeHost()
    first = run_block('def ask(c):\n    return llm_query(f"About {c}")\n', host=host)
    assert first.error is None
    second = run_block(block(CHUNKS, "answers = [ask(c) for c in chunks]"), host=host,
                       repl=first.repl)
    assert second.error is None and host.most_in_flight() == 16


def test_speculation_never_runs_model_code_early() -> None:
    # Formatting an item of a class of the model's runs its code: that item is not
    # predicted, so its __format__ runs exactly when the loop gets to it.
    code = block(CHUNKS, """
    class Loud:
        def __init__(self, name):
            self.name = name
        def __format__(self, spec):
            print("formatting", self.name)
            return self.name
    items = [Loud(c) for c in chunks[:3]]
    for item in items:
        print("asking", llm_query(f"S: {item}"))
    """)
    sequential, batched = both(code)
    assert_same_meaning(sequential, batched)
    assert batched.output.splitlines()[:2] == ["formatting c0", "asking A[S: c0]"]


def test_a_wrong_prediction_stops_the_lookahead_and_wastes_at_most_a_window() -> None:
    # The helper is rebound inside the loop: its prompts are no longer the predicted ones.
    code = block(CHUNKS, """
    def ask(c):
        return llm_query(f"v1 {c}")
    out = []
    for c in chunks:
        out.append(ask(c))
        def ask(c):
            return llm_query(f"v2 {c}")
    """)
    sequential, batched = both(code)
    assert_same_meaning(sequential, batched)
    unused = [call for call in batched.host.sent if not call.used]
    assert 0 < len(unused) <= 16 and all(call.cancelled for call in unused)


def test_speculative_calls_outstanding_plus_wasted_never_pass_the_window() -> None:
    # Three loops in one block, each breaking early: all together waste at most one window.
    code = block('chunks = [f"c{i}" for i in range(60)]', """
    for start in (0, 20, 40):
        for c in chunks[start:]:
            if llm_query(f"look {c}").endswith("c5"):
                break
    """)
    ran = run_block(code, window=8)
    assert ran.error is None
    unused = [call for call in ran.host.sent if not call.used]
    assert len(unused) <= 8


def test_no_window_means_the_code_runs_as_written() -> None:
    ran = run_block(block(CHUNKS, FORMS["for, append to a list"]), window=0)
    assert ran.host.speculative == {} and ran.host.loops == []
    assert ran.host.most_in_flight() == 1


def test_a_block_that_names_no_sub_query_is_compiled_as_written() -> None:
    import ast

    from rlm_sandbox.autobatch import rewrite

    source = block(CHUNKS, "lengths = []\nfor c in chunks:\n    lengths.append(len(c))")
    tree = ast.parse(source)
    before = ast.dump(tree)
    assert ast.dump(rewrite(tree)) == before
    ran = run_block(source)
    assert ran.error is None and ran.host.sent == []
