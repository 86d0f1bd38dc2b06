"""Shared test helpers: process checks, REPL replies, a loopback fixture server.

The fake provider is :class:`rlm.testing.provider.FunctionProvider`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from rlm.testing.provider import assistant_turns, is_root_request
from rlm.testing.server import FixtureServer, FixtureServerOptions

__all__ = [
    "assistant_turns", "is_root_request", "pid_alive", "repl", "rlm_in_process", "sandbox_pids",
    "serving",
]


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
async def serving(
    server: FixtureServer | None = None, **options: Any
) -> AsyncIterator[tuple[str, FixtureServer]]:
    """A fixture server on a free loopback port for the body; yields (base URL, server).
    ``server``: one the test made (a subclass that records), instead of one from ``options``."""
    server = server or FixtureServer(FixtureServerOptions(**options))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        yield f"http://127.0.0.1:{port}/v1", server
        nursery.cancel_scope.cancel()


def rlm_in_process(*args: str, env: dict[str, str] | None = None,
                   stdin: str | bytes | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI entry (``rlm.cli:main``) run in this process, without the interpreter
    start-up of a subprocess: for checks that need no process of their own (usage errors,
    commands that start no sandbox).  As with the subprocess helpers, no RLM_/OPENAI_
    setting leaks in from the caller.  An uncaught exception fails the test."""
    from click.testing import CliRunner

    from rlm.cli import main

    # RLM_DEBUG is named even when unset: `--debug` sets it in os.environ, and the runner
    # puts back only the variables it was given, so it would stay on for later tests.
    unset: dict[str, str | None] = {
        "RLM_DEBUG": None, **{k: None for k in os.environ if k.startswith(("RLM_", "OPENAI_"))}
    }
    runner = CliRunner(env={**unset, **(env or {})})
    result = runner.invoke(main, list(args), input=stdin, catch_exceptions=False)
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)
