"""Host tools called from real sandbox code: checked arguments, errors, no objects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rlm import RLM
from rlm.providers.base import Completion, CompletionRequest
from rlm.providers.fixture import FixtureProvider
from tests.helpers import rlm_in_process

CALLS: list[tuple[str, int]] = []


def lookup(key: str, limit: int = 2) -> dict[str, object]:
    """Look a key up in the host's table."""
    CALLS.append((key, limit))
    return {"key": key, "hits": [key.upper()] * limit}


def broken(key: str) -> str:
    """Always fails."""
    raise LookupError(f"no entry for {key}")


def ask(query: str, **settings: object) -> tuple[str | None, list[dict[str, object]]]:
    model = RLM(provider="fixture", tools=[lookup, broken], **settings)  # type: ignore[arg-type]
    result = model.completion(query, "some context")
    return result.answer, [e for e in result.trace if e["event"] == "tool_called"]


def test_sandbox_code_calls_a_host_tool_with_checked_arguments() -> None:
    CALLS.clear()
    answer, calls = ask("Call lookup('abc', limit=3)")
    assert answer == "{'key': 'abc', 'hits': ['ABC', 'ABC', 'ABC']}"
    assert CALLS == [("abc", 3)]
    assert calls[0]["tool"] == "lookup" and calls[0]["ok"] is True


def test_a_wrong_argument_type_comes_back_as_a_clear_tool_error() -> None:
    CALLS.clear()
    answer, calls = ask("Call lookup(5)")
    assert answer == "ToolError: lookup: argument 'key': 5 is not of type 'string'"
    assert CALLS == []  # the function never ran
    assert calls[0]["ok"] is False


def test_a_raising_tool_comes_back_as_its_error() -> None:
    answer, _ = ask("Call broken('x')")
    assert answer == "ToolError: broken raised LookupError: no entry for x"


def test_a_tool_cannot_be_handed_a_sandbox_object() -> None:
    CALLS.clear()
    answer, calls = ask("Call lookup(print)")
    assert answer is not None and answer.startswith("TypeError: lookup(): arguments must be plain")
    assert CALLS == [] and calls == []  # refused in the sandbox: nothing crossed


def test_the_system_prompt_lists_each_tool_with_its_signature_and_docstring() -> None:
    sent: list[str] = []

    class Recording(FixtureProvider):
        async def complete(self, request: CompletionRequest) -> Completion:
            if request.lane == "root":
                sent.append(request.messages[0]["content"])
            return await super().complete(request)

    provider = Recording()
    model = RLM(providers={"root": provider, "sub": provider}, tools=[lookup])
    result = model.completion("Call lookup('k')", "ctx")
    assert result.answer == "{'key': 'k', 'hits': ['K', 'K']}"
    entry = "- `lookup(key: str, limit: int = 2) -> dict[str, object]`: Look a key up"
    assert sent and all(entry in system for system in sent)
    # The trace's copy of the system prompt is the one the root was sent (it lacked the tools).
    started = next(e for e in result.trace if e["event"] == "run_started")
    assert started["system_prompt"] == sent[0]


def test_arguments_nested_past_the_hosts_json_depth_are_a_tool_error_not_a_crash() -> None:
    # 990 levels pass the sandbox's json.dumps but exceed the host's decoder depth
    deep = "(x := [], [x := [x] for _ in range(990)], x)[2]"
    answer, calls = ask(f"Call lookup({deep})")
    assert answer == "ToolError: lookup: the arguments are not JSON data"
    assert calls[0]["ok"] is False


def test_rlm_run_offers_tools_named_module_function(tmp_path: Path) -> None:
    (tmp_path / "v16run_tools.py").write_text(
        "def shout(key: str) -> str:\n    return key.upper()\n\n"
        "def whisper(key: str) -> str:\n    return key.lower()\n"
    )
    rlm_bin = str(Path(sys.executable).with_name("rlm"))
    answers = []
    for query in ["Call shout('abc')", "Call whisper('XYZ')", "Call shout(5)"]:
        done = subprocess.run(
            [rlm_bin, "run", query, "--context-file", "-", "--provider", "fixture", "-q",
             "--tools", "v16run_tools:shout", "--tools", "v16run_tools:whisper"],
            input="some context", capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        answers.append(done.stdout.strip())
    # Was a NameError: the run's sandbox launcher never learnt the tools' names.
    assert answers == ["ABC", "xyz", "ToolError: shout: argument 'key': 5 is not of type 'string'"]
    bad = rlm_in_process("run", "q", "--context-file", "-", "--provider", "fixture",
                         "--tools", "v16run_tools", stdin="ctx")
    assert bad.returncode == 2
    assert bad.stderr.startswith("Error: --tools 'v16run_tools': expected module:function")


def test_a_tool_made_with_its_own_timeout_times_out_as_a_tool_error() -> None:
    import threading

    import rlm

    release = threading.Event()

    def stuck() -> str:
        """Never answers in time."""
        release.wait(30)
        return "late"

    try:
        tool = rlm.make_tool(stuck, timeout_s=0.2, max_concurrent=1)
        result = RLM(provider="fixture", tools=[tool]).completion("Call stuck()", "ctx")
    finally:
        release.set()
    assert result.answer == "ToolError: stuck timed out after 0.2 s"


def test_a_sandboxes_factory_is_told_the_tools_and_the_structured_answer() -> None:
    # RLM(sandboxes=factory) called factory(config, events) only: a tool was a NameError in
    # the sandbox and a structured root answer never fitted (the run ended in an error).
    from rlm._run.assembly import default_launcher

    model = RLM(provider="fixture", sandboxes=default_launcher, tools=[lookup])
    assert model.completion("Call lookup('k')", "ctx").answer == "{'key': 'k', 'hits': ['K', 'K']}"
    text = "filler " * 500 + "the magic number is 4711. " + "filler " * 500
    result = model.completion("What is the magic number?", text, schema={"number": "int"})
    assert (result.status, result.data) == ("answered", {"number": 4711})
