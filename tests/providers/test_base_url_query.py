"""A base URL with a query (a gateway's ``?api-version=...&api_key=...``) sends to the
endpoint's path with the query kept, over a real loopback server; the query's secret
values appear in no trace and no error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from rlm import RLM
from rlm.errors import AuthenticationError
from rlm.providers._http import make_http_client
from rlm.providers.anthropic import AnthropicProvider
from rlm.providers.base import CompletionRequest
from rlm.testing.server import FixtureServer, FixtureServerOptions, RequestHead, _Reply
from rlm.testing.stream_reply import StreamReply
from tests.helpers import serving

SECRET = "sk-in-the-query"
QUERY = f"api-version=2024-02-01&api_key={SECRET}"


class RecordingServer(FixtureServer):
    """The fixture server, keeping each request's target (path and query) as sent."""

    def __init__(self, options: FixtureServerOptions) -> None:
        super().__init__(options)
        self.targets: list[bytes] = []

    async def _dispatch(self, head: RequestHead, body: bytes) -> _Reply | StreamReply | None:
        self.targets.append(head.target)
        return await super()._dispatch(head, body)


@asynccontextmanager
async def recording(**options: Any) -> AsyncIterator[tuple[str, RecordingServer]]:
    """A recording server on a free loopback port; yields (origin URL, server)."""
    server = RecordingServer(FixtureServerOptions(**options))
    async with serving(server) as (url, _):
        yield url.removesuffix("/v1"), server


async def test_an_openai_base_url_with_a_query_sends_and_its_trace_hides_the_key(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "trace.jsonl"
    async with recording() as (origin, server):
        model = RLM(base_url=f"{origin}/v1/?{QUERY}", model="fixture", trace_path=str(trace))
        result = await model.acompletion("What is the magic number?", "The magic number is 7.")
    assert result.status == "answered", result
    assert server.targets and set(server.targets) == {f"/v1/chat/completions?{QUERY}".encode()}
    text = trace.read_text()
    assert SECRET not in text and SECRET not in repr(result.trace)
    assert "api-version=2024-02-01&api_key=***" in text


@pytest.mark.parametrize("path", ["", "/v1"])
async def test_an_anthropic_base_url_with_a_query_keeps_it_after_the_messages_path(
    path: str,
) -> None:
    client = make_http_client(max_connections=2, request_timeout=10)
    async with recording() as (origin, server), client:
        provider = AnthropicProvider(client, f"{origin}{path}?{QUERY}", "k")
        request = CompletionRequest(
            messages=[{"role": "user", "content": "What is the magic number?"}], model="fixture"
        )
        done = await provider.complete(request)
    assert done.text
    assert server.targets == [f"/v1/messages?{QUERY}".encode()]
    assert SECRET not in provider.url and provider.url.endswith("/v1/messages?"
                                                                "api-version=2024-02-01&api_key=***")


async def test_an_error_names_the_url_without_the_querys_key() -> None:
    async with recording(api_key="sk-wanted") as (origin, server):
        model = RLM(base_url=f"{origin}/v1?{QUERY}", model="fixture", max_retries=0)
        with pytest.raises(AuthenticationError) as caught:
            await model.acompletion("What is the magic number?", "The magic number is 7.")
    message = str(caught.value)
    assert server.targets == [f"/v1/chat/completions?{QUERY}".encode()]
    assert SECRET not in message and "/v1/chat/completions?api-version" in message, message
    assert "api_key=***" in message, message
