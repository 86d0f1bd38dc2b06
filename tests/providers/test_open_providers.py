"""The providers a configuration opens (rlm/providers/open.py), against real fixture
servers on loopback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlm import RLM, SettingError
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


def test_after_load_http_transport_opening_providers_imports_nothing() -> None:
    """What `rlm run` loads before its clock is all that opening HTTP providers needs
    (a module imported on the way to the root's first request costs the run ~0.2-3 ms)."""
    script = """
import sys, trio
from rlm._config import RunConfig
from rlm.providers._http import load_http_transport
from rlm.providers.open import open_providers
load_http_transport()
before = set(sys.modules)
async def main():
    config = RunConfig(model="m", base_url="http://127.0.0.1:9/v1", api_key="k")
    async with open_providers(config):
        pass
trio.run(main)
print(" ".join(sorted(set(sys.modules) - before)))
"""
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True)
    assert ran.stdout.split() == []


async def test_a_hosted_api_without_a_key_is_refused_before_anything_is_sent() -> None:
    config = RunConfig(model="gpt-4.1", base_url="https://api.openai.com/v1")
    with pytest.raises(SettingError, match=r"no API key for https://api\.openai\.com/v1: pass "
                       r"the key to RLM\(api_key=KEY\)"):
        async with open_providers(config):
            pass


def test_the_python_api_says_to_pass_api_key() -> None:
    with pytest.raises(SettingError, match=r"RLM\(api_key=KEY\)"):
        RLM(model="gpt-4.1").completion("q", "context")
