"""The providers a configuration opens (rlm/providers/open.py), against real fixture
servers on loopback."""

from __future__ import annotations

from typing import Literal

import httpx2
import pytest
import trio

from rlm import RLM, SettingError
from rlm._config import RunConfig
from rlm.fixtures import generate_needle
from rlm.providers.base import CompletionRequest
from rlm.providers.open import open_providers
from tests.helpers import serving

ASK = CompletionRequest(
    messages=[{"role": "user", "content": "What is the magic number?\nthe magic number is 7"}],
    model="fixture", lane="sub",
)


async def test_lanes_to_one_url_share_one_provider() -> None:
    async with serving() as (url, server):
        async with open_providers(RunConfig(model="fixture", base_url=url)) as providers:
            assert providers["root"] is providers["sub"]
            assert (await providers["sub"].complete(ASK)).text.strip() == "7"
        assert server.stats.total_requests == 1


async def test_a_sub_base_url_gets_a_provider_of_its_own() -> None:
    async with serving() as (root_url, root_server), serving() as (sub_url, sub_server):
        config = RunConfig(model="fixture", base_url=root_url, sub_base_url=sub_url)
        async with open_providers(config) as providers:
            assert providers["root"] is not providers["sub"]
            await providers["sub"].complete(ASK)
            await providers["sub"].complete(ASK)
            await providers["root"].complete(ASK)
        assert (root_server.stats.total_requests, sub_server.stats.total_requests) == (1, 2)


async def test_a_fan_out_is_answered_on_at_most_max_concurrent_connections() -> None:
    """The run's one client holds a connection per request in flight, at most
    max_concurrent, and keeps them open for the next requests."""
    async with serving(sub_latency=0.05) as (url, server):
        config = RunConfig(model="fixture", base_url=url, max_concurrent=4)
        async with open_providers(config) as providers:
            answers = []

            async def one() -> None:
                answers.append((await providers["sub"].complete(ASK)).text.strip())

            for _ in range(2):  # a second wave goes out on the first one's connections
                async with trio.open_nursery() as nursery:
                    for _ in range(12):
                        nursery.start_soon(one)
        assert answers == ["7"] * 24
        assert server.stats.max_in_flight <= 4 and server.stats.connections <= 4
        with trio.fail_after(10):  # closing the providers closed their connections
            while server.stats.open_connections:  # noqa: ASYNC110 (the server's own counter)
                await trio.sleep(0.01)


async def test_a_run_over_http_sends_only_its_own_requests() -> None:
    needle = generate_needle(20_000, seed=3)
    async with serving(root_latency=0.2) as (url, server):
        model = RLM(base_url=url, model="fixture:4", max_concurrent=5, root_permits=1)
        result = await model.acompletion("What is the magic number?", needle.text)
    assert result.answer == needle.answer
    assert server.stats.total_requests == result.usage.llm_calls


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_transport_given_carries_every_request_of_both_lanes(
    provider: Literal["openai", "anthropic"],
) -> None:
    """A test's MockTransport goes under the client the run builds: the same path."""
    seen: list[httpx2.Request] = []
    answer = (
        {"model": "m", "content": [{"type": "text", "text": "7"}], "stop_reason": "end_turn"}
        if provider == "anthropic"
        else {"model": "m", "choices": [{"message": {"content": "7"}, "finish_reason": "stop"}]}
    )

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, json=answer)

    config = RunConfig(provider=provider, model="m", base_url="http://llm.test/v1",
                       sub_base_url="http://sub.test/v1", api_key="sk-test")
    async with open_providers(config, transport=httpx2.MockTransport(handler)) as providers:
        for lane in ("root", "sub"):
            assert (await providers[lane].complete(ASK)).text == "7"
    assert [request.url.host for request in seen] == ["llm.test", "sub.test"]


async def test_a_hosted_api_without_a_key_is_refused_before_anything_is_sent() -> None:
    config = RunConfig(model="gpt-4.1", base_url="https://api.openai.com/v1")
    with pytest.raises(SettingError, match=r"no API key for https://api\.openai\.com/v1: pass "
                       r"the key to RLM\(api_key=KEY\)"):
        async with open_providers(config):
            pass


def test_the_python_api_says_to_pass_api_key() -> None:
    with pytest.raises(SettingError, match=r"RLM\(api_key=KEY\)"):
        RLM(model="gpt-4.1").completion("q", "context")
