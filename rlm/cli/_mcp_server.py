"""``rlm mcp``'s server: rlm's tools and resources in the official MCP SDK (``mcp``).

Tools: ``run`` (a question over files, an RLM call) and ``volley`` (tasks over
files).  Resources: ``rlm://runs`` (the run history, as ``rlm runs`` lists it),
``rlm://runs/{ref}`` (one run's summary) and ``rlm://runs/{ref}/page`` (its
``rlm view`` page).  The server speaks over stdio, on trio through anyio (the SDK's
own stdio transport; no asyncio loop runs beside trio).  Calls run one at a time,
so the server's ``--max-concurrent``, ``--rpm`` and ``--tpm`` hold for all of them
as they do for one ``rlm run``.  A refusal or a budget stop is the protocol's tool
error (``isError``, one ``Error: ...`` line); nothing a client sends crashes the
server.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Annotated, Any, Literal

import trio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

import rlm
from rlm._config import SETTINGS
from rlm.cli import _mcp_calls as calls
from rlm.cli._mcp_calls import Outcome, ServerSetup, refused
from rlm.errors import RLMError, UsageError
from rlm.history import RunEntry, RunHistory, history_enabled

__all__ = ["build_server", "serve"]

#: How many of the newest runs ``rlm://runs`` lists (older ones: ``rlm://runs/{ref}``).
RUNS_LISTED = 100


def _help(name: str) -> str:
    return next(row.spec.help for row in SETTINGS if row.name == name)


_LIMIT = " At most the server's own limit: a call may lower it, never raise it."
Paths = Annotated[list[str], Field(
    description="Files or directories to read (a directory: each file a document, filtered "
    "by glob). Relative paths start at the server's first root; every path must lie inside "
    "the directories the server was started with (--root).")]
Glob = Annotated[str, Field(description="Which files of a directory to read, e.g. '*.log' "
                                        "or '**/*.md'.")]
Encoding = Annotated[str, Field(description="Encoding of the files.")]
Model = Annotated[str | None, Field(description="Root model for this call (in a volley, every "
                                               "task's); default: the server's.")]
SubModel = Annotated[str | None, Field(description=_help("sub_model"))]
Depth = Annotated[int | None, Field(description=_help("max_depth"))]
Iterations = Annotated[int | None, Field(description=_help("max_iterations"))]
Calls = Annotated[int | None, Field(description=_help("max_llm_calls") + _LIMIT)]
Cost = Annotated[float | None, Field(description=_help("max_cost") + _LIMIT)]
Timeout = Annotated[float | None, Field(
    description="Seconds the whole run may take (in a volley, each task)." + _LIMIT)]
Mode = Annotated[Literal["rlm", "completion"] | None, Field(
    description="rlm: each task is a whole RLM call over the files (for inputs larger than "
    "a model's window); completion: each task is one request with the files as its context. "
    "Default: the server's (completion unless configured).")]

_RUN = (
    "Answer a question over files with a recursive language model (as `rlm run`). The files "
    "never enter a model's window: they sit as `context` in a sandboxed Python REPL, and the "
    "model writes code to search them and calls sub-models on the pieces, within the "
    "server's budgets. Returns the answer; the result's data holds usage, cost and the "
    "run's id (its page: the resource rlm://runs/ID/page)."
)
_VOLLEY = (
    "Run independent tasks (prompts) over the same files, through one gate and one budget "
    "(as `rlm volley`); `paths` may be empty, then the tasks have no context. Returns each "
    "task's output in task order; the result's data holds every task's status, tokens and "
    "cost."
)


def build_server(setup: ServerSetup) -> MCPServer[Any]:
    """The MCP server: rlm's tools and resources over ``setup``."""
    server: MCPServer[Any] = MCPServer(
        "rlm", version=rlm.__version__, log_level="WARNING",
        instructions="rlm answers questions over files too large for your context window: "
        "the `run` tool hands them to a recursive language model that searches them with "
        f"code in a sandbox. Paths must lie inside {setup.roots}. Budgets are the server's.",
    )
    one_at_a_time = trio.Lock()

    async def answer(work: Callable[[], Awaitable[Outcome]]) -> CallToolResult:
        try:
            async with one_at_a_time:
                outcome = await work()
        except RLMError as exc:  # a refusal: a path, a setting, a limit above the server's
            outcome = refused(str(exc))
        return CallToolResult(content=[TextContent(type="text", text=outcome.text)],
                              structured_content=outcome.data, is_error=outcome.error)

    spends = ToolAnnotations(read_only_hint=False, destructive_hint=False,
                             idempotent_hint=False, open_world_hint=True)

    @server.tool(annotations=spends, description=_RUN)
    async def run(question: str, paths: Paths, glob: Glob = "*", encoding: Encoding = "utf-8",
                  model: Model = None, sub_model: SubModel = None, max_depth: Depth = None,
                  max_iterations: Iterations = None, max_llm_calls: Calls = None,
                  max_cost: Cost = None,
                  timeout: Timeout = None,  # noqa: ASYNC109 - the setting, as the schema names it
                  ) -> CallToolResult:
        given = {"model": model, "sub_model": sub_model, "max_depth": max_depth,
                 "max_iterations": max_iterations, "max_llm_calls": max_llm_calls,
                 "max_cost": max_cost, "timeout": timeout}
        return await answer(partial(calls.ask, setup, question, paths, glob=glob,
                                    encoding=encoding, given=given))

    @server.tool(annotations=spends, description=_VOLLEY)
    async def volley(tasks: list[str], paths: Paths, glob: Glob = "*",
                     encoding: Encoding = "utf-8", mode: Mode = None, model: Model = None,
                     max_llm_calls: Calls = None, max_cost: Cost = None,
                     timeout: Timeout = None,  # noqa: ASYNC109 - the setting's name
                     ) -> CallToolResult:
        given = {"model": model, "max_llm_calls": max_llm_calls, "max_cost": max_cost,
                 "timeout": timeout}
        return await answer(partial(calls.volley, setup, tasks, paths, glob=glob,
                                    encoding=encoding, mode=mode, given=given))

    _add_resources(server, setup)
    return server


