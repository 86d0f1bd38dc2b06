"""The providers a configuration opens (rlm/providers/open.py), against real fixture
servers on loopback."""

from __future__ import annotations

from rlm._config import RunConfig
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
