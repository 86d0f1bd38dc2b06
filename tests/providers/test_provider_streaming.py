"""Provider streaming: OpenAI and Anthropic SSE read into text pieces and a Completion.

Loopback tests use the fixture server (real sockets, normal clock); the event
shapes the fixture server does not speak (Anthropic, error events, a stream
without its final event) use httpx2.MockTransport.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx2
import pytest

from rlm.errors import (
    ProviderConnectionError,
    ProviderResponseError,
    ProviderStatusError,
    RateLimitError,
)
from rlm.providers._http import ResponseLimits, make_http_client
from rlm.providers.anthropic import AnthropicProvider
from rlm.providers.base import CompletionRequest, StreamingProvider
from rlm.providers.fixture import fixture_reply, is_fixture_answer
from rlm.providers.openai import OpenAIProvider
from tests.helpers import serving

URL = "http://llm.test/v1"
QUESTION = "What is the magic number?"
SUB = CompletionRequest(
    messages=[{"role": "user", "content": f"{QUESTION}\nText:\nSo the magic number is 31337."}],
    model="fixture",
)
ROOT = CompletionRequest(
    messages=[
        {"role": "system", "content": "RLM prompt: use llm_query_batched(prompts)."},
        {"role": "user", "content": f"context: str\nQuery: {QUESTION}"},
    ],
    model="fixture:4",
)
Handler = Callable[[httpx2.Request], httpx2.Response]


def run_client() -> httpx2.AsyncClient:
    """The client a run's providers share, as open_providers builds it."""
    return make_http_client(max_connections=2, request_timeout=10)


class Pieces:
    """An on_text sink that keeps what it was given."""

    def __init__(self) -> None:
        self.pieces: list[str] = []

    async def __call__(self, text: str) -> None:
        self.pieces.append(text)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def sse(*payloads: object, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return b"".join(
        (head + "data: " + (p if isinstance(p, str) else json.dumps(p)) + "\n\n").encode()
        for p in payloads
    )


def mock(
    handler: Handler, kind: type[OpenAIProvider] | type[AnthropicProvider] = OpenAIProvider
) -> OpenAIProvider | AnthropicProvider:
    client = make_http_client(
        max_connections=4, request_timeout=10, transport=httpx2.MockTransport(handler)
    )
    return kind(client, URL, api_key="sk-test")


def streamed(body: bytes) -> Handler:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return handler


def chunk(content: str | None = None, finish: str | None = None) -> dict[str, object]:
    delta = {} if content is None else {"content": content}
    return {"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


# -- loopback: the fixture server streams ----------------------------------------------


async def test_a_streamed_reply_arrives_in_pieces_with_usage_over_loopback() -> None:
    async with serving(chunk_chars=5) as (url, server), run_client() as client:
        provider = OpenAIProvider(client, url, None)
        assert isinstance(provider, StreamingProvider)
        sink = Pieces()
        root = await provider.stream(ROOT, sink)
    expected = fixture_reply(ROOT.messages, "fixture:4")
    assert root.text == expected == sink.text
    assert len(sink.pieces) == -(-len(expected) // 5)
    assert all(len(p) <= 5 for p in sink.pieces)
    assert root.input_tokens > 0 and root.output_tokens > 0
    assert root.finish_reason == "stop"
    assert is_fixture_answer(root.metadata) and root.metadata["streamed"] is True
    assert server.stats.streams == 1


async def test_a_cut_stream_is_a_retryable_failure_and_the_next_attempt_is_whole() -> None:
    async with (
        serving(chunk_chars=4, cut_streams=1) as (url, server),
        run_client() as client,
    ):
        provider = OpenAIProvider(client, url, None)
        cut = Pieces()
        with pytest.raises(ProviderConnectionError) as caught:
            await provider.stream(ROOT, cut)
        assert caught.value.retryable and "discarded" in str(caught.value)
        whole = Pieces()
        completion = await provider.stream(ROOT, whole)
    assert cut.pieces and len(cut.text) < len(completion.text)
    assert completion.text == whole.text == fixture_reply(ROOT.messages, "fixture:4")
    assert server.stats.cut_streams == 1 and server.stats.streams == 2


async def test_a_stall_longer_than_the_idle_timeout_fails_the_attempt() -> None:
    async with serving(chunk_delay=2.0) as (url, _), run_client() as client:
        provider = OpenAIProvider(
            client, url, None, limits=ResponseLimits(stream_idle_timeout=0.2)
        )
        with pytest.raises(ProviderConnectionError, match=r"stalled: no bytes for 0\.2 s"):
            await provider.stream(SUB, Pieces())


# -- OpenAI stream shapes ----------------------------------------------------------------


async def test_openai_stream_request_asks_for_usage_and_reads_the_last_chunk() -> None:
    seen: list[httpx2.Request] = []
    body = sse(
        chunk("Hel"),
        chunk("lo"),
        chunk(None, "length"),
        {"model": "m", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}},
        "[DONE]",
    )

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return streamed(body)(request)

    sink = Pieces()
    completion = await mock(handler).stream(SUB, sink)
    sent = json.loads(seen[0].content)
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert seen[0].headers["accept"] == "text/event-stream"
    assert sink.pieces == ["Hel", "lo"] and completion.text == "Hello"
    assert (completion.input_tokens, completion.output_tokens) == (7, 2)
    assert completion.finish_reason == "length"


async def test_openai_stream_without_done_is_a_retryable_failure() -> None:
    provider = mock(streamed(sse(chunk("Hel"), chunk("lo", "stop"))))
    with pytest.raises(ProviderConnectionError, match="before its final event") as caught:
        await provider.stream(SUB, Pieces())
    assert caught.value.retryable


async def test_openai_error_event_mid_stream_is_the_status_it_names() -> None:
    overloaded = sse(chunk("Hel"), {"error": {"message": "upstream overloaded", "code": 503}})
    with pytest.raises(ProviderStatusError, match="mid-stream") as caught:
        await mock(streamed(overloaded)).stream(SUB, Pieces())
    assert caught.value.status == 503 and caught.value.retryable
    limited = sse({"error": {"message": "slow down", "code": 429}})
    with pytest.raises(RateLimitError):
        await mock(streamed(limited)).stream(SUB, Pieces())
    unknown = sse({"error": "something broke"})
    with pytest.raises(ProviderStatusError) as caught:
        await mock(streamed(unknown)).stream(SUB, Pieces())
    assert caught.value.status == 502 and caught.value.retryable


async def test_openai_garbage_chunk_is_a_response_error() -> None:
    with pytest.raises(ProviderResponseError, match="not a chat completion chunk"):
        await mock(streamed(sse("<html>"))).stream(SUB, Pieces())


async def test_an_error_status_on_a_stream_request_is_translated() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            429, headers={"retry-after": "3"}, json={"error": {"message": "too many"}}
        )

    with pytest.raises(RateLimitError) as caught:
        await mock(handler).stream(SUB, Pieces())
    assert caught.value.retry_after == 3.0


async def test_a_server_that_ignores_stream_answers_whole_and_is_one_piece() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        message = {"role": "assistant", "content": "whole"}
        return httpx2.Response(
            200, json={"model": "m", "choices": [{"message": message, "finish_reason": "stop"}]}
        )

    sink = Pieces()
    completion = await mock(handler).stream(SUB, sink)
    assert sink.pieces == ["whole"] and completion.text == "whole"


# -- Anthropic Messages streaming -------------------------------------------------------


def anthropic_events(*, stop: bool = True, error: dict[str, str] | None = None) -> bytes:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "model": "claude-x",
            "usage": {"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 1},
        },
    }
    parts = [
        sse(start, event="message_start"),
        sse({"type": "ping"}, event="ping"),
        sse({"type": "content_block_start", "index": 0}, event="content_block_start"),
        sse(
            {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Hi "}},
            event="content_block_delta",
        ),
    ]
    if error is not None:
        parts.append(sse({"type": "error", "error": error}, event="error"))
    parts += [
        sse(
            {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "there"}},
            event="content_block_delta",
        ),
        sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 6},
            },
            event="message_delta",
        ),
    ]
    if stop:
        parts.append(sse({"type": "message_stop"}, event="message_stop"))
    return b"".join(parts)