def _add_resources(server: MCPServer[Any], setup: ServerSetup) -> None:
    @server.resource("rlm://runs", name="runs", mime_type="application/json",
                     description=f"The {RUNS_LISTED} newest runs in the run history, newest "
                     "first (what `rlm runs` lists), each with the URIs of its summary and page.")
    async def runs() -> str:
        if not history_enabled(setup.history):
            return "[]"
        entries = await trio.to_thread.run_sync(RunHistory().entries)
        summaries = [{**e.summary(), **_uris(e.id)} for e in reversed(entries[-RUNS_LISTED:])]
        return json.dumps(summaries, ensure_ascii=False)

    @server.resource("rlm://runs/{ref}", name="run", mime_type="application/json",
                     description="One run's summary (`rlm runs show REF`): REF is its id, a "
                     "prefix of it, `last` or `last~N`.")
    async def run_summary(ref: str) -> str:
        entry = _entry(ref)
        return json.dumps({**entry.summary(), **_uris(entry.id)}, ensure_ascii=False)

    @server.resource("rlm://runs/{ref}/page", name="page", mime_type="text/html",
                     description="One run's page (`rlm view REF`): one self-contained HTML file "
                     "with the call tree, every step's code and output, and the timeline.")
    async def page(ref: str) -> str:
        return await trio.to_thread.run_sync(_page, _entry(ref).id)


def _uris(ref: str) -> Mapping[str, str]:
    return {"uri": f"rlm://runs/{ref}", "page": f"rlm://runs/{ref}/page"}


def _entry(ref: str) -> RunEntry:
    try:
        return RunHistory().find(ref)
    except UsageError as exc:
        raise ResourceNotFoundError(str(exc)) from None


def _page(ref: str) -> str:
    from rlm.view import load_trace, render_page  # the page assets: only when one is read

    trace = RunHistory().find(ref).trace_file()
    if trace is None:
        raise ResourceError(f"run {ref} has no trace (it was killed before writing one)")
    try:
        return render_page(load_trace(trace))
    except UsageError as exc:
        raise ResourceError(str(exc)) from None


async def serve(setup: ServerSetup) -> bool:
    """Serve over stdin and stdout until the client closes them, or SIGTERM / SIGHUP
    stops the server (then True).  Either way every call in flight is cancelled, which
    kills its sandboxes, before this returns."""
    from rlm.cli._signals import TERMINATE_SIGNALS

    server = build_server(setup)
    signalled = False
    async with trio.open_nursery() as nursery:

        async def stop_on_signal() -> None:
            nonlocal signalled
            with trio.open_signal_receiver(*TERMINATE_SIGNALS) as signals:
                async for _ in signals:
                    signalled = True
                    nursery.cancel_scope.cancel()
                    return

        nursery.start_soon(stop_on_signal)
        await server.run_stdio_async()
        nursery.cancel_scope.cancel()
    return signalled
