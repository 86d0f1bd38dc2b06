"""A provider's JSON may escape a lone surrogate (``\\ud800``): a run still ends as it should.

Such text cannot be written as UTF-8; before it was cleaned where it enters, a refusal
that held one ended the run as interrupted (the trace could not write its event) and an
answer whose model name held one failed the same way.  A real loopback server, the real
OpenAI-compatible provider, a real sandbox and trace file.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio

from rlm import RLM
from rlm._events import CodeExecuted
from rlm._trace import TraceWriter
from rlm.errors import ProviderStatusError

_REFUSAL = b'{"error": {"message": "bad input \\ud800 here", "type": "invalid_request_error"}}'
_ANSWER = (
    b'{"id": "c\\ud800", "model": "m\\udfff", "system_fingerprint": "f\\ud800", "choices": '
    b'[{"message": {"content": "FINAL(x \\ud800 y)"}, "finish_reason": "stop\\ud800"}], '
    b'"usage": {"prompt_tokens": 1, "completion_tokens": 1}}'
)


@asynccontextmanager
async def answering(status: bytes, body: bytes) -> AsyncIterator[str]:
    """A loopback endpoint answering every request with ``status`` and ``body``."""

    async def handle(stream: trio.SocketStream) -> None:
        data = b""
        async with stream:
            while True:
                while b"\r\n\r\n" not in data:
                    if not (more := await stream.receive_some(65536)):
                        return
                    data += more
                head, _, data = data.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                while len(data) < length:
                    data += await stream.receive_some(65536)
                data = data[length:]
                await stream.send_all(
                    b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d"
                    b"\r\n\r\n%s" % (status, len(body), body)
                )

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
        yield f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/v1"
        nursery.cancel_scope.cancel()


def _model(url: str, trace: Path) -> RLM:
    return RLM(base_url=url, model="m", api_key="sk-test", max_retries=0, trace_path=str(trace))


def _events(trace: Path) -> list[str]:
    return [json.loads(line)["event"] for line in trace.read_text("utf-8").splitlines()]


async def test_a_refusal_holding_a_lone_surrogate_is_an_error_that_names_it(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "trace.jsonl"
    with trio.fail_after(60):
        async with answering(b"400 Bad Request", _REFUSAL) as url:
            with pytest.raises(ProviderStatusError) as caught:
                await _model(url, trace).acompletion("q", "hello")
    assert str(caught.value).endswith("answered HTTP 400: bad input ? here")
    finished = json.loads(trace.read_text("utf-8").splitlines()[-1])
    assert (finished["event"], finished["status"]) == ("run_finished", "error")


async def test_an_answer_holding_lone_surrogates_is_answered_and_traced(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    with trio.fail_after(60):
        async with answering(b"200 OK", _ANSWER) as url:
            result = await _model(url, trace).acompletion("q", "hello")
    assert (result.status, result.answer) == ("answered", "x ? y"), result.error
    assert _events(trace)[-1] == "run_finished"


def test_a_trace_writes_a_lone_surrogate_from_any_source_and_reads_it_back(
    tmp_path: Path,
) -> None:
    # A source not cleaned where it enters (a tool, a future provider) must never end a run
    # through its trace: the surrogate is written as a JSON escape and reads back the same.
    trace = tmp_path / "trace.jsonl"
    writer = TraceWriter(trace)
    writer(CodeExecuted(iteration=1, block=1, ok=True, output="a \ud800 \\\udfff b",
                        output_chars=9, error=None, final=False, duration_s=0.0))
    writer.close()
    _header, record = [json.loads(line) for line in trace.read_text("utf-8").splitlines()]
    assert record["output"] == "a \ud800 \\\udfff b"