async def test_anthropic_stream_text_usage_and_stop_reason() -> None:
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return streamed(anthropic_events())(request)

    sink = Pieces()
    completion = await mock(handler, AnthropicProvider).stream(SUB, sink)
    assert json.loads(seen[0].content)["stream"] is True
    assert sink.pieces == ["Hi ", "there"] and completion.text == "Hi there"
    assert (completion.input_tokens, completion.output_tokens) == (15, 6)
    assert completion.finish_reason == "end_turn" and completion.model == "claude-x"
    assert completion.metadata["cached_tokens"] == 5


async def test_anthropic_overloaded_event_mid_stream_is_a_retryable_529() -> None:
    body = anthropic_events(error={"type": "overloaded_error", "message": "Overloaded"})
    with pytest.raises(ProviderStatusError) as caught:
        await mock(streamed(body), AnthropicProvider).stream(SUB, Pieces())
    assert caught.value.status == 529 and caught.value.retryable


async def test_anthropic_stream_without_message_stop_is_a_retryable_failure() -> None:
    body = anthropic_events(stop=False)
    with pytest.raises(ProviderConnectionError, match="before its final event"):
        await mock(streamed(body), AnthropicProvider).stream(SUB, Pieces())


async def test_anthropic_streams_over_loopback_and_a_cut_stream_is_a_retryable_failure() -> None:
    async with (
        serving(chunk_chars=5, cut_streams=1) as (url, server),
        run_client() as client,
    ):
        provider = AnthropicProvider(client, url, "k")
        cut = Pieces()
        with pytest.raises(ProviderConnectionError) as caught:
            await provider.stream(ROOT, cut)
        assert caught.value.retryable
        whole = Pieces()
        completion = await provider.stream(ROOT, whole)
    expected = fixture_reply(ROOT.messages, "fixture:4")
    assert completion.text == whole.text == expected
    assert cut.pieces and len(cut.text) < len(expected)
    assert len(whole.pieces) == -(-len(expected) // 5)
    assert completion.input_tokens > 0 and completion.output_tokens > 0
    assert completion.finish_reason == "end_turn" and completion.metadata["streamed"] is True
    assert server.stats.streams == 2 and server.stats.cut_streams == 1
