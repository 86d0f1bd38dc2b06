"""End to end: `rlm mcp` as a coding agent sees it, through the MCP SDK's own client.

The client is the SDK's ``stdio_client`` + ``ClientSession``, talking to the real
server process (``python -m rlm mcp``) over its stdin and stdout; the runs inside
are real (sandbox processes, the fixture model or the loopback fixture server).
The SDK is anyio code, and anyio runs on trio: the tests stay pytest-trio tests
like the rest of the suite, with no second event loop and no anyio test plugin.
Real processes, so trio's real clock.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("mcp", reason="the MCP SDK is the extra rlm[mcp]: pip install -e '.[mcp]'")

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp_types import CallToolResult, TextContent, TextResourceContents

from rlm.fixtures.needle import QUESTION, generate_needle
from tests.helpers import pid_alive, serving

#: Stands in for a real key: it must never come back in a result or reach the server's log.
SECRET = "sk-test-9f8e7d6c5b4a-never-shown"


@asynccontextmanager
async def mcp_server(*args: str, cwd: Path, errlog: Path) -> AsyncIterator[ClientSession]:
    """A session with ``rlm mcp ARGS`` started in ``cwd``; its stderr goes to ``errlog``.

    Its run history is its own (a state directory beside ``errlog``): what other tests
    ran is not listed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    env["RLM_API_KEY"] = SECRET
    env["XDG_STATE_HOME"] = str(errlog.with_name(errlog.name + ".state"))
    params = StdioServerParameters(command=sys.executable, args=["-m", "rlm", "mcp", *args],
                                   env=env, cwd=str(cwd))
    with errlog.open("w") as log, trio.fail_after(120):
        async with stdio_client(params, errlog=log) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            yield session


