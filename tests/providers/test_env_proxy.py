"""A proxy the environment names (HTTP_PROXY, NO_PROXY) carries the run's requests, as it
would any httpx2 client's: the run's one client reads them (rlm/providers/_http.py).

The real executable runs with the variables set, against a loopback "proxy" that
answers the chat request itself: the endpoint's host does not exist, so only a
request sent through the proxy can be answered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import trio

from tests.helpers import serving
from tests.raw_http import raw_server, reply

RLM_BIN = str(Path(sys.executable).with_name("rlm"))
ANSWER = json.dumps(
    {"model": "m", "choices": [{"message": {"content": "FINAL(42)"}, "finish_reason": "stop"}]}
).encode()
ENDPOINT = "http://api.internal.invalid/v1"  # .invalid never resolves (RFC 2606)


async def run_cli(
    context: Path, endpoint: str = ENDPOINT, **env: str
) -> subprocess.CompletedProcess[bytes]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("RLM_", "OPENAI_")) and "proxy" not in k.lower()}
    return await trio.run_process(
        [RLM_BIN, "run", "What is the magic number?", "--context-file", str(context),
         "--base-url", endpoint, "--model", "fixture", "--json", "--max-retries", "0"],
        env={**clean, **env}, capture_stdout=True, capture_stderr=True, check=False,
    )


async def test_a_proxy_from_the_environment_carries_the_run(tmp_path: Path) -> None:
    context = tmp_path / "context.txt"
    context.write_text("the number is 42\n")
    async with raw_server(lambda head: reply("200 OK", ANSWER)) as (port, heads):
        done = await run_cli(context, HTTP_PROXY=f"http://127.0.0.1:{port}")
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout)["answer"] == "42"
    # A proxy is asked for the whole URL (absolute form).
    assert heads and heads[0].startswith(b"POST http://api.internal.invalid/v1/chat/completions ")


async def test_no_proxy_sends_that_host_directly(tmp_path: Path) -> None:
    context = tmp_path / "context.txt"
    context.write_text("filler\n" * 50 + "The magic number is 4242.\n")
    async with serving() as (url, _), raw_server(lambda head: reply("200 OK", ANSWER)) as (
        port,
        heads,
    ):
        done = await run_cli(
            context, url, HTTP_PROXY=f"http://127.0.0.1:{port}", NO_PROXY="127.0.0.1"
        )
    assert done.returncode == 0, done.stderr.decode()
    assert "4242" in json.loads(done.stdout)["answer"]  # the fixture server's answer
    assert heads == []  # nothing went through the proxy
