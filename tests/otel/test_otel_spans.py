"""A run's events become one OpenTelemetry trace whose spans nest as the run's calls do.

The span builder is fed real runs (the fixture model, real sandboxes, and a loopback
OpenAI-compatible server for the key test) and its spans are read from the SDK's
in-memory exporter.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import trio

from rlm import RLM
from rlm._events import LLMRequest, LLMResponse, LLMRetry, RunFinished, RunStarted
from rlm.errors import RateLimitError
from rlm.fixtures.needle import generate_needle
from rlm.testing.provider import FunctionProvider
from tests.helpers import serving
from tests.otel.otel_helpers import Recorder, SpanRecord, call_tree, trace_call_tree

QUESTION = "What is the magic number?"
NEEDLE = generate_needle(8_000, seed=3)
#: Attributes that carry what the user or the model wrote.
CONTENT = {"rlm.query", "rlm.answer", "rlm.code", "rlm.output", "rlm.error", "rlm.prompts",
           "rlm.answers", "rlm.prompt", "gen_ai.input.messages", "gen_ai.output.messages"}


def depth_two_run(recorder: Recorder) -> tuple[list[dict[str, Any]], list[SpanRecord]]:
    result = RLM(provider="fixture", model="fixture:2", max_depth=2,
                 sinks=[recorder.builder]).completion(QUESTION, NEEDLE.text)
    assert result.answer == NEEDLE.answer
    return list(result.trace), recorder.spans()


def test_a_depth_two_run_is_one_trace_nested_as_its_call_tree() -> None:
    events, spans = depth_two_run(Recorder())
    assert len({s.trace_id for s in spans}) == 1
    tree = call_tree(spans)
    assert tree == trace_call_tree(events) == {"root": None, "root.1": "root", "root.2": "root"}
    (run,) = [s for s in spans if s.parent_id is None]
    assert run.name == "rlm.run" and run.attributes["rlm.status"] == "answered"
    by_id: dict[object, SpanRecord] = {s.span_id: s for s in spans}
    # A child call hangs under the bridge call that started it, in its parent's call.
    for child in (s for s in spans if s.name == "rlm.call" and s.attributes["rlm.depth"] == 1):
        bridge = by_id[child.parent_id]
        assert bridge.name == "rlm.bridge" and bridge.attributes["rlm.mode"] == "child-call"
    # One span per LLM attempt, each with its usage; a step's under its rlm.step.
    attempts = [s for s in spans if s.name.startswith("chat ")]
    assert len(attempts) == sum(1 for e in events if e["event"] == "llm_request") == 8
    for span in attempts:
        assert span.attributes["gen_ai.system"] == "fixture"
        assert span.attributes["gen_ai.provider.name"] == "fixture"
        assert span.attributes["gen_ai.request.model"] == "fixture:2"
        assert span.attributes["gen_ai.usage.input_tokens"] > 0
        assert span.attributes["gen_ai.usage.output_tokens"] > 0
        assert [e.name for e in span.events] == ["rlm.queue_wait", "rlm.pace_wait"]
        parent = by_id[span.parent_id]
        # Depth 2 is a sub-query asked by a child call's code; the rest are steps.
        assert parent.name == ("rlm.bridge" if span.attributes["rlm.depth"] == 2 else "rlm.step")
        assert parent.start_time <= span.start_time <= span.end_time <= parent.end_time
    names = Counter(s.name for s in spans)
    steps = sum(1 for e in events if e["event"] == "step_completed")
    assert names["rlm.step"] == steps and names["rlm.call"] == 3
    assert names["rlm.execute"] == sum(1 for e in events if e["event"] == "code_executed")
    assert names["rlm.bridge"] == 3 and names["rlm.sandbox_start"] == 3
    # Every span ends within the run's, and no span ends before it starts.
    assert all(run.start_time <= s.start_time <= s.end_time <= run.end_time for s in spans)


def test_content_is_in_the_spans_only_with_trace_content_full() -> None:
    _, full = depth_two_run(Recorder(content=True))
    found = {name for s in full for name in s.attributes} & CONTENT
    assert {"rlm.query", "rlm.code", "rlm.output", "rlm.prompts", "rlm.answers",
            "gen_ai.input.messages", "gen_ai.output.messages"} <= found
    step = next(s for s in full if s.name == "rlm.step" and s.attributes["rlm.call_id"] == "root")
    sent = json.loads(step.attributes["gen_ai.input.messages"])
    assert sent[0]["role"] == "system" and "llm_query" in sent[0]["parts"][0]["content"]
    _, meta = depth_two_run(Recorder(content=False))
    assert not {name for s in meta for name in s.attributes} & CONTENT
    shown = "".join(s.text for s in meta)
    assert QUESTION not in shown and NEEDLE.answer not in shown


async def test_a_retry_is_an_event_on_the_attempt_that_failed(
        autojump_clock: trio.testing.MockClock) -> None:
    failures = iter([RateLimitError("slow down", status=429, retryable=True, retry_after=2.0)])
    provider = FunctionProvider.scripted(["FINAL(7)"], latency=lambda r: 1.0,
                                         fail=lambda r: next(failures, None))
    recorder = Recorder()
    result = await RLM(providers=provider, sinks=[recorder.builder]).acompletion(QUESTION, "x")
    assert result.answer == "7"
    spans = recorder.spans()
    first, second = sorted((s for s in spans if s.name.startswith("chat ")),
                           key=lambda s: s.attributes["rlm.attempt"])
    assert first.error is not None and "slow down" in first.error
    assert first.attributes["http.response.status_code"] == 429
    (retry,) = [e for e in first.events if e.name == "rlm.retry"]
    assert retry.attributes["rlm.next_attempt"] == 2 and retry.attributes["rlm.retry_after"]
    assert retry.attributes["rlm.delay_s"] == 2.0
    assert second.error is None and second.attributes["rlm.attempt"] == 2
    assert second.parent_id == first.parent_id  # both attempts of the one step
    # Virtual time: the first attempt took its second, the back-off two, the retry one.
    assert (second.start_time - first.start_time) / 1e9 == pytest.approx(3.0, abs=0.01)


def test_queue_and_pacing_waits_date_the_attempt_from_when_it_began_waiting() -> None:
    recorder = Recorder()
    builder = recorder.builder
    builder(RunStarted(t=0.0, query="q", context_chars=1, context_docs=1, config={},
                       wall_time=""))
    common: dict[str, Any] = {"call_id": "t1", "depth": 0, "request_id": 1, "lane": "sub",
                              "model": "m", "provider": "openai"}
    builder(LLMRequest(t=5.0, **common, prompt_chars=3, queue_wait_s=1.5, pace_wait_s=2.0,
                       attempt=1, in_flight=1))
    builder(LLMResponse(t=6.0, **common, status="ok", http_status=200, latency_s=1.0,
                        input_tokens=10, output_tokens=2))
    builder(LLMRetry(t=6.5, call_id="t1", request_id=1, lane="sub", attempt=2, delay_s=1.0,
                     reason="late", retry_after=False))  # for an attempt that did not fail
    builder(RunFinished(t=7.0, status="answered", answer="a", error=None, duration_s=7.0,
                        llm_calls=1, input_tokens=10, output_tokens=2))
    spans = {s.name: s for s in recorder.spans()}
    attempt, task = spans["chat m"], spans["rlm.task"]
    assert (attempt.end_time - attempt.start_time) / 1e9 == pytest.approx(4.5)
    queue, pace = attempt.events
    assert (queue.name, queue.attributes["rlm.wait_s"]) == ("rlm.queue_wait", 1.5)
    assert (pace.timestamp - queue.timestamp) / 1e9 == pytest.approx(1.5)
    assert task.attributes["rlm.task"] == 1 and attempt.attributes["rlm.task"] == 1
    assert attempt.parent_id == task.span_id


async def test_no_api_key_reaches_a_span() -> None:
    key = "sk-test-never-in-a-span-4242"
    recorder = Recorder(content=True)
    async with serving() as (url, _server):
        result = await RLM(provider="openai", model="fixture", base_url=url, api_key=key,
                           max_depth=2, sinks=[recorder.builder]).acompletion(
            QUESTION, NEEDLE.text)
    assert result.answer == NEEDLE.answer
    spans = recorder.spans()
    assert any(s.attributes.get("gen_ai.system") == "openai" for s in spans)
    for span in spans:
        assert key not in span.text and key not in json.dumps(span.resource)


def test_a_session_is_one_trace_with_a_run_per_question() -> None:
    recorder = Recorder(session=True)
    model = RLM(provider="fixture", sinks=[recorder.builder])
    with model.session(NEEDLE.text) as chat:
        assert chat.completion(QUESTION).answer == NEEDLE.answer
        assert chat.completion(QUESTION).answer == NEEDLE.answer
    spans = recorder.spans()
    assert len({s.trace_id for s in spans}) == 1
    (session,) = [s for s in spans if s.parent_id is None]
    runs = [s for s in spans if s.name == "rlm.run"]
    assert session.name == "rlm.session" and len(runs) == 2
    assert all(r.parent_id == session.span_id for r in runs)
    assert runs[0].end_time <= runs[1].start_time  # each question on its own clock, in order


def test_a_volley_is_one_trace_with_a_span_per_task() -> None:
    recorder = Recorder()
    result = RLM(provider="fixture", sinks=[recorder.builder]).volley(
        [QUESTION, "What is the secret word?"], NEEDLE.text, cache_warm=False)
    assert result.status == "succeeded"
    spans = recorder.spans()
    assert len({s.trace_id for s in spans}) == 1
    (volley,) = [s for s in spans if s.parent_id is None]
    tasks = {s.attributes["rlm.task"]: s for s in spans if s.name == "rlm.task"}
    assert volley.name == "rlm.volley" and sorted(tasks) == [1, 2]
    for span in (s for s in spans if s.name.startswith("chat ")):
        task = tasks[span.attributes["rlm.task"]]
        assert span.parent_id == task.span_id
        assert span.attributes["gen_ai.usage.input_tokens"] > 0
