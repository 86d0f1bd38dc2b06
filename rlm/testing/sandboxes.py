"""In-process sandboxes for virtual-time tests: a launcher to inject, no processes.

Pass ``LineLauncher()`` where the runtime takes ``sandboxes=`` (or
``RLM(sandboxes=lambda config, events: LineLauncher())``).  Its "code" is a line
language, one instruction a line:

- ``batch N``: ``llm_query_batched`` with N prompts (``item 0`` … ``item N-1``);
- ``query``: one ``llm_query``;
- ``loop N [K]``: a loop of N ``llm_query`` calls (``item 0`` …) sent ahead as
  auto-batching does when the execution has a window: offered, then collected one
  by one; with K, the loop breaks after K items and cancels the rest;
- ``sleep S``: S seconds on trio's clock (a slow execution);
- ``final TEXT``: ``FINAL(TEXT)``.

Output is one line per bridge call: the reply's value, or ``refused: …``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from rlm._sandbox.process import BridgeHandler, ExecResult, SandboxIdentity
from rlm_sandbox.protocol import (
    BridgeAnswer,
    CancelRequest,
    CollectRequest,
    QueryRequest,
    SpeculateRequest,
)

__all__ = ["LineLauncher", "LineSandbox"]


class LineSandbox:
    """One call's in-process sandbox (see the module docstring)."""

    def __init__(self, owner: SandboxIdentity) -> None:
        self.owner = owner
        self.alive = True
        self.executed: list[str] = []

    async def execute(
        self, code: str, on_bridge: BridgeHandler, *, limit: float, answer_json: bool = False,
        window: int = 0,
    ) -> ExecResult:
        started = trio.current_time()
        self.executed.append(code)
        output: list[str] = []
        final: str | None = None
        for line in code.strip().splitlines():
            op, _, arg = line.strip().partition(" ")
            if op in ("batch", "query"):
                n = int(arg or 1)
                prompts = [f"item {i}" for i in range(n)]
                reply = await on_bridge(QueryRequest(1, op == "batch", prompts, None, None))
                output.append(_shown(reply))
            elif op == "loop":
                count, _, stop = arg.partition(" ")
                output += await _loop(on_bridge, int(count), int(stop or count), window)
            elif op == "sleep":
                await trio.sleep(float(arg))
            elif op == "final":
                final = arg
        text = "\n".join(output)
        return ExecResult(True, text, len(text), None, final, trio.current_time() - started)

    async def export_variables(self) -> tuple[str, list[str]]:
        """The line language has no variables: nothing to export."""
        await trio.lowlevel.checkpoint()
        return "{}", []

    def kill(self, reason: str = "killed") -> None:
        self.alive = False

    async def aclose(self) -> None:
        self.alive = False


def _shown(reply: BridgeAnswer) -> str:
    return repr(reply["value"]) if reply["ok"] else f"refused: {reply['error']}"


async def _loop(on_bridge: BridgeHandler, n: int, stop: int, window: int) -> list[str]:
    """``loop N K``: N items offered ahead (up to ``window``), K of them used in order."""
    prompts = [f"item {i}" for i in range(n)]
    spec = list(range(1, min(n, window) + 1))
    accepted = 0
    if spec:
        offered = await on_bridge(SpeculateRequest(1, 1, 1, spec, prompts[:len(spec)],
                                                   [None] * len(spec), None))
        value = offered["value"]
        accepted = value["accepted"] if isinstance(value, dict) else 0
    shown = []
    for i in range(stop):
        reply = None
        if i < accepted:
            reply = await on_bridge(CollectRequest(1, i + 1))
        if reply is None or reply["kind"] == "unsent":
            reply = await on_bridge(QueryRequest(1, False, [prompts[i]], None, None))
        shown.append(_shown(reply))
    await on_bridge(CancelRequest(1, 1, spec[stop:accepted], True))
    return shown


class LineLauncher:
    """Opens :class:`LineSandbox` es; ``opened`` keeps every one, in order."""

    def __init__(self) -> None:
        self.opened: list[LineSandbox] = []

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[LineLauncher]:
        try:
            yield self
        finally:
            self.kill_all()

    async def open(
        self, nursery: trio.Nursery, *, context: str | list[str], owner: SandboxIdentity
    ) -> LineSandbox:
        await trio.lowlevel.checkpoint()
        self.opened.append(LineSandbox(owner))
        return self.opened[-1]

    def kill_all(self) -> None:
        for box in self.opened:
            box.kill()

    def finish(self) -> None:
        self.kill_all()
