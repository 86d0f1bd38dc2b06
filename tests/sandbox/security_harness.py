"""Shared harness of the security suite (no tests here).

``open_sandbox`` gives a real, hardened sandbox from a real launcher (zygote
and all); ``Session.run`` executes model code in it and checks that the
canary secret planted in the host's environment never comes back.
``sandbox_descendants`` lists sandbox processes still alive below the test
process, for the no-leftover checks.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from rlm._events import Event, EventBus, SandboxStarted
from rlm._sandbox.launcher import ExecResult, Sandbox, SandboxIdentity, SandboxLauncher
from rlm_sandbox.protocol import BridgeAnswer, BridgeRequest, QueryRequest, answer

CANARY = "rlm-canary-" + secrets.token_hex(12)
OWNER = SandboxIdentity("sec", None, 0)


async def echo_bridge(request: BridgeRequest) -> BridgeAnswer:
    """Answers every bridge call with the prompts' lengths (or the budget)."""
    if not isinstance(request, QueryRequest):
        return answer({"llm_calls_used": 0})
    value = [f"len={len(p)}" for p in request.prompts]
    return answer(value if request.batched else value[0])


def assert_no_canary(*texts: object) -> None:
    for text in texts:
        assert CANARY not in str(text), "the host's secret reached the sandbox"


@dataclass
class Session:
    """One sandbox under test and what the host saw of it."""

    box: Sandbox
    launcher: SandboxLauncher
    events: list[Event] = field(default_factory=list)
    bridge_requests: list[BridgeRequest] = field(default_factory=list)

    async def run(self, code: str, *, limit: float = 5.0) -> ExecResult:
        async def bridge(request: BridgeRequest) -> BridgeAnswer:
            self.bridge_requests.append(request)
            return await echo_bridge(request)

        result = await self.box.execute(code, bridge, limit=limit)
        assert_no_canary(result.output, result.error, result.final)
        return result

    async def fails(self, code: str, *expected: str) -> str:
        """Run ``code``; it must fail with an error naming one of ``expected``."""
        result = await self.run(code)
        assert not result.ok, f"should have failed: {code!r} printed {result.output!r}"
        assert result.error is not None
        assert any(word in result.error for word in expected), result.error
        return result.error

    async def ok(self, code: str) -> str:
        result = await self.run(code)
        assert result.ok, f"{code!r} failed: {result.error}"
        return result.output

    @property
    def pids(self) -> list[int]:
        return [e.pid for e in self.events if isinstance(e, SandboxStarted)]


@asynccontextmanager
async def open_sandbox(context: str | list[str] = "the context", *, pool_size: int = 0,
                       memory_bytes: int = 1 << 30, max_output_chars: int = 1000,
                       ) -> AsyncIterator[Session]:
    """A hardened sandbox from a launcher of its own; everything is killed on exit."""
    os.environ["RLM_API_KEY"] = CANARY  # the host holds a secret; the sandbox must not see it
    bus = EventBus()
    events = bus.events
    launcher = SandboxLauncher(events=bus, max_output_chars=max_output_chars,
                               pool_size=pool_size, memory_bytes=memory_bytes)
    try:
        async with launcher.serving(), trio.open_nursery() as nursery:
            box = await launcher.open(nursery, context=context, owner=OWNER)
            session = Session(box, launcher, events)
            try:
                yield session
            finally:
                await box.aclose()
    finally:
        os.environ.pop("RLM_API_KEY", None)
    assert sandbox_descendants() == [], "a sandbox process outlived its launcher"


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def sandbox_descendants(root: int | None = None) -> list[int]:
    """Live (non-zombie) sandbox processes descended from ``root`` (default: this process)."""
    root = os.getpid() if root is None else root
    parents = {int(name): _ppid(int(name)) for name in os.listdir("/proc") if name.isdigit()}
    found = []
    for pid in parents:
        ancestor: int | None = pid
        for _ in range(8):
            ancestor = parents.get(ancestor) if ancestor is not None else None
            if ancestor == root:
                break
        else:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                command = cmdline.read()
            with open(f"/proc/{pid}/stat", "rb") as stat:
                state = stat.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if b"sandbox" in command and state != b"Z":
            found.append(pid)
    return found
