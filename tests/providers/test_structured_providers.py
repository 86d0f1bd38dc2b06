"""Structured answers in both provider dialects, over a real loopback fixture server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlm._run.schema import normalise_schema, validation_error
from rlm.providers._http import make_http_client
from rlm.providers.anthropic import AnthropicProvider
from rlm.providers.base import CompletionRequest, Provider
from rlm.providers.fixture import INVALID_JSON_ONCE, FixtureProvider
from rlm.providers.openai import OpenAIProvider
from tests.helpers import serving

PROMPT = "What is the magic number?\nText:\nIn the log, the magic number is 4242."


def _provider(dialect: str, client: Any, base_url: str) -> Provider:
    if dialect == "anthropic":
        return AnthropicProvider(client, base_url.removesuffix("/v1"), "key")
    return OpenAIProvider(client, base_url, "key")


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"number": "int", "where": "str"}, {"number": 4242, "where": "4242"}),
        (["int"], [4242]),  # not an object at the root: wrapped and unwrapped
    ],
)
async def test_both_dialects_return_json_that_fits_the_schema(
    dialect: str, spec: object, expected: object
) -> None:
    schema = normalise_schema(spec)
    client = make_http_client(max_connections=4, request_timeout=10)
    async with serving(api_key="key") as (base_url, server), client:
        provider = _provider(dialect, client, base_url)
        request = CompletionRequest(
            messages=[{"role": "user", "content": PROMPT}], model="fixture",
            response_schema=schema,
        )
        completion = await provider.complete(request)
    value = json.loads(completion.text)
    assert value == expected
    assert validation_error(value, schema) is None
    assert server.stats.sub_requests == 1


async def test_the_fixture_breaks_json_once_then_repairs_when_asked() -> None:
    provider = FixtureProvider()
    schema = normalise_schema({"number": "int"})
    prompt = f"{PROMPT}\n{INVALID_JSON_ONCE}"
    first = await provider.complete(CompletionRequest(
        messages=[{"role": "user", "content": prompt}], model="fixture", response_schema=schema,
    ))
    with pytest.raises(ValueError):
        json.loads(first.text)
    repaired = await provider.complete(CompletionRequest(
        messages=[
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": first.text},
            {"role": "user", "content": "That was not valid JSON. Answer again."},
        ],
        model="fixture", response_schema=schema,
    ))
    assert json.loads(repaired.text) == {"number": 4242}


async def test_anthropic_dialect_refuses_what_it_does_not_serve() -> None:
    import httpx2

    async with serving() as (base_url, _), httpx2.AsyncClient() as client:
        url = base_url.removesuffix("/v1") + "/v1/messages"
        no_cap = await client.post(url, json={"model": "fixture", "messages": []})
        tool = {"name": "answer", "input_schema": {"type": "object"}}
        streamed_tool = await client.post(url, json={
            "model": "fixture", "max_tokens": 5, "messages": [], "stream": True,
            "tools": [tool], "tool_choice": {"type": "tool", "name": "answer"},
        })
    assert no_cap.status_code == 400 and "max_tokens" in no_cap.text
    # Text answers stream (test_provider_streaming); a forced tool call is never streamed.
    assert streamed_tool.status_code == 400 and "text answers only" in streamed_tool.text
