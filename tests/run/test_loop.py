"""The call loop end to end: scripted models, real sandbox subprocesses."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from rlm import RLM, RunResult
from rlm._run.context import Context
from rlm.providers.base import CompletionRequest
from rlm.testing.provider import FunctionProvider
from tests.helpers import pid_alive, repl, sandbox_pids


async def run(
    provider: FunctionProvider, query: str = "q", context: Context = "ctx", **settings: Any
) -> RunResult:
    model = RLM(providers={"root": provider, "sub": provider}, **settings)
    return await model.acompletion(query, context)


def last_user(request: CompletionRequest) -> str:
    return request.messages[-1]["content"]


async def test_code_output_is_fed_back_then_final_line_answers() -> None:
    provider = FunctionProvider.scripted([repl("print(len(context), context[:3])"), "FINAL(done)"])
    result = await run(provider, context="abcdef")
    assert result.status == "answered" and result.answer == "done"
    assert result.iterations == 2
    second = provider.root_requests()[1]
    assert "6 abc" in last_user(second)
    assert all(not pid_alive(pid) for pid in sandbox_pids(result.trace))


async def test_context_is_described_not_shown() -> None:
    big = "x" * 50_000 + "SECRET-TAIL"
    provider = FunctionProvider.scripted(["FINAL(ok)"])
    await run(provider, context=big)
    first = provider.root_requests()[0]
    prompt = "\n".join(m["content"] for m in first.messages)
    assert "50,011 characters" in prompt and "SECRET-TAIL" not in prompt
    assert first.messages[-1]["content"].endswith("Query: q")


async def test_final_var_outside_code_reads_the_sandbox_variable() -> None:
    provider = FunctionProvider.scripted([repl("answer = str(6 * 7)"), "FINAL_VAR(answer)"])
    result = await run(provider)
    assert result.answer == "42"


async def test_final_inside_code_ends_the_call() -> None:
    provider = FunctionProvider.scripted([repl("x = 'from code'\nFINAL_VAR('x')"), "FINAL(never)"])
    result = await run(provider)
    assert result.answer == "from code" and result.iterations == 1


async def test_reply_without_code_or_final_gets_a_reminder() -> None:
    provider = FunctionProvider.scripted(["I think the answer is somewhere.", "FINAL(found)"])
    result = await run(provider)
    assert result.answer == "found"
    assert "no ```repl code block and no FINAL" in last_user(provider.root_requests()[1])


async def test_errors_reach_the_model_as_the_traceback_tail() -> None:
    provider = FunctionProvider.scripted(
        [repl("x = 1\ny = x / 0"), repl("def broken(:\n  pass"), "FINAL(ok)"]
    )
    result = await run(provider)
    assert result.answer == "ok"
    second, third = provider.root_requests()[1:3]
    assert "ZeroDivisionError" in last_user(second)
    assert "SyntaxError" in last_user(third) or "invalid syntax" in last_user(third)


async def test_namespace_persists_across_steps() -> None:
    steps = [repl("total = 40"), repl("total += 2\nprint(total)"), "FINAL(x)"]
    provider = FunctionProvider.scripted(steps)
    await run(provider)
    assert "42" in last_user(provider.root_requests()[2])


async def test_long_output_is_truncated_with_a_note() -> None:
    provider = FunctionProvider.scripted([repl("print('y' * 5000)"), "FINAL(ok)"])
    await run(provider, max_output_chars=100)
    fed_back = last_user(provider.root_requests()[1])
    assert "[output truncated: showing the first 100 of 5,001 characters" in fed_back
    assert "y" * 101 not in fed_back


async def test_iterations_run_out_then_one_forced_final_step() -> None:
    provider = FunctionProvider.scripted(
        lambda r: repl("print(1)") if "used all" not in last_user(r) else "FINAL(best guess)"
    )
    result = await run(provider, max_iterations=3)
    assert result.status == "answered" and result.answer == "best guess"
    assert len(provider.root_requests()) == 4


async def test_no_answer_even_when_forced_is_status_iterations() -> None:
    provider = FunctionProvider.scripted(lambda r: repl("print(1)"))
    result = await run(provider, max_iterations=2)
    assert result.status == "iterations" and result.answer is None


async def test_exec_timeout_restarts_the_sandbox_and_the_call_goes_on() -> None:
    provider = FunctionProvider.scripted(
        [
            repl("keep = 1"),
            repl("while True:\n    pass"),
            repl("try:\n    print(keep)\nexcept NameError:\n    print('gone')"),
            "FINAL(survived)",
        ]
    )
    result = await run(provider, exec_timeout=1.0)
    assert result.answer == "survived"
    assert "exceeded the 1 s limit" in last_user(provider.root_requests()[2])
    assert "gone" in last_user(provider.root_requests()[3])
    pids = sandbox_pids(result.trace)
    assert len(pids) == 2 and not any(pid_alive(p) for p in pids)


async def test_a_killed_sandbox_costs_an_error_not_the_host() -> None:
    def root(request: CompletionRequest) -> str:
        turns = sum(1 for m in request.messages if m["role"] == "assistant")
        if turns == 0:
            return repl("import os")  # refused import; the sandbox lives
        if turns == 1:
            return repl("x = 1")
        return "FINAL(alive)"

    killed: list[int] = []

    def killer(event: object) -> None:
        if getattr(event, "kind", "") == "code_executed" and not killed:
            pid = started[-1]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    started: list[int] = []

    def track(event: object) -> None:
        if getattr(event, "kind", "") == "sandbox_started":
            started.append(event.pid)  # type: ignore[attr-defined]

    provider = FunctionProvider.scripted(root)
    model = RLM(providers={"root": provider, "sub": provider}, sinks=[track, killer])
    result = await model.acompletion("q", "ctx")
    assert result.answer == "alive"
    told = last_user(provider.root_requests()[2])
    # However the loss shows (the next exec frame meets a closed pipe, or the read meets the
    # exit), the model is told its sandbox was lost and a fresh one is used.
    # (a crash met mid-step says "a fresh sandbox will be used"; a death found before the
    # next step runs that step in a fresh one and says so in its output)
    assert "fresh sandbox" in told and "variables from earlier steps are gone" in told, told
    assert all(not pid_alive(p) for p in started)


@pytest.mark.parametrize("depth", [1, 2])
async def test_batched_results_keep_order_and_failures_hold_error_strings(depth: int) -> None:
    code = (
        "answers = llm_query_batched(['a', 'b', 'FAIL', 'd'])\nprint(answers)\nFINAL_VAR('answers')"
    )

    def sub(request: CompletionRequest) -> str:
        return request.messages[-1]["content"].upper()

    from rlm.errors import ProviderStatusError

    def fail(request: CompletionRequest) -> ProviderStatusError | None:
        if request.messages[-1]["content"] == "FAIL":
            return ProviderStatusError("bad item", status=400)
        return None

    provider = FunctionProvider.scripted(
        [repl(code)], sub, fail=fail, latency=lambda r: 0.01 * len(r.messages[-1]["content"])
    )
    result = await run(provider)
    assert result.answer is not None
    assert result.answer.startswith("['A', 'B', 'Error: ProviderStatusError: bad item', 'D']")


async def test_depth_two_sub_calls_are_child_calls_with_their_own_sandbox() -> None:
    root_code = "parts = llm_query_batched(['alpha', 'beta'])\nFINAL(' + '.join(parts))"

    def root(request: CompletionRequest) -> str:
        query = request.messages[1]["content"].rsplit("Query: ", 1)[1]
        if request.depth == 0:
            return repl(root_code)
        if sum(1 for m in request.messages if m["role"] == "assistant") == 0:
            return repl(f"found = llm_query('look for {query}')")
        return "FINAL_VAR(found)"

    provider = FunctionProvider.scripted(root, sub=lambda r: r.messages[-1]["content"] + "!")
    result = await run(provider, max_depth=2)
    assert result.answer == "look for alpha! + look for beta!"
    calls = {e["call_id"]: e["depth"] for e in result.trace if e["event"] == "call_started"}
    assert calls == {"root": 0, "root.1": 1, "root.2": 1}
    pids = sandbox_pids(result.trace)
    assert len(pids) == 3 and not any(pid_alive(p) for p in pids)
    lanes = {(e["depth"], e["lane"]) for e in result.trace if e["event"] == "llm_request"}
    assert lanes == {(0, "root"), (1, "sub"), (2, "sub")}


async def test_blocks_after_a_lost_sandbox_are_skipped_with_a_note() -> None:
    reply = "Two blocks.\n```repl\nx = 1\nwhile True:\n    pass\n```\n```repl\nprint(x)\n```"
    provider = FunctionProvider.scripted([reply, "FINAL(ok)"])
    result = await run(provider, exec_timeout=1.0)
    fed_back = last_user(provider.root_requests()[1])
    assert "exceeded the 1 s limit" in fed_back
    assert "1 later block(s) of this reply were not run" in fed_back
    assert "NameError" not in fed_back
    assert result.answer == "ok"


async def test_a_failed_final_var_at_the_forced_step_is_an_error_that_says_why() -> None:
    provider = FunctionProvider.scripted(
        lambda r: "FINAL_VAR(missing)" if "used all" in last_user(r) else repl("print(1)")
    )
    result = await run(provider, max_iterations=1)
    assert result.status == "error"
    assert result.error is not None and "FINAL_VAR(missing) failed" in result.error
