"""The fixture model as the root with a real sub-model (issue 31, item 3): ``--provider
fixture --sub-base-url URL --sub-model M`` sends every sub-query to that endpoint, the
easiest way to try a local model as a sub-model.  Before, the fixture answered them all
and the endpoint was never asked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from rlm import RLM, SettingError
from rlm._config import RunConfig
from rlm.providers.fixture import FixtureProvider
from rlm.providers.open import open_providers
from rlm.providers.openai import OpenAIProvider
from tests.helpers import rlm_in_process, serving

NEEDLE = "filler. " * 300 + "The magic number is 6174. " + "more. " * 50


async def test_the_fixture_root_sends_its_sub_queries_to_the_sub_endpoint() -> None:
    async with serving() as (url, server):
        config = RunConfig(provider="fixture", sub_base_url=url, sub_model="local")
        async with open_providers(config.validate_endpoint()) as providers:
            assert isinstance(providers["root"], FixtureProvider)
            assert isinstance(providers["sub"], OpenAIProvider)
        model = RLM(provider="fixture", sub_base_url=url, sub_model="local")
        result = await model.acompletion("What is the magic number?", NEEDLE)
    assert result.answer == "6174"
    assert server.stats.root_requests == 0 and server.stats.sub_requests >= 4
    by_lane = result.usage_detail["by_lane"]
    assert by_lane["sub"]["llm_calls"] == server.stats.total_requests


def test_the_pairing_needs_the_sub_model_named() -> None:
    with pytest.raises(SettingError, match="name the model it serves with sub_model"):
        RLM(provider="fixture", sub_base_url="http://127.0.0.1:9/v1")
    done = rlm_in_process("run", "q", "--context", "x", "--provider", "fixture",
                          "--sub-base-url", "http://127.0.0.1:9/v1")
    assert done.returncode == 2
    assert "--sub-base-url with --provider fixture" in done.stderr
    assert "--sub-model" in done.stderr


def test_a_hosted_sub_endpoint_without_a_key_is_refused_before_sending() -> None:
    done = rlm_in_process("run", "q", "--context", "x", "--provider", "fixture",
                          "--sub-base-url", "https://api.openai.com/v1",
                          "--sub-model", "gpt-4.1-mini")
    assert done.returncode == 4 and "no API key for https://api.openai.com/v1" in done.stderr


def test_a_completion_volley_refuses_the_pairing(tmp_path: Path) -> None:
    done = rlm_in_process("volley", "a", "--provider", "fixture", "--sub-base-url",
                          "http://127.0.0.1:9/v1", "--sub-model", "local",
                          "--journal", str(tmp_path / "j.sqlite3"))
    assert done.returncode == 2 and "rlm volley --rlm" in done.stderr


async def test_the_command_line_pairing_answers_from_the_sub_endpoint(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    async with serving() as (url, server):
        with trio.fail_after(120):
            done = await trio.run_process(
                [sys.executable, "-m", "rlm", "run", "What is the magic number?",
                 "--context", NEEDLE, "--provider", "fixture", "--model", "fixture:4",
                 "--sub-base-url", url, "--sub-model", "local"],
                capture_stdout=True, capture_stderr=True, check=False,
                stdin=subprocess.DEVNULL, env=env,
            )
    assert done.returncode == 0 and done.stdout == b"6174\n", done.stderr
    assert server.stats.sub_requests == 4 and server.stats.root_requests == 0
