"""The real sandbox subprocess, driven frame by frame over pipes."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlm_sandbox.protocol import FrameDecoder, encode_frame

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 15.0


class Child:
    """A sandbox process and the host ends of its two pipes."""

    def __init__(self, cwd: Path) -> None:
        child_in, self.to_child = os.pipe()
        self.from_child, child_out = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rlm_sandbox",
             "--in-fd", str(child_in), "--out-fd", str(child_out)],
            pass_fds=(child_in, child_out),
            cwd=cwd,
            env={"PYTHONPATH": str(PROJECT_ROOT / "sandbox"), "PATH": "/usr/bin:/bin"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        os.close(child_in)
        os.close(child_out)
        self.decoder = FrameDecoder()
        self.frames: list[dict[str, Any]] = []

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(encode_frame(message, max_bytes=1 << 30))

    def send_raw(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.to_child, view):]

    def receive(self, timeout: float = TIMEOUT) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not self.frames:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no frame from the sandbox in time")
            ready, _, _ = select.select([self.from_child], [], [], remaining)
            if ready:
                data = os.read(self.from_child, 1 << 16)
                if not data:
                    raise EOFError("the sandbox closed its output")
                self.frames.extend(self.decoder.feed(data))
        return self.frames.pop(0)

    def init(self, context: str | list[str] = "ctx", max_output_chars: int = 1000) -> None:
        self.send({"t": "init", "context": context, "max_output_chars": max_output_chars})
        ready = self.receive()
        assert ready["t"] == "ready" and ready["pid"] == self.process.pid
        assert set(ready["isolation"]) >= {"fds", "rlimits", "seccomp"}

    def run(self, code: str, exec_id: int = 1) -> dict[str, Any]:
        self.send({"t": "exec", "id": exec_id, "code": code})
        result = self.receive()
        assert result["t"] == "result" and result["id"] == exec_id
        return result

    def wait(self) -> int:
        return self.process.wait(timeout=TIMEOUT)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=TIMEOUT)
        for fd in (self.to_child, self.from_child):
            try:
                os.close(fd)
            except OSError:
                continue
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def child(tmp_path: Path) -> Iterator[Child]:
    process = Child(tmp_path)
    try:
        yield process
    finally:
        process.close()


def test_namespace_persists_and_context_is_visible(child: Child) -> None:
    child.init(context=["doc one", "doc two"])
    first = child.run("n = len(context)\nprint('docs:', n)", exec_id=1)
    assert first == {"t": "result", "id": 1, "ok": True, "output": "docs: 2\n",
                     "output_chars": 8, "error": None, "final": None}
    second = child.run("def shout(s):\n    print(s.upper())\nshout(context[n - 1])", exec_id=2)
    assert second["ok"] and second["output"] == "DOC TWO\n"


def test_context_larger_than_the_default_frame_cap(child: Child) -> None:
    big = "x" * (20 << 20)  # over protocol.DEFAULT_MAX_FRAME_BYTES: init may carry it
    child.init(context=big)
    result = child.run("print(len(context), context[:3])")
    assert result["output"] == f"{len(big)} xxx\n"
    too_big = child.run("llm_query('summarise', context)", exec_id=2)
    assert "ValueError" in too_big["error"] and "too large" in too_big["error"]


def test_output_is_truncated_but_counted(child: Child) -> None:
    child.init(max_output_chars=10)
    result = child.run("for i in range(100):\n    print('abcd')")
    assert result["ok"]
    assert result["output"] == "abcd\nabcd\n"
    assert result["output_chars"] == 500
    assert child.run("print('x')", exec_id=2)["output"] == "x\n"  # reset per exec


def test_error_shows_last_traceback_lines_and_earlier_output(child: Child) -> None:
    child.init()
    child.run("def divide(a, b):\n    return a / b")
    result = child.run("print('before')\nx = 1\ndivide(x, 0)", exec_id=2)
    assert not result["ok"]
    assert result["output"] == "before\n"
    assert result["error"] == (
        "Traceback (most recent call last):\n"
        '  File "<repl>", line 3, in <module>\n'
        "    divide(x, 0)\n"
        '  File "<repl>", line 2, in divide\n'
        "    return a / b\n"
        "ZeroDivisionError: division by zero"
    )


def test_deep_recursion_is_reported_briefly(child: Child) -> None:
    child.init()
    result = child.run("def f(n):\n    return f(n + 1)\nf(0)")
    assert not result["ok"]
    assert result["error"].endswith("RecursionError: maximum recursion depth exceeded")
    assert len(result["error"].splitlines()) <= 20
    assert child.run("print('alive')", exec_id=2)["output"] == "alive\n"


def test_compile_errors_are_reported(child: Child) -> None:
    child.init()
    result = child.run("x = ().__globals__")
    assert not result["ok"]
    assert result["error"].startswith("SyntaxError: Line 1:")
    assert "__globals__" in result["error"]
    syntax = child.run("x = = 1", exec_id=2)
    assert not syntax["ok"] and "invalid syntax" in syntax["error"]


@pytest.mark.parametrize("code", ["raise SystemExit(3)", "raise KeyboardInterrupt",
                                  "raise GeneratorExit", "import os"])
def test_worker_survives_model_exceptions(child: Child, code: str) -> None:
    child.init()
    result = child.run(code)
    assert not result["ok"] and result["error"]
    after = child.run("print('still here')", exec_id=2)
    assert after["ok"] and after["output"] == "still here\n"


def test_llm_query_round_trip(child: Child) -> None:
    child.init()
    child.send({"t": "exec", "id": 7, "code": "a = llm_query('q?', context='c')\nprint(a)"})
    bridge = child.receive()
    assert bridge == {"t": "bridge", "id": 1, "fn": "llm_query", "prompts": ["q?"],
                      "contexts": ["c"]}
    child.send({"t": "reply", "id": 1, "ok": True, "value": "the answer", "error": "",
                "kind": ""})
    result = child.receive()
    assert result["id"] == 7 and result["ok"] and result["output"] == "the answer\n"


def test_llm_query_failure_returns_error_string(child: Child) -> None:
    child.init()
    child.send({"t": "exec", "id": 1, "code": "print(llm_query('q'))"})
    bridge = child.receive()
    child.send({"t": "reply", "id": bridge["id"], "ok": False, "value": "",
                "error": "provider down", "kind": "provider"})
    assert child.receive()["output"] == "Error: provider down\n"


def test_llm_query_batched_keeps_order(child: Child) -> None:
    child.init()
    code = "out = llm_query_batched(['a', 'b', 'c'], ['x', None, 'z'])\nprint(out)"
    child.send({"t": "exec", "id": 1, "code": code})
    bridge = child.receive()
    assert bridge["fn"] == "llm_query_batched"
    assert bridge["prompts"] == ["a", "b", "c"] and bridge["contexts"] == ["x", None, "z"]
    answers = [p.upper() for p in bridge["prompts"]]
    answers[1] = "Error: timeout"
    child.send({"t": "reply", "id": bridge["id"], "ok": True, "value": answers, "error": "",
                "kind": ""})
    assert child.receive()["output"] == "['A', 'Error: timeout', 'C']\n"


def test_bridge_argument_validation(child: Child) -> None:
    child.init()
    result = child.run("llm_query(['not', 'a', 'str'])")
    assert "TypeError" in result["error"] and "llm_query_batched" in result["error"]
    result = child.run("llm_query_batched(['a', 'b'], ['only one'])", exec_id=2)
    assert "ValueError" in result["error"] and "one context" in result["error"]
    assert child.run("print(llm_query_batched([]))", exec_id=3)["output"] == "[]\n"


def test_budget_exhaustion_raises_budget_exceeded(child: Child) -> None:
    child.init()
    code = (
        "try:\n"
        "    llm_query_batched(['a'])\n"
        "except BudgetExceeded as exc:\n"
        "    print('stopped:', exc)\n"
        "llm_query('b')\n"
    )
    child.send({"t": "exec", "id": 1, "code": code})
    for _ in range(2):
        bridge = child.receive()
        child.send({"t": "reply", "id": bridge["id"], "ok": False, "value": "",
                    "error": "max_llm_calls reached", "kind": "budget"})
    result = child.receive()
    assert result["output"] == "stopped: max_llm_calls reached\n"
    assert not result["ok"]
    assert result["error"].endswith("BudgetExceeded: max_llm_calls reached")


def test_budget_returns_the_host_dict(child: Child) -> None:
    child.init()
    child.send({"t": "exec", "id": 1, "code": "print(budget()['calls_left'])"})
    bridge = child.receive()
    assert bridge["fn"] == "budget" and bridge["prompts"] == []
    child.send({"t": "reply", "id": bridge["id"], "ok": True, "value": {"calls_left": 4},
                "error": "", "kind": ""})
    assert child.receive()["output"] == "4\n"


def test_final_and_final_var(child: Child) -> None:
    child.init()
    result = child.run("FINAL(42)\nprint('after')")
    assert result["final"] == "42" and result["output"] == "after\n"
    assert child.run("x = 1", exec_id=2)["final"] is None
    assert child.run("answer = ['a']\nFINAL_VAR('answer')", exec_id=3)["final"] == "['a']"
    assert child.run("FINAL_VAR(answer)", exec_id=4)["final"] == "['a']"
    missing = child.run("FINAL_VAR('nope')", exec_id=5)
    assert not missing["ok"] and missing["final"] is None
    assert "NameError: FINAL_VAR: no variable named 'nope'" in missing["error"]
    assert child.run("FINAL_VAR('The answer is 4.')", exec_id=6)["final"] == "The answer is 4."
    assert "NameError" in child.run("FINAL_VAR('_getattr_')", exec_id=7)["error"]


def test_shutdown_exits_zero(child: Child) -> None:
    child.init()
    child.send({"t": "shutdown"})
    assert child.wait() == 0


def test_end_of_input_exits_zero(child: Child) -> None:
    child.init()
    os.close(child.to_child)
    assert child.wait() == 0


def test_shutdown_while_waiting_for_a_reply_exits_zero(child: Child) -> None:
    child.init()
    child.send({"t": "exec", "id": 1, "code": "try:\n    llm_query('q')\nexcept BaseException:\n"
                "    pass"})
    assert child.receive()["t"] == "bridge"
    child.send({"t": "shutdown"})
    assert child.wait() == 0


@pytest.mark.parametrize("garbage", [
    b"\x00\x00\x00\x03abc",  # not msgpack
    b"\xff\xff\xff\xff",  # oversize header
    encode_frame({"t": "exec", "id": 1}),  # exec without code
    encode_frame({"t": "nonsense"}),
    encode_frame({"t": "reply", "id": 1, "ok": True, "value": "x"}),  # no bridge call waits
])
def test_bad_frame_exits_non_zero(child: Child, garbage: bytes) -> None:
    child.init()
    child.send_raw(garbage)
    assert child.wait() == 3


def test_first_frame_must_be_init(child: Child) -> None:
    child.send({"t": "exec", "id": 1, "code": "print(1)"})
    assert child.wait() == 3


def test_wrong_reply_id_exits_non_zero(child: Child) -> None:
    child.init()
    child.send({"t": "exec", "id": 1, "code": "llm_query('q')"})
    bridge = child.receive()
    child.send({"t": "reply", "id": bridge["id"] + 1, "ok": True, "value": "x", "error": "",
                "kind": ""})
    assert child.wait() == 3


def test_nothing_is_written_to_stdout_or_stderr(child: Child) -> None:
    child.init()
    child.run("print('only in the frame')\nimport nope")
    child.run("x = 1\nprint(x is 1)", exec_id=2)  # a SyntaxWarning in plain Python
    child.send({"t": "shutdown"})
    assert child.wait() == 0
    assert child.process.stdout is not None and child.process.stderr is not None
    assert child.process.stdout.read() == b""
    assert child.process.stderr.read() == b""


def test_the_warm_up_block_runs_under_the_policy_and_leaves_no_trace() -> None:
    # The zygote and every fork run it before serving: it must pass the policy as model
    # code does (a refusal would stop the zygote), in a namespace of its own.
    from rlm_sandbox.policy import PrintSink, compile_code, new_namespace
    from rlm_sandbox.worker import WARM_UP_CODE, Channel, Repl, warm_up

    sink = PrintSink(1000)
    exec(compile_code(WARM_UP_CODE), new_namespace(sink, {"context": ["a b", "c"]}))
    assert sink.text() == "4 1 2\n"
    warm_up()
    read_end, write_end = os.pipe()
    try:
        repl = Repl(Channel(read_end, write_end), "ctx", 100)
        assert "chunks" not in repl.namespace and "keep" not in repl.namespace
    finally:
        os.close(read_end)
        os.close(write_end)
