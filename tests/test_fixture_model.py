"""The scripted fixture model and the in-process FixtureProvider (virtual time)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from RestrictedPython.compile import compile_restricted

from rlm.errors import ProviderStatusError
from rlm.fixtures import generate_needle
from rlm.providers.base import CompletionRequest, Message
from rlm.providers.fixture import (
    FIXTURE_FINGERPRINT,
    NOT_FOUND,
    FixtureModel,
    FixtureProvider,
    fixture_reply,
    is_fixture_answer,
    is_root_request,
    parse_fixture_model,
    sub_reply,
    volley_reply,
)

# RestrictedPython warns that the code prints without reading `printed`; the sandbox
# supplies its own print, so that is expected here.
pytestmark = pytest.mark.filterwarnings("ignore:.*Prints, but never reads:SyntaxWarning")

SYSTEM = Message(role="system", content="You are an RLM. Use llm_query_batched(prompts) ...")
QUESTION = "What is the magic number?"
INSTRUCTIONS = f"{QUESTION}\nAnswer with the value only, or NOT FOUND.\n\nText:\n"


def root_messages(query: str = QUESTION, *turns: str) -> list[Message]:
    """A root conversation: system, first user, then alternating assistant/user turns."""
    first = Message(role="user", content=f"context is a str of 9 chars.\nQuery: {query}")
    messages = [SYSTEM, first]
    for i, turn in enumerate(turns):
        messages.append(Message(role="assistant" if i % 2 == 0 else "user", content=turn))
    return messages


def code_of(reply: str) -> str:
    match = re.search(r"```repl\n(.*?)```", reply, re.DOTALL)
    assert match is not None, reply
    return match.group(1)


def run_code(code: str, context: str | list[str]) -> tuple[list[str], dict[str, Any]]:
    """Run REPL code with fake bridge functions; return the sub prompts and namespace."""
    prompts: list[str] = []

    def llm_query(prompt: str) -> str:
        prompts.append(prompt)
        return sub_reply(prompt)

    namespace: dict[str, Any] = {
        "context": context,
        "llm_query": llm_query,
        "llm_query_batched": lambda ps: [llm_query(p) for p in ps],
        "FINAL_VAR": lambda name: namespace.setdefault("final", namespace[name]),
        "print": lambda *args: namespace.setdefault("printed", []).append(" ".join(map(str, args))),
    }
    exec(compile(code, "<repl>", "exec"), namespace)
    return prompts, namespace


# -- the sub-model -----------------------------------------------------------------------


def test_sub_model_finds_the_value() -> None:
    prompt = f"{INSTRUCTIONS}x. The magic number is 4711. y"
    assert sub_reply(prompt) == "4711"
    assert sub_reply("what is the Secret Code?\nText:\nthe secret   code is XK-9, ok") == "XK-9"
    assert sub_reply("What is magic number\nTHE MAGIC NUMBER IS 12!") == "12"


def test_sub_model_matches_case_insensitively_as_re_does() -> None:
    # The quick check before the search must not drop what re.IGNORECASE finds: the
    # dotless i matches "i" there, the Kelvin sign "k", the long s "s".
    assert sub_reply("What is the magician?\nText:\nTHE MAGıCIAN IS 42.") == "42"
    assert sub_reply("What is the key?\nText:\nthe \u212aey is 7") == "7"
    assert sub_reply("What is the size?\nText:\nthe \u017fize is 3") == "3"


@pytest.mark.parametrize(
    "prompt",
    [
        f"{QUESTION}\nAnswer with the value only, or NOT FOUND.\n\nText:\nnothing here at all",
        "Summarise this text.\nThe magic number is 5.",
        "",
        "What is ?\nthe  is 5",
    ],
)
def test_sub_model_says_not_found(prompt: str) -> None:
    assert sub_reply(prompt) == NOT_FOUND


def test_root_or_sub_is_decided_by_the_system_prompt() -> None:
    assert is_root_request(root_messages())
    assert not is_root_request([Message(role="user", content="llm_query_batched?")])
    sub = [Message(role="user", content=f"{QUESTION}\nText:\nthe magic number is 9.")]
    assert fixture_reply(sub, "fixture") == "9"


# -- model names -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("fixture", FixtureModel("batched", 16)),
        ("fixture-batched", FixtureModel("batched", 16)),
        ("fixture-sequential", FixtureModel("sequential", 16)),
        ("fixture:32", FixtureModel("batched", 32)),
        ("fixture-sequential:8", FixtureModel("sequential", 8)),
        ("some-other-model", FixtureModel("batched", 16)),
    ],
)
def test_model_name_parsing(name: str, expected: FixtureModel) -> None:
    assert parse_fixture_model(name) == expected


def test_model_name_default_chunks_and_bad_suffix() -> None:
    assert parse_fixture_model("fixture", 5) == FixtureModel("batched", 5)
    assert parse_fixture_model("fixture:7", 5) == FixtureModel("batched", 7)
    for bad in ("fixture:0", "fixture:x", "fixture:-3"):
        with pytest.raises(ValueError, match="chunk"):
            parse_fixture_model(bad)


# -- the scripted root -------------------------------------------------------------------


def test_step_one_batched_code_compiles_and_fans_out() -> None:
    reply = fixture_reply(root_messages(), "fixture")
    assert reply.index("```repl") > 20  # a sentence of reasoning comes first
    code = code_of(reply)
    compile(code, "<repl>", "exec")
    compile_restricted(code, "<repl>", "exec")  # what the sandbox compiles with
    assert "answers = llm_query_batched(prompts)" in code
    assert "question = 'What is the magic number?'" in code
    assert 'FINAL_VAR("answer")' in code


def test_step_one_sequential_code_loops_over_llm_query() -> None:
    code = code_of(fixture_reply(root_messages(), "fixture-sequential:8"))
    compile(code, "<repl>", "exec")
    compile_restricted(code, "<repl>", "exec")
    assert "for p in prompts:\n    answers.append(llm_query(p))" in code
    assert "llm_query_batched" not in code


@pytest.mark.parametrize(("model", "chunks"), [("fixture", 16), ("fixture-sequential:8", 8)])
def test_step_one_code_finds_the_needle(model: str, chunks: int) -> None:
    fixture = generate_needle(200_000, seed=9, depth=0.37)
    code = code_of(fixture_reply(root_messages(), model))
    prompts, namespace = run_code(code, fixture.text)
    assert len(prompts) == chunks
    assert namespace["final"] == fixture.answer
    assert namespace["printed"] == [f"{chunks} chunks, 1 hits"]
    assert prompts[0].startswith(INSTRUCTIONS)


def test_step_one_code_handles_a_list_of_documents_and_no_hit() -> None:
    fixture = generate_needle(50_000, seed=2)
    code = code_of(fixture_reply(root_messages(), "fixture:4"))
    docs = [fixture.text[:20_000], fixture.text[20_000:], "tiny", ""]
    prompts, namespace = run_code(code, docs)
    assert 4 <= len(prompts) <= 7
    assert namespace["final"] == fixture.answer
    prompts, namespace = run_code(code, "no needle in this haystack " * 100)
    assert "final" not in namespace
    assert namespace["printed"] == [f"{len(prompts)} chunks, 0 hits"]


@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=80))
def test_step_one_code_compiles_for_any_query(query: str) -> None:
    compile(code_of(fixture_reply(root_messages(query), "fixture")), "<repl>", "exec")


def test_no_hit_then_final_not_found() -> None:
    first = fixture_reply(root_messages(), "fixture")
    second = fixture_reply(root_messages(QUESTION, first, "Code executed:\n16 chunks, 0 hits"), "f")
    assert second.splitlines()[-1] == "FINAL(NOT FOUND)"


def test_error_gets_one_probe_then_final() -> None:
    first = fixture_reply(root_messages(), "fixture")
    error = "Code executed:\nTraceback (most recent call last):\nNameError: name 'x' is not defined"
    probe = fixture_reply(root_messages(QUESTION, first, error), "fixture")
    code = code_of(probe)
    compile_restricted(code, "<repl>", "exec")
    fixture = generate_needle(30_000, seed=4)
    _, namespace = run_code(code, fixture.text)
    assert namespace["printed"] == [f"answer: {fixture.answer}"]
    output = f"Code executed:\nanswer: {fixture.answer}"
    last = fixture_reply(root_messages(QUESTION, first, error, probe, output), "fixture")
    assert last.splitlines()[-1] == f"FINAL({fixture.answer})"
    # A second error after the probe ends the call instead of probing again.
    again = fixture_reply(root_messages(QUESTION, first, error, probe, error), "fixture")
    assert again.splitlines()[-1] == "FINAL(NOT FOUND)"


def test_never_loops_after_three_replies() -> None:
    error = "Code executed:\nTraceback (most recent call last):\nValueError: boom"
    turns = ["a", error, "b", error, "c", error, "d", error]
    for n in range(2, len(turns) + 1, 2):
        reply = fixture_reply(root_messages(QUESTION, *turns[:n]), "fixture")
        if n >= 4:
            assert reply.splitlines()[-1].startswith("FINAL(")


def test_asked_for_a_final_answer() -> None:
    turns = ["code", "Code executed:\nanswer: 77", "more code", "Now give your final answer."]
    reply = fixture_reply(root_messages(QUESTION, *turns), "fixture")
    assert reply.splitlines()[-1] == "FINAL(77)"
    reply = fixture_reply(root_messages(QUESTION, "x", "Give your final answer."), "fixture")
    assert reply.splitlines()[-1] == "FINAL(NOT FOUND)"


# -- the in-process provider -------------------------------------------------------------


async def test_provider_sleeps_the_configured_latency(autojump_clock: trio.abc.Clock) -> None:
    provider = FixtureProvider(root_latency=2.5, sub_latency=0.75)
    start = trio.current_time()
    root = await provider.complete(CompletionRequest(messages=root_messages(), model="fixture"))
    assert trio.current_time() - start == 2.5
    sub_messages = [Message(role="user", content=f"{QUESTION}\nText:\nthe magic number is 3.")]
    # The lane does not decide the latency; the messages do.
    sub = await provider.complete(
        CompletionRequest(messages=sub_messages, model="fixture", lane="root")
    )
    assert trio.current_time() - start == 3.25
    assert sub.text == "3"
    assert "```repl" in root.text
    await provider.aclose()


async def test_concurrent_sub_queries_overlap(autojump_clock: trio.abc.Clock) -> None:
    provider = FixtureProvider(sub_latency=1.0)
    request = CompletionRequest(messages=[Message(role="user", content="hi")], model="fixture")
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(provider.complete, request)
    assert trio.current_time() - start == 1.0


async def test_provider_completion_fields() -> None:
    provider = FixtureProvider()
    messages = [Message(role="user", content="x" * 9)]
    completion = await provider.complete(CompletionRequest(messages=messages, model="fixture:3"))
    assert completion.text == NOT_FOUND
    assert completion.model == "fixture:3"
    assert completion.input_tokens == 3  # ceil(9 / 4)
    assert completion.output_tokens == 3  # ceil(len("NOT FOUND") / 4)
    assert completion.finish_reason == "stop"
    assert completion.metadata == {"system_fingerprint": FIXTURE_FINGERPRINT}
    assert is_fixture_answer(completion.metadata)
    assert provider.name == "fixture"


async def test_provider_bad_model_is_a_provider_error() -> None:
    request = CompletionRequest(messages=root_messages(), model="fixture:zero")
    with pytest.raises(ProviderStatusError) as info:
        await FixtureProvider().complete(request)
    assert info.value.status == 400


def _needle_cut_at_a_chunk_end() -> str:
    """4,000 chars in 4 chunks of 1,000 (+200 overlap): the first chunk ends 2 digits
    into the value, the second holds the whole sentence."""
    needle = "The magic number is 8599796."
    start = 1000 + 200 - len("The magic number is 85")
    filler = "lorem ipsum dolor sit amet "
    head = (filler * 100)[: start - 1] + " "
    text = head + needle + " " + (filler * 200)
    return text[:4000]


@pytest.mark.parametrize("model", ["fixture:4", "fixture-sequential:4"])
def test_a_value_cut_by_a_chunk_end_is_not_the_answer(model: str) -> None:
    text = _needle_cut_at_a_chunk_end()
    code = code_of(fixture_reply(root_messages(), model))
    prompts, namespace = run_code(code, text)
    assert [sub_reply(p) for p in prompts[:2]] == ["85", "8599796"]  # the cut, then whole
    assert namespace["final"] == "8599796"


def test_the_probe_reads_past_a_value_cut_by_a_chunk_end() -> None:
    first = fixture_reply(root_messages(), "fixture:4")
    error = "Code executed:\nTraceback (most recent call last):\nNameError: name 'x' is not defined"
    code = code_of(fixture_reply(root_messages(QUESTION, first, error), "fixture:4"))
    prompts, namespace = run_code(code, _needle_cut_at_a_chunk_end())
    assert namespace["printed"] == ["answer: 8599796"]
    assert len(prompts) == 2  # the hit, then the chunk that overlaps it


def test_an_answer_field_named_with_backticks_stays_inside_the_code_block() -> None:
    from rlm.providers._fixture_extras import _shaped_final

    code = _shaped_final({"type": "object", "properties": {"a```b": {"type": "string"}}}, "v")
    assert "```" not in code
    namespace: dict[str, Any] = {"v": "7", "FINAL_VAR": lambda name: None}
    exec(code, namespace)
    assert namespace["answer_data"] == {"a```b": "7"}


@pytest.mark.parametrize(
    ("task", "words"), [("Summarise", "1 word"), ("Say hi", "2 words"), ("", "0 words")]
)
def test_a_volley_acknowledgement_counts_its_words_in_good_english(task: str, words: str) -> None:
    reply = volley_reply([Message(role="user", content=task)])
    assert f"({words} of task, 0 chars of shared context)" in reply
