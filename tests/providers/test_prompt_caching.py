"""What the providers send for prompt caching: Anthropic's breakpoints on a call's step
(the system prompt's, and the conversation's end, moved at each step), OpenAI's
``prompt_cache_key`` where OpenAI routes by it."""

from __future__ import annotations

import json

import httpx2
import pytest

from rlm.providers._http import make_http_client
from rlm.providers.anthropic import AnthropicProvider
from rlm.providers.base import CompletionRequest, Message
from rlm.providers.openai import OpenAIProvider

EPHEMERAL = {"type": "ephemeral"}
CONVERSATION: list[Message] = [
    {"role": "system", "content": "the system prompt"},
    {"role": "user", "content": "the query"},
    {"role": "assistant", "content": "step 1"},
    {"role": "user", "content": "its output"},
]
ANSWER = {"model": "m", "content": [{"type": "text", "text": "ok"}],
          "usage": {"input_tokens": 1, "output_tokens": 1}}
CHAT = {"model": "m", "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}


def _client(bodies: list[dict[str, object]], answer: object) -> httpx2.AsyncClient:
    def handler(req: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(req.content))
        return httpx2.Response(200, json=answer)

    return make_http_client(
        max_connections=2, request_timeout=10, transport=httpx2.MockTransport(handler)
    )


def _marks(body: dict[str, object]) -> int:
    """How many blocks of a Messages body carry a cache breakpoint."""
    text = json.dumps(body)
    return text.count('"cache_control"')


async def _anthropic_body(request: CompletionRequest) -> dict[str, object]:
    bodies: list[dict[str, object]] = []
    async with _client(bodies, ANSWER) as client:
        await AnthropicProvider(client, "https://api.anthropic.com", "k").complete(request)
    return bodies[0]


async def test_a_step_marks_its_system_prompt_and_its_conversations_end() -> None:
    body = await _anthropic_body(CompletionRequest(CONVERSATION, "m", cache_end=True))
    assert body["system"] == [
        {"type": "text", "text": "the system prompt", "cache_control": EPHEMERAL}
    ]
    messages = body["messages"]
    assert isinstance(messages, list)
    assert messages[:2] == [{"role": "user", "content": "the query"},
                            {"role": "assistant", "content": "step 1"}]
    assert messages[2] == {"role": "user", "content": [
        {"type": "text", "text": "its output", "cache_control": EPHEMERAL}]}
    assert _marks(body) == 2


async def test_the_breakpoint_moves_to_each_steps_end() -> None:
    first = await _anthropic_body(CompletionRequest(CONVERSATION[:2], "m", cache_end=True))
    later = await _anthropic_body(CompletionRequest(CONVERSATION, "m", cache_end=True))
    assert first["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "the query", "cache_control": EPHEMERAL}]}]
    assert later["messages"][0] == {"role": "user", "content": "the query"}  # type: ignore[index]
    assert _marks(first) == _marks(later) == 2  # the system prompt's and the rolling one


async def test_with_a_volleys_shared_prefix_too_a_request_stays_within_four_breakpoints() -> None:
    request = CompletionRequest(CONVERSATION, "m", cache_prefix=2, cache_end=True)
    body = await _anthropic_body(request)
    assert _marks(body) == 3 <= 4
    messages = body["messages"]
    assert isinstance(messages, list)
    assert messages[0]["content"][0]["cache_control"] == EPHEMERAL  # the shared prefix's end


async def test_a_one_shot_request_marks_nothing() -> None:
    body = await _anthropic_body(CompletionRequest(CONVERSATION, "m"))
    assert _marks(body) == 0 and body["system"] == "the system prompt"


@pytest.mark.parametrize(
    ("base_url", "sent"), [("https://api.openai.com/v1", True), ("http://vllm.local/v1", False)]
)
async def test_openai_gets_the_runs_cache_key_and_compatible_servers_do_not(
    base_url: str, sent: bool
) -> None:
    bodies: list[dict[str, object]] = []
    async with _client(bodies, CHAT) as client:
        provider = OpenAIProvider(client, base_url, None)
        await provider.complete(CompletionRequest(CONVERSATION, "m", cache_key="rlm-0123abcd"))
        await provider.complete(CompletionRequest(CONVERSATION, "m"))
    assert bodies[0].get("prompt_cache_key") == ("rlm-0123abcd" if sent else None)
    assert "prompt_cache_key" not in bodies[1]