def text_of(result: CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


async def read_json(session: ClientSession, uri: str) -> Any:
    (contents,) = (await session.read_resource(uri)).contents
    assert isinstance(contents, TextResourceContents) and contents.mime_type == "application/json"
    return json.loads(contents.text)


def trace_events(path: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def assert_refused(result: CallToolResult, *words: str) -> None:
    """The protocol's tool error: isError, one ``Error: ...`` line naming ``words``."""
    text = text_of(result)
    assert result.is_error, text
    assert text.startswith("Error: ") and "\n" not in text, text
    for word in words:
        assert word in text, text


@pytest.fixture
def big_needle(tmp_path: Path) -> tuple[Path, str]:
    """A 5 MB needle file inside the server's root."""
    fixture = generate_needle(5_000_000, seed=11, depth=0.7)
    root = tmp_path / "project"
    root.mkdir()
    path = root / "big.txt"
    path.write_text(fixture.text, encoding="utf-8")
    return path, fixture.answer


async def test_a_client_lists_the_tools_asks_over_5_mb_and_reads_the_run_back(
    tmp_path: Path, big_needle: tuple[Path, str]
) -> None:
    path, answer = big_needle
    errlog = tmp_path / "server.err"
    async with mcp_server("--provider", "fixture", cwd=path.parent, errlog=errlog) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(tools) == {"run", "volley"}
        assert {"question", "paths"} <= set(tools["run"].input_schema["required"])

        result = await session.call_tool("run", {"question": QUESTION, "paths": ["big.txt"]})
        assert not result.is_error, text_of(result)
        assert text_of(result) == answer
        data = result.structured_content
        assert data is not None and data["status"] == "answered"
        assert data["usage"]["llm_calls"] > 1 and data["answered_by"] == ["fixture"]

        listed = {r.uri for r in (await session.list_resources()).resources}
        assert "rlm://runs" in listed
        runs = await read_json(session, "rlm://runs")
        assert runs[0]["id"] == data["run_id"] and runs[0]["status"] == "answered"
        assert runs[0]["answer"] == answer and runs[0]["page"] == data["page"]
        assert (await read_json(session, data["summary"]))["llm_calls"] == data["usage"][
            "llm_calls"]
        (page,) = (await session.read_resource(data["page"])).contents
        assert isinstance(page, TextResourceContents) and page.mime_type == "text/html"
        assert page.text.lstrip().lower().startswith("<!doctype html") and answer in page.text
        assert SECRET not in json.dumps(runs) and SECRET not in json.dumps(data)

        # The same question over the same 5 MB, within a budget too small for it, and
        # over a path outside the root: the protocol's tool errors, and the server goes on.
        stopped = await session.call_tool(
            "run", {"question": QUESTION, "paths": ["big.txt"], "max_llm_calls": 2})
        assert_refused(stopped, "max-llm-calls 2 reached")
        assert stopped.structured_content is not None
        assert stopped.structured_content["status"] == "budget_exceeded"
        outside = await session.call_tool(
            "run", {"question": QUESTION, "paths": [str(path.parent.parent / "big.txt")]})
        assert_refused(outside, "is outside the directories")
        assert len(await read_json(session, "rlm://runs")) == 2  # the path started no run
    assert SECRET not in errlog.read_text()


async def test_budgets_and_paths_are_refused_as_tool_errors_and_the_server_goes_on(
    tmp_path: Path, big_needle: tuple[Path, str]
) -> None:
    path, _ = big_needle
    root = path.parent
    outside = tmp_path / "outside.txt"
    outside.write_text("The magic number is 1.")
    (root / "escape.txt").symlink_to(outside)
    (root / "docs").mkdir()
    (root / "docs" / "a.txt").write_text("fine")
    (root / "docs" / "b.txt").symlink_to(outside)
    os.mkfifo(root / "pipe")
    (root / "small.txt").write_text("The magic number is 42.")
    errlog = tmp_path / "server.err"
    # The budget comes from the config file in the server's working directory (rlm.toml),
    # as it would for `rlm run` started there.
    (tmp_path / "rlm.toml").write_text("max_llm_calls = 2\n")
    async with mcp_server("--provider", "fixture", "--root", str(root),
                          "--max-context-bytes", "4MiB", cwd=tmp_path, errlog=errlog,
                          ) as session:
        async def ask(paths: list[str], **more: Any) -> CallToolResult:
            return await session.call_tool("run", {"question": QUESTION, "paths": paths, **more})

        small = str(root / "small.txt")
        stopped = await ask([small])
        assert_refused(stopped, "--max-llm-calls 2 reached")
        assert stopped.structured_content is not None
        assert stopped.structured_content["status"] == "budget_exceeded"
        assert stopped.structured_content["usage"]["llm_calls"] == 2
        assert_refused(await ask([small], max_llm_calls=3), "max_llm_calls 3 is above the 2")
        assert_refused(await ask([str(outside)]), "is outside the directories")
        assert_refused(await ask(["../outside.txt"]), "is outside the directories")
        assert_refused(await ask([str(root / "escape.txt")]), "is outside the directories")
        assert_refused(await ask([str(root / "docs")]), "links outside")
        assert_refused(await ask([str(root / "pipe")]), "not a regular file")
        assert_refused(await ask(["/dev/zero"]), "is outside the directories")
        assert_refused(await ask([str(path)]), "more than the 4MiB", "max-context-bytes")
        assert_refused(await ask([small], max_depth=0), "max_depth")
        assert_refused(await ask([]), "no paths")
        # Still serving: the refusals cost the calls, not the server.
        assert {t.name for t in (await session.list_tools()).tools} == {"run", "volley"}
        runs = await read_json(session, "rlm://runs")
        assert [r["status"] for r in runs] == ["budget_exceeded"]  # refusals start no run
    assert SECRET not in errlog.read_text()


async def test_a_volley_runs_its_tasks_over_the_paths(
    tmp_path: Path, big_needle: tuple[Path, str]
) -> None:
    path, answer = big_needle
    async with mcp_server("--provider", "fixture", "--root", str(path.parent), cwd=tmp_path,
                          errlog=tmp_path / "server.err") as session:
        result = await session.call_tool("volley", {
            "tasks": [QUESTION, "What is the lead auditor?"],
            "paths": ["big.txt"], "mode": "rlm",
        })
        assert not result.is_error, text_of(result)
        data = result.structured_content
        assert data is not None and data["status"] == "succeeded"
        assert [t["output"] for t in data["tasks"]] == [answer, "NOT FOUND"]  # no auditor in it
        assert text_of(result) == f"[1] succeeded: {answer}\n\n[2] succeeded: NOT FOUND"
        (kept,) = await read_json(session, "rlm://runs")
        assert (kept["kind"], kept["status"], kept["calls"]) == ("volley", "succeeded", 2)
        sent = sum(e["event"] == "llm_request" for e in trace_events(kept["trace"]))
        assert kept["llm_calls"] == sent > 2 * 16  # each task a whole call: 16 sub-queries each


async def test_a_cancelled_call_kills_its_sandboxes_and_is_kept_as_interrupted(
    tmp_path: Path, big_needle: tuple[Path, str]
) -> None:
    path, _ = big_needle
    async with serving(root_latency=30.0) as (url, _server), mcp_server(
        "--base-url", url, "--model", "fixture", cwd=path.parent, errlog=tmp_path / "err",
    ) as session:
        with trio.move_on_after(3):  # the root's first step takes 30 s: cancelled in it
            await session.call_tool("run", {"question": QUESTION, "paths": ["big.txt"]})
            pytest.fail("the call should still be running")
        with trio.fail_after(20):
            while True:  # the history, as the server keeps it
                kept = (await read_json(session, "rlm://runs"))[0]
                if kept["status"] != "running":
                    break
                await trio.sleep(0.1)
        assert kept["status"] == "interrupted" and "cancelled" in kept["error"]
        pids = [e["pid"] for e in trace_events(kept["trace"]) if e["event"] == "sandbox_started"]
        assert pids and not any(pid_alive(pid) for pid in pids)
