"""Sessions on the fixture model with real sandboxes: follow-ups, close, save and resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlm import RLM, UsageError
from rlm._events import BridgeCallStarted
from rlm.fixtures import generate_needle
from rlm.providers.base import Completion, CompletionRequest, Message
from rlm.providers.fixture import FixtureProvider
from rlm.testing.provider import FunctionProvider
from rlm.testing.sandboxes import LineLauncher
from rlm.view.load import load_trace
from rlm.view.model import build_model
from rlm_sandbox.plaindata import export_namespace
from tests.helpers import repl

NEEDLE = generate_needle(chars=60_000, seed=3)
TEXT = NEEDLE.text


def sandbox_children() -> list[int]:
    """Live sandbox processes descended from this test process (zygote forks included)."""
    parents: dict[int, int] = {}
    commands: dict[int, bytes] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(") ", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                commands[int(entry)] = f.read()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
    me, found = os.getpid(), []
    for pid in parents:
        ancestor = parents.get(pid)
        while ancestor and ancestor != me:
            ancestor = parents.get(ancestor)
        if ancestor == me and b"rlm_sandbox" in commands.get(pid, b""):
            found.append(pid)
    return found


def test_a_follow_up_uses_variables_of_the_previous_query_and_close_kills_the_sandbox() -> None:
    model = RLM(provider="fixture")
    with model.session(TEXT) as session:
        first = session.completion("What is the magic number?")
        assert first.status == "answered" and first.answer == NEEDLE.answer
        follow = session.completion("How many chunks did you search?")
        assert sandbox_children(), "the session's sandbox lives between queries"
    assert follow.status == "answered" and follow.answer == "16"  # len(chunks) from query 1
    # Answered from the REPL in two root steps, with no new search (no sub-query).
    steps = [e for e in follow.trace if e["event"] == "step_completed"]
    assert len(steps) == 2 and follow.usage.llm_calls == 2
    assert session.total_llm_calls == first.usage.llm_calls + follow.usage.llm_calls
    assert sandbox_children() == []
    with pytest.raises(UsageError, match="session is closed"):
        session.completion("again?")


async def test_an_async_session_in_a_trio_loop_keeps_its_variables_and_its_block_kills_it(
) -> None:
    async with RLM(provider="fixture").asession(TEXT) as session:
        first = await session.acompletion("What is the magic number?")
        follow = await session.acompletion("How many chunks did you search?")
        assert sandbox_children()
    assert (first.answer, follow.answer) == (NEEDLE.answer, "16")
    assert sandbox_children() == []
    with pytest.raises(UsageError, match="session is closed"):
        await session.acompletion("again?")


async def test_a_session_closed_while_its_sandbox_still_starts_closes_cleanly() -> None:
    """The answer came without code, so the sandbox the question started eagerly is still
    on its way when the block ends: it is cancelled or reaped, and nothing raises."""
    for _ in range(3):
        model = RLM(providers=FunctionProvider.scripted(["FINAL(42)"]))
        async with model.asession("a small context") as session:
            result = await session.acompletion("q")
        assert (result.answer, result.status) == ("42", "answered")
        assert sandbox_children() == []


def test_the_follow_up_request_does_not_resend_the_context_description() -> None:
    seen: list[list[Message]] = []

    class Recording(FixtureProvider):
        async def complete(self, request: CompletionRequest) -> Completion:
            seen.append([m.copy() for m in request.messages])
            return await super().complete(request)

    provider = Recording()
    with RLM(providers={"root": provider, "sub": provider}).session(TEXT) as session:
        session.completion("What is the magic number?")
        session.completion("What was the answer again?")
    last_step = [m for m in seen if m[0]["role"] == "system"][-1]
    assert sum("Your context is" in m["content"] for m in last_step) == 1
    assert {"role": "user", "content": "Query: What was the answer again?"} in last_step


def test_a_saved_session_resumes_in_a_new_process_with_its_variables(tmp_path: Path) -> None:
    saved = tmp_path / "session.json"
    with RLM(provider="fixture").session(TEXT) as session:
        session.completion("What is the magic number?")
        left_out = session.save(saved)
    assert "collections" in left_out  # a module is not plain data
    document = json.loads(saved.read_text())
    assert document["variables"]["chunks"][0] == "l"
    assert "api_key" not in document["settings"]
    context_file = tmp_path / "context.txt"
    context_file.write_text(TEXT)
    code = (
        "import sys; from rlm import RLM\n"
        "text = open(sys.argv[2]).read()\n"
        "s = RLM.load_session(sys.argv[1], text)\n"
        "r = s.completion('How many chunks did you search?')\n"
        "print(r.status, r.answer); s.close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(saved), str(context_file)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["answered", "16"]


def test_a_saved_session_refuses_another_context(tmp_path: Path) -> None:
    saved = tmp_path / "session.json"
    with RLM(provider="fixture").session(TEXT) as session:
        session.completion("What is the magic number?")
        session.save(saved)
        with pytest.raises(UsageError, match=r"cannot save the session to .*No such file"):
            session.save(tmp_path / "no" / "session.json")  # was a FileNotFoundError
    with pytest.raises(UsageError, match="context differs"):
        RLM.load_session(str(saved), TEXT + "x")
    document = json.loads(saved.read_text())
    document["history"].append({"role": 5})  # hand-edited: was a KeyError from the call loop
    saved.write_text(json.dumps(document))
    with pytest.raises(UsageError, match="not a message"):
        RLM.load_session(str(saved), TEXT)
    document["history"].pop()
    document["settings"]["max_depth"] = "two"  # hand-edited: was a TypeError
    document["settings"]["a_setting_of_another_release"] = 1  # dropped, not an error
    saved.write_text(json.dumps(document))
    with pytest.raises(UsageError, match="damaged: its saved setting max_depth must be an int"):
        RLM.load_session(str(saved), TEXT)
    document["settings"]["max_depth"] = 2
    saved.write_text(json.dumps(document))
    RLM.load_session(str(saved), TEXT).close()
    saved.write_text('{"rlm_session": 99}')
    with pytest.raises(UsageError, match="newer rlm"):
        RLM.load_session(str(saved), TEXT)


def test_a_session_total_budget_spans_its_queries() -> None:
    model = RLM(provider="fixture")
    with model.session(TEXT, max_total_llm_calls=18) as session:
        first = session.completion("What is the magic number?")  # 17 calls
        second = session.completion("How many chunks did you search?")  # needs 2, 1 left
    assert first.status == "answered"
    assert second.status == "budget_exceeded"
    assert session.total_llm_calls <= 18
    # The session total ran out, not the query's own --max-llm-calls: it is the one named.
    assert "max_total_llm_calls=18 reached" in (second.error or "")
    assert "raise max_total_llm_calls or leave it out" in (second.error or "")
    assert "max_llm_calls=" not in (second.error or "")


def test_history_past_its_limit_is_compacted_and_variables_stay() -> None:
    model = RLM(provider="fixture")
    with model.session(TEXT, max_history_chars=1_000) as session:
        session.completion("What is the magic number?")
        follow = session.completion("How many chunks did you search?")
    compacted = [e for e in follow.trace if e["event"] == "history_compacted"]
    assert len(compacted) == 1 and compacted[0]["chars_after"] < compacted[0]["chars_before"]
    assert follow.answer == "16"


def test_a_value_that_shares_itself_is_left_out_of_a_save_at_once() -> None:
    # 2**60 values written out, a few hundred bytes in memory: the save used to stall
    # until the sandbox's 30 s limit.
    shared: list[object] = []
    for _ in range(60):
        shared = [shared, shared]
    data, left_out = export_namespace({"shared": shared, "rows": [[1, 2]] * 1000}, ())
    assert left_out == ["shared"]
    assert list(json.loads(data)) == ["rows"]


def test_a_session_query_can_ask_for_a_structured_answer_from_a_variable_of_an_earlier_one(
) -> None:
    # The session's sandbox starts before any query's schema is known: FINAL_VAR of a
    # dict must still hand over JSON for the query that asks for it (and only for it).
    root = FunctionProvider.scripted([
        repl('found = {"number": 4711, "where": "line 3"}\nprint("kept")'),
        "FINAL(kept it)",
        'FINAL_VAR("found")',
        'FINAL_VAR("found")',
    ])
    model = RLM(providers={"root": root, "sub": root})
    with model.session("ctx") as session:
        first = session.completion("Find the number and keep it.")
        shaped = session.completion("Give it as data.", schema={"number": "int", "where": "str"})
        plain = session.completion("And as text?")
    assert first.answer == "kept it" and first.data is None
    assert shaped.status == "answered"
    assert shaped.data == {"number": 4711, "where": "line 3"}
    assert plain.data is None and plain.answer == "{'number': 4711, 'where': 'line 3'}"
    asked = root.root_requests()[2].messages[-1]["content"]  # the schema query's message
    assert "Answer schema: " in asked and asked.endswith("Query: Give it as data.")
    later = root.root_requests()[3].messages[-1]["content"]
    assert later == "Query: And as text?"


async def test_an_async_session_query_takes_a_schema_too() -> None:
    root = FunctionProvider.scripted([repl("rows = [1, 2]"), 'FINAL_VAR("rows")'])
    async with RLM(providers={"root": root, "sub": root}).asession("ctx") as session:
        result = await session.acompletion("Rows as data?", schema=["int"])
    assert result.data == [1, 2]


def test_each_query_of_a_session_keeps_its_own_trace_and_a_resumed_one_numbers_on(
    tmp_path: Path,
) -> None:
    # One trace_path for the model: every query used to write it, each replacing the last.
    trace = tmp_path / "chat.jsonl"
    model = RLM(provider="fixture", trace_path=str(trace))
    with model.session(TEXT) as session:
        first = session.completion("What is the magic number?")
        follow = session.completion("How many chunks did you search?")
        session.save(tmp_path / "chat.session")
    saved = str(tmp_path / "chat.session")
    with RLM.load_session(saved, TEXT, trace_path=str(trace)) as resumed:
        third = resumed.completion("How many chunks did you search?")
    paths = [tmp_path / "chat.1.jsonl", tmp_path / "chat.2.jsonl", tmp_path / "chat.3.jsonl"]
    assert [first.trace_path, follow.trace_path, third.trace_path] == [str(p) for p in paths]
    assert not trace.exists()
    queries = ["What is the magic number?", "How many chunks did you search?"]
    for path, query, answer in zip(paths, [*queries, queries[1]], [NEEDLE.answer, "16", "16"],
                                   strict=True):
        page = build_model(load_trace(path))  # what `rlm view` draws: that query's run
        assert (page["run"]["query"], page["run"]["answer"]) == (query, answer)
        assert page["run"]["status"] == "answered"


def test_a_follow_up_stopped_by_the_session_total_reports_no_earlier_answer() -> None:
    # The REPL's `answer` is the first query's: a stopped follow-up reported it as its own.
    model = RLM(provider="fixture")
    with model.session(TEXT, max_total_llm_calls=18) as session:
        session.completion("What is the magic number?")  # 17 calls
        second = session.completion("How many chunks did you search?")  # 1 step, then refused
    assert second.status == "budget_exceeded" and second.answer is None


async def test_a_question_stopped_mid_code_can_be_asked_again() -> None:
    """Ctrl-C while the first question's code runs leaves no half turn in the
    conversation: the same question asked again is answered as a first one (it was
    answered "NOT FOUND (no earlier question finished ...)" as a follow-up)."""
    stopped: list[BridgeCallStarted] = []

    def stop_in_code(event: object) -> None:
        if isinstance(event, BridgeCallStarted) and not stopped:
            stopped.append(event)
            model.interrupt()  # as `rlm chat` does on Ctrl-C

    model = RLM(provider="fixture", providers=FixtureProvider(sub_latency=0.5),
                sinks=[stop_in_code])
    async with model.asession(TEXT) as session:
        first = await session.acompletion("What is the magic number?")
        again = await session.acompletion("What is the magic number?")
        chunks = await session.acompletion("How many chunks did you search?")
    assert stopped and first.status == "interrupted"
    assert again.status == "answered" and again.answer == NEEDLE.answer
    assert chunks.status == "answered" and chunks.answer == "16"  # a follow-up now


def test_a_summary_refused_by_the_session_total_ends_the_query_as_budget_exceeded() -> None:
    # It raised an error (status "error") before: the limit, not a failure, ended it.
    model = RLM(provider="fixture")
    with model.session(TEXT, max_total_llm_calls=17, max_history_chars=1_000) as session:
        session.completion("What is the magic number?")  # 17 calls: none left to summarise
        second = session.completion("How many chunks did you search?")
        assert second.status == "budget_exceeded" and second.answer is None
        assert "reached" in (second.error or "")


def test_the_fixture_model_answers_a_structured_follow_up_from_the_repl() -> None:
    with RLM(provider="fixture").session(TEXT) as session:
        session.completion("What is the magic number?")
        follow = session.completion("How many chunks did you search?", schema={"chunks": "int"})
    assert (follow.status, follow.data) == ("answered", {"chunks": 16})
    assert follow.usage.llm_calls == 1  # one step: its code hands the data over


def test_a_session_opens_its_sandbox_from_the_models_injected_launcher() -> None:
    """RLM(sandboxes=...) holds for sessions too: one sandbox from the factory serves every
    query (its REPL state is the session's), and no real sandbox process starts."""
    launchers: list[LineLauncher] = []

    def factory(config: object, events: object, **extra: object) -> LineLauncher:
        launchers.append(LineLauncher())
        return launchers[-1]

    def root(request: CompletionRequest) -> str:
        last = request.messages[-1]["content"]
        return repl("batch 2") if "?" in last else "FINAL(done)"

    provider = FunctionProvider.scripted(root)
    model = RLM(providers={"root": provider, "sub": provider}, sandboxes=factory)
    with model.session("some context") as session:
        first = session.completion("First question?")
        second = session.completion("Second question?")
        assert sandbox_children() == []
    assert (first.answer, second.answer) == ("done", "done")
    assert len(launchers) == 1 and len(launchers[0].opened) == 1
    sandbox = launchers[0].opened[0]
    assert [code.strip() for code in sandbox.executed] == ["batch 2", "batch 2"]
    assert not sandbox.alive


def test_a_resumed_session_counts_what_it_spent_before_the_save(tmp_path: Path) -> None:
    saved = tmp_path / "session.json"
    with RLM(provider="fixture").session(TEXT) as session:
        session.completion("What is the magic number?")  # 17 calls
        spent = session.total_llm_calls
        session.save(saved)
    assert spent == 17 and json.loads(saved.read_text())["spent"]["llm_calls"] == 17
    # The same total as in one sitting (test above): 1 call is left for the follow-up.
    resumed = RLM.load_session(str(saved), TEXT, session_options={"max_total_llm_calls": 18})
    try:
        assert resumed.total_llm_calls == 17
        second = resumed.completion("How many chunks did you search?")  # needs 2
    finally:
        resumed.close()
    assert second.status == "budget_exceeded"
    assert "max_total_llm_calls=18 reached" in (second.error or "")
    document = json.loads(saved.read_text())
    del document["spent"]  # saved before the totals were kept: nothing known spent
    saved.write_text(json.dumps(document))
    older = RLM.load_session(str(saved), TEXT)
    assert older.total_llm_calls == 0
    older.close()
    document["spent"] = {"llm_calls": -1, "cost": 0}
    saved.write_text(json.dumps(document))
    with pytest.raises(UsageError, match="damaged: what its queries spent"):
        RLM.load_session(str(saved), TEXT)
