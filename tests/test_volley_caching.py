"""Volley prompt caching at the provider boundary: the breakpoint and what is counted."""

from __future__ import annotations

import json

import httpx2

from rlm.providers.anthropic import AnthropicProvider
from rlm.volley import VolleyTask
from rlm.volley.layout import RequestLayout

BIG = "the magic number is 7. " * 400


async def test_anthropic_marks_the_end_of_the_shared_context_and_counts_cache_writes() -> None:
    bodies: list[dict[str, object]] = []

    def handler(req: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(req.content))
        usage = {"input_tokens": 5, "output_tokens": 3, "cache_read_input_tokens": 2000,
                 "cache_creation_input_tokens": 40}
        return httpx2.Response(200, json={"model": "claude-sonnet-4", "usage": usage,
                                          "content": [{"type": "text", "text": "ok"}]})

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    provider = AnthropicProvider(client, "https://api.anthropic.com", api_key="k")
    layout = RequestLayout([BIG], model="claude-sonnet-4")
    done = await provider.complete(layout.request(VolleyTask(1, "the task"), "t1"))
    body = bodies[0]
    context, task = body["messages"]  # type: ignore[misc]
    assert context["content"] == [{"type": "text", "text": layout.prefix[1]["content"],
                                   "cache_control": {"type": "ephemeral"}}]
    assert task == {"role": "user", "content": "the task"}
    assert isinstance(body["system"], str)  # the breakpoint is after the context, not here
    assert done.input_tokens == 5 + 2000 + 40 and done.metadata["cached_tokens"] == 2000


async def test_a_short_prefix_gets_no_breakpoint() -> None:
    layout = RequestLayout(["tiny"], model="m")
    assert layout.request(VolleyTask(1, "t"), "t1").cache_prefix == 0
    assert RequestLayout([BIG], model="m").request(VolleyTask(1, "t"), "t1").cache_prefix == 2
