"""Shared test helpers: a scripted in-process provider and process checks."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from rlm.errors import ProviderError
from rlm.providers.base import Completion, CompletionRequest
from rlm.testing.server import FixtureServer, FixtureServerOptions

Script = Callable[[CompletionRequest], str]


def is_root_request(request: CompletionRequest) -> bool:
    return any(m["role"] == "system" for m in request.messages)


def assistant_turns(request: CompletionRequest) -> int:
    return sum(1 for m in request.messages if m["role"] == "assistant")


class ScriptedProvider:
    """Answers root steps from a list of replies (by step) and sub-queries by a function.

    ``fail`` may raise a ProviderError for a request (by returning one).
    ``latency`` sleeps on trio's clock before answering.
    """

    name = "scripted"

    def __init__(
        self,
        root: list[str] | Script,
        sub: Script = lambda r: "sub-answer",
        *,
        latency: Callable[[CompletionRequest], float] = lambda r: 0.0,
        fail: Callable[[CompletionRequest], ProviderError | None] = lambda r: None,
    ) -> None:
        self.root = root
        self.sub = sub
        self.latency = latency
        self.fail = fail
        self.requests: list[CompletionRequest] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        await trio.sleep(self.latency(request))
        error = self.fail(request)
        if error is not None:
            raise error
        if is_root_request(request):
            if callable(self.root):
                text = self.root(request)
            else:
                text = self.root[min(assistant_turns(request), len(self.root) - 1)]
        else:
            text = self.sub(request)
        chars = sum(len(m["content"]) for m in request.messages)
        return Completion(
            text=text, model=request.model, input_tokens=chars // 4, output_tokens=len(text) // 4
        )

    async def aclose(self) -> None:
        return None

    def root_requests(self) -> list[CompletionRequest]:
        return [r for r in self.requests if is_root_request(r)]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def sandbox_pids(trace: tuple[dict[str, Any], ...]) -> list[int]:
    return [e["pid"] for e in trace if e["event"] == "sandbox_started"]


def repl(code: str) -> str:
    return f"Working on it.\n```repl\n{code}\n```"


@asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[tuple[str, FixtureServer]]:
    """A fixture server on a free loopback port for the body; yields (base URL, server)."""
    server = FixtureServer(FixtureServerOptions(**options))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        yield f"http://127.0.0.1:{port}/v1", server
        nursery.cancel_scope.cancel()
