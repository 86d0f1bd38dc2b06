"""The fixture server over real loopback HTTP (normal clock: sockets never autojump)."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from click.testing import CliRunner

from rlm.cli import fixture_cmds
from rlm.testing.server import FixtureServer, FixtureServerOptions

QUESTION = "What is the magic number?"
SUB_BODY = {
    "model": "fixture",
    "messages": [{"role": "user", "content": f"{QUESTION}\nText:\nSo the magic number is 31337."}],
}
ROOT_BODY = {
    "model": "fixture-sequential:4",
    "messages": [
        {"role": "system", "content": "RLM prompt: use llm_query_batched(prompts)."},
        {"role": "user", "content": f"context: str\nQuery: {QUESTION}"},
    ],
}


@asynccontextmanager
async def running(**options: Any) -> AsyncIterator[tuple[FixtureServer, str]]:
    """A server on a free loopback port; the nursery is cancelled on the way out."""
    server = FixtureServer(FixtureServerOptions(**options))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        try:
            yield server, f"http://127.0.0.1:{port}"
        finally:
            nursery.cancel_scope.cancel()


async def post(client: httpx2.AsyncClient, url: str, body: object, **kw: Any) -> httpx2.Response:
    return await client.post(f"{url}/v1/chat/completions", json=body, **kw)


def assert_openai_error(response: httpx2.Response, status: int, kind: str) -> None:
    assert response.status_code == status
    error = response.json()["error"]
    assert error["type"] == kind
    assert isinstance(error["message"], str) and error["message"]


async def test_chat_completion_shape_and_usage() -> None:
    async with running() as (_, url), httpx2.AsyncClient() as client:
        response = await post(client, url, SUB_BODY)
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        data = response.json()
        assert data["object"] == "chat.completion"
        assert data["id"].startswith("chatcmpl-")
        assert data["model"] == "fixture"
        assert data["system_fingerprint"] == "rlm-fixture"
        assert isinstance(data["created"], int)
        assert data["choices"] == [{
            "index": 0,
            "message": {"role": "assistant", "content": "31337"},
            "finish_reason": "stop",
        }]
        prompt_chars = len(SUB_BODY["messages"][0]["content"])  # type: ignore[index]
        assert data["usage"] == {
            "prompt_tokens": math.ceil(prompt_chars / 4),
            "completion_tokens": 2,
            "total_tokens": math.ceil(prompt_chars / 4) + 2,
        }


async def test_root_request_gets_step_one_code_and_alias_path_works() -> None:
    async with running() as (server, url), httpx2.AsyncClient() as client:
        response = await client.post(f"{url}/chat/completions", json=ROOT_BODY)
        content = response.json()["choices"][0]["message"]["content"]
        assert "```repl" in content and "llm_query(p)" in content
        assert server.stats.root_requests == 1 and server.stats.sub_requests == 0


async def test_models_endpoint() -> None:
    async with running() as (_, url), httpx2.AsyncClient() as client:
        data = (await client.get(f"{url}/v1/models")).json()
        assert data["object"] == "list"
        assert {m["id"] for m in data["data"]} >= {"fixture", "fixture-sequential"}


async def test_api_key_is_required_when_set() -> None:
    async with running(api_key="sekrit") as (_, url), httpx2.AsyncClient() as client:
        assert_openai_error(await post(client, url, SUB_BODY), 401, "invalid_request_error")
        wrong = {"Authorization": "Bearer nope"}
        assert_openai_error(await post(client, url, SUB_BODY, headers=wrong), 401,
                            "invalid_request_error")
        right = {"Authorization": "Bearer sekrit"}
        assert (await post(client, url, SUB_BODY, headers=right)).status_code == 200


async def test_429_beyond_max_concurrent() -> None:
    responses: list[httpx2.Response] = []
    async with running(max_concurrent=2, sub_latency=0.4) as (server, url):
        async with httpx2.AsyncClient() as client:

            async def one() -> None:
                responses.append(await post(client, url, SUB_BODY))

            async with trio.open_nursery() as nursery:
                for _ in range(5):
                    nursery.start_soon(one)
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [200, 200, 429, 429, 429]
        for limited in (r for r in responses if r.status_code == 429):
            assert limited.headers["retry-after"] == "1"
            assert_openai_error(limited, 429, "rate_limit_exceeded")
        assert server.stats.max_in_flight == 2
        assert server.stats.in_flight == 0


async def test_concurrent_requests_overlap() -> None:
    async with running(sub_latency=0.3) as (server, url), httpx2.AsyncClient() as client:
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(post, client, url, SUB_BODY)
        assert trio.current_time() - start < 0.3 * 3
        assert server.stats.max_in_flight == 8


async def test_answers_built_ahead_of_their_deadline_keep_one_id_each_and_the_stats() -> None:
    """Replies are built when requests arrive (only written at their deadline): requests in
    flight together still get an id each, and are counted once they are answered."""
    async with running(sub_latency=0.2) as (server, url), httpx2.AsyncClient() as client:
        answers: list[httpx2.Response] = []

        async def one() -> None:
            answers.append(await post(client, url, SUB_BODY))

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(one)
            await trio.sleep(0.1)  # all four arrived, none answered yet
            assert server.stats.sub_requests == 0 and server.stats.by_status == {}
        assert len({answer.json()["id"] for answer in answers}) == 4
        assert server.stats.sub_requests == 4 and server.stats.by_status == {200: 4}


def first_event(stream: str) -> dict[str, Any]:
    """The first ``data:`` event of a server-sent-events body, decoded."""
    line = next(line for line in stream.splitlines() if line.startswith("data: "))
    event: dict[str, Any] = json.loads(line.removeprefix("data: "))
    return event


async def test_streams_in_flight_together_get_an_id_each_in_both_dialects() -> None:
    """A streamed reply's id is, as a whole reply's, the count of requests seen when it
    arrived: streams in flight together used to read the count after the latency, and
    shared one id."""
    anthropic_body = {"model": "fixture", "max_tokens": 64, "stream": True,
                      "messages": SUB_BODY["messages"]}
    async with running(sub_latency=0.2) as (_, url), httpx2.AsyncClient() as client:
        ids: dict[str, list[str]] = {"openai": [], "anthropic": []}

        async def one(dialect: str) -> None:
            if dialect == "openai":
                answer = await post(client, url, {**SUB_BODY, "stream": True})
                ids[dialect].append(first_event(answer.text)["id"])
            else:
                answer = await client.post(f"{url}/v1/messages", json=anthropic_body)
                ids[dialect].append(first_event(answer.text)["message"]["id"])
            assert answer.status_code == 200, answer.text

        async with trio.open_nursery() as nursery:
            for dialect in ("openai", "anthropic") * 3:
                nursery.start_soon(one, dialect)
    assert len(set(ids["openai"])) == 3 and len(set(ids["anthropic"])) == 3, ids
    assert all(i.startswith("chatcmpl-fixture-") for i in ids["openai"]), ids


async def test_garbage_mode_returns_html() -> None:
    async with running(garbage=True) as (_, url), httpx2.AsyncClient() as client:
        response = await post(client, url, SUB_BODY)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/html")
        with pytest.raises(json.JSONDecodeError):
            json.loads(response.text)


async def test_keep_alive_many_requests_one_connection_and_stats() -> None:
    async with running() as (_, url), httpx2.AsyncClient() as client:
        for _ in range(40):
            assert (await post(client, url, SUB_BODY)).status_code == 200
        assert (await client.get(f"{url}/nope")).status_code == 404
        stats = (await client.get(f"{url}/stats")).json()
        assert stats["total_requests"] == 41  # /stats itself is not counted
        assert stats["by_status"] == {"200": 40, "404": 1}
        assert stats["connections"] == 1
        assert stats["sub_requests"] == 40
        assert stats["in_flight"] == 0 and stats["max_in_flight"] == 1


async def test_bad_requests() -> None:
    async with running() as (_, url), httpx2.AsyncClient() as client:
        bad_json = await client.post(f"{url}/v1/chat/completions", content=b"{not json")
        assert_openai_error(bad_json, 400, "invalid_request_error")
        no_messages = await post(client, url, {"model": "fixture"})
        assert_openai_error(no_messages, 400, "invalid_request_error")
        bad_model = await post(client, url, {**SUB_BODY, "model": "fixture:0"})
        assert_openai_error(bad_model, 400, "invalid_request_error")
        assert_openai_error(await client.get(f"{url}/v1/chat/completions"), 405,
                            "invalid_request_error")
        assert_openai_error(await client.get(f"{url}/v2/else"), 404, "invalid_request_error")


@pytest.mark.parametrize(
    ("option", "status", "kind"),
    [("fail_500", 500, "server_error"), ("fail_529", 529, "overloaded_error"),
     ("rate_429", 429, "rate_limit_exceeded")],
)
async def test_fault_injection_statuses(option: str, status: int, kind: str) -> None:
    async with running(**{option: 1.0}) as (_, url), httpx2.AsyncClient() as client:
        response = await post(client, url, SUB_BODY)
        assert_openai_error(response, status, kind)
        if status == 429:
            assert response.headers["retry-after"] == "1"


async def test_drop_closes_without_response_and_server_survives() -> None:
    async with running(drop=1.0) as (server, url), httpx2.AsyncClient() as client:
        with pytest.raises(httpx2.RemoteProtocolError):
            await post(client, url, SUB_BODY)
        assert (await client.get(f"{url}/v1/models")).status_code == 200
        assert server.stats.dropped == 1


async def test_seeded_faults_are_reproducible() -> None:
    async def statuses() -> list[int]:
        async with running(fail_500=0.5, seed=3) as (_, url), httpx2.AsyncClient() as client:
            return [(await post(client, url, SUB_BODY)).status_code for _ in range(12)]

    first = await statuses()
    assert first == await statuses()
    assert set(first) == {200, 500}


async def test_client_disconnects_and_garbage_bytes_do_not_crash_the_server() -> None:
    async with running(sub_latency=0.2) as (_, url):
        port = int(url.rsplit(":", 1)[1])
        half = await trio.open_tcp_stream("127.0.0.1", port)
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99\r\n\r\n"
        await half.send_all(head + b"{")
        await half.aclose()
        junk = await trio.open_tcp_stream("127.0.0.1", port)
        await junk.send_all(b"\x00\x01 not http at all\r\n\r\n")
        assert (await junk.receive_some(4096)).startswith(b"HTTP/1.1 400")
        await junk.aclose()
        async with httpx2.AsyncClient() as client:
            impatient = httpx2.Timeout(0.05)
            with pytest.raises(httpx2.ReadTimeout):
                await post(client, url, SUB_BODY, timeout=impatient)
            assert (await post(client, url, SUB_BODY)).status_code == 200


async def test_expect_100_continue() -> None:
    async with running() as (_, url):
        stream = await trio.open_tcp_stream("127.0.0.1", int(url.rsplit(":", 1)[1]))
        body = json.dumps(SUB_BODY).encode()
        head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
        await stream.send_all(head)
        assert (await stream.receive_some(4096)).startswith(b"HTTP/1.1 100")
        await stream.send_all(body)
        reply = b""
        while b"31337" not in reply:
            reply += await stream.receive_some(4096)
        assert reply.startswith(b"HTTP/1.1 200")
        await stream.aclose()


# -- rlm fixture-server ------------------------------------------------------------------


def test_cli_port_in_use_is_exit_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(fixture_cmds.fixture_server, ["--port", str(port)])
    assert result.exit_code == 2
    assert f"Error: port {port} is in use; pick another with --port" in result.stderr


def test_cli_require_key_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(fixture_cmds.KEY_ENV, raising=False)
    result = CliRunner().invoke(fixture_cmds.fixture_server, ["--port", "0", "--require-key"])
    assert result.exit_code == 2
    assert fixture_cmds.KEY_ENV in result.stderr


def test_cli_ctrl_c_exits_0_without_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    async def interrupted(server: FixtureServer, host: str, port: int) -> None:
        raise BaseExceptionGroup("from a nursery", [KeyboardInterrupt()])

    monkeypatch.setattr(fixture_cmds, "_serve_forever", interrupted)
    result = CliRunner().invoke(fixture_cmds.fixture_server, ["--port", "0"])
    assert result.exit_code == 0
    assert "Traceback" not in result.output


def test_cli_help_has_an_example() -> None:
    result = CliRunner().invoke(fixture_cmds.fixture_server, ["--help"])
    assert result.exit_code == 0
    assert "Example" in result.output and "--require-key" in result.output


def test_cli_serves_until_sigint() -> None:
    root = Path(fixture_cmds.__file__).absolute().parents[2]
    code = "from rlm.cli.fixture_cmds import fixture_server; fixture_server()"
    env = {**os.environ, "PYTHONPATH": str(root)}
    with subprocess.Popen(
        [sys.executable, "-c", code, "--port", "0", "--latency", "0.01"],
        stderr=subprocess.PIPE, text=True, env=env,
    ) as process:
        try:
            banner = process.stderr.readline() if process.stderr else ""
            assert "fixture server (scripted, not a language model) listening on" in banner
            url = banner.split(" on ", 1)[1].strip()
            response = httpx2.post(f"{url}/chat/completions", json=ROOT_BODY, timeout=5)
            assert response.status_code == 200
            process.send_signal(signal.SIGINT)
            _, rest = process.communicate(timeout=10)
        finally:
            process.kill()
    assert process.returncode == 0
    assert "Traceback" not in rest
