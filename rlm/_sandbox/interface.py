"""What a call needs of sandboxes, as protocols: so a launcher can be injected.

:class:`rlm._sandbox.launcher.SandboxLauncher` (real processes, a zygote, a
warm pool) is the one the runtime makes by default; tests pass an in-process
launcher through the same constructor argument (the way httpx takes a
``transport=``) instead of patching anything.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import trio

from rlm._sandbox.process import BridgeHandler, ExecResult, SandboxIdentity

__all__ = ["Launcher", "LauncherFactory", "ReplSandbox"]


class ReplSandbox(Protocol):
    """One call's REPL: runs code blocks, serving their bridge calls meanwhile."""

    @property
    def alive(self) -> bool: ...

    async def execute(
        self, code: str, on_bridge: BridgeHandler, *, limit: float, answer_json: bool = False,
        window: int = 0,
    ) -> ExecResult:
        """Run ``code``; raise ExecutionTimeout or SandboxCrashed when the sandbox is lost.

        ``answer_json=True`` (passed only to a session's root sandbox, for a query that
        asks for structured data): FINAL_VAR of a dict or list answers its JSON.
        ``window``: how many sub-queries its loops may send ahead (auto-batching)."""
        ...

    async def export_variables(self) -> tuple[str, list[str]]:
        """JSON of its plain-data variables (``sandbox/rlm_sandbox/plaindata.py``) and the names
        of those that are not plain data."""
        ...

    def kill(self, reason: str = "killed") -> None:
        """Kill it at once (synchronous; safe to repeat)."""

    async def aclose(self) -> None:
        """Kill (if alive) and reap it; runs shielded, on every exit path."""


class Launcher(Protocol):
    """Where a run's calls get their sandboxes.

    It may also have ``finish() -> None``: the one call it serves (a run's root)
    has ended, so it ends every sandbox now (synchronous) and ``serving``'s exit
    waits until all are gone (``SandboxLauncher`` has it).  Optional, so a launcher
    written before it existed still works: without it, the root's own sandbox is
    killed and ``serving``'s exit reaps the rest, as before.
    """

    def serving(self) -> AbstractAsyncContextManager[object]:
        """Be ready for the body's duration; on exit every sandbox it made is gone."""
        ...

    async def open(
        self, nursery: trio.Nursery, *, context: str | list[str], owner: SandboxIdentity
    ) -> ReplSandbox:
        """A ready sandbox holding ``context``; the caller closes it."""
        ...

    def kill_all(self) -> None:
        """Kill every sandbox it made, now (synchronous: for a second Ctrl-C)."""


#: Makes one run's launcher from the run's configuration; the run's event bus
#: receives its sandbox events.  ``rlm._run.assembly.default_launcher`` is one.
#: Called as ``factory(config, events)``, plus ``tools=[names]`` when the run has
#: host tools and ``answer_json=True`` when it wants a structured answer (the
#: sandbox must know both), so a factory for such runs takes those keywords.
LauncherFactory = Callable[..., Launcher]
