"""The sandbox of one call: spawned in the background, replaced after a crash or timeout.

A call asks for its sandbox as soon as it starts, so spawning overlaps the
first model step.  An execution that times out or crashes costs the call an
error result, never the host: the dead sandbox is discarded and the next
execution gets a fresh one (its variables are gone, and the model is told so).
After too many losses in one call the call fails instead of looping.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import trio

from rlm._run.context import Context
from rlm._sandbox.interface import Launcher, ReplSandbox
from rlm._sandbox.process import BridgeHandler, ExecResult, SandboxIdentity
from rlm.errors import ExecutionTimeout, SandboxCrashed, SandboxError
from rlm_sandbox.protocol import BridgeAnswer, BridgeRequest, refusal

__all__ = ["SandboxSlot"]

MAX_SANDBOX_FAILURES = 3
_LOST_NOTE = (
    "[note: the sandbox of the earlier steps was lost between steps; this code ran in a "
    "fresh sandbox, and variables from earlier steps are gone]\n"
)


class SandboxSlot:
    """Holds at most one live sandbox for its call."""

    def __init__(self, launcher: Launcher, context: Context, owner: SandboxIdentity):
        self._launcher = launcher
        self._context = context
        self._owner = owner
        self._sandbox: ReplSandbox | None = None
        self._ready: trio.Event | None = None
        self._error: SandboxError | None = None
        self._failures = 0
        self._used = False  # whether the current sandbox ran any code (has variables)
        self.executing = False

    @property
    def started(self) -> bool:
        """Whether a sandbox is live or on its way (a session's slot between queries)."""
        return self._ready is not None

    @property
    def losses(self) -> int:
        """How many sandboxes this call lost to a crash or a timeout so far."""
        return self._failures

    def spawn(self, nursery: trio.Nursery) -> None:
        """Start getting a sandbox in the background (``nursery`` must outlive it)."""
        ready = trio.Event()
        self._ready = ready
        self._error = None
        self._used = False

        async def spawn() -> None:
            try:
                self._sandbox = await self._launcher.open(
                    nursery, context=self._context, owner=self._owner
                )
            except SandboxError as exc:
                self._error = exc
            finally:
                ready.set()

        nursery.start_soon(spawn)

    async def execute(
        self, code: str, nursery: trio.Nursery, on_bridge: BridgeHandler, limit: float,
        *, answer_json: bool = False, window: int = 0,
    ) -> ExecResult:
        """Run ``code``; a timeout or crash becomes an error result and a fresh sandbox.
        ``answer_json`` and ``window``: see :meth:`Sandbox.execute` (sent only when set)."""
        # A sandbox that ran earlier steps and died since (killed from outside, or cut
        # off when a session's query was interrupted): the code runs in a fresh one,
        # and the model is told why its variables are gone.
        lost = self._used and self._sandbox is not None and not self._sandbox.alive
        if self._ready is None or (self._sandbox is not None and not self._sandbox.alive):
            await self.discard()
            self.spawn(nursery)
        assert self._ready is not None
        await self._ready.wait()
        sandbox = self._sandbox
        if sandbox is None:
            raise SandboxCrashed(f"no sandbox for call {self._owner.call_id}: {self._error}")
        started = trio.current_time()
        self.executing = True
        self._used = True
        try:
            options: dict[str, Any] = {"answer_json": True} if answer_json else {}
            if window:
                options["window"] = window
            result = await sandbox.execute(code, on_bridge, limit=limit, **options)
            if not lost:
                return result
            return dataclasses.replace(
                result, output=_LOST_NOTE + result.output,
                output_chars=result.output_chars + len(_LOST_NOTE),
            )
        except (ExecutionTimeout, SandboxCrashed) as exc:
            self._failures += 1
            await self.discard()
            if self._failures > MAX_SANDBOX_FAILURES:
                raise SandboxCrashed(
                    f"call {self._owner.call_id} lost {self._failures} sandboxes; giving up: {exc}"
                ) from exc
            note = (
                ""
                if isinstance(exc, ExecutionTimeout)
                else ("; a fresh sandbox will be used and variables from earlier steps are gone")
            )
            return ExecResult(
                ok=False,
                output="",
                output_chars=0,
                error=f"{exc}{note}",
                final=None,
                duration_s=round(trio.current_time() - started, 6),
            )
        except BaseException:
            # Cut off mid-execution (cancelled, bare or, from inside a bridge call's
            # fan-out, in an exception group), it would go on running this code or wait
            # for a reply that never comes: a session's next query must not get it (the
            # next execute finds it dead and starts afresh).
            sandbox.kill("interrupted")
            raise
        finally:
            self.executing = False

    async def peek(self, name: str) -> str | None:
        """The value of variable ``name`` as a string, if the sandbox is idle and has it.

        Shielded and bounded to one second: used while the run is ending.
        """
        sandbox = self._sandbox
        if sandbox is None or not sandbox.alive or self.executing:
            return None

        async def no_bridge(request: BridgeRequest) -> BridgeAnswer:
            return refusal("the run has ended", "budget")

        with trio.CancelScope(shield=True), trio.move_on_after(1.0):
            try:
                result = await sandbox.execute(f"FINAL_VAR({name!r})", no_bridge, limit=1.0)
            except SandboxError:
                return None
            return result.final
        return None

    async def export_variables(self) -> tuple[str, list[str]]:
        """JSON of the sandbox's plain-data variables, and the names left out."""
        if self._ready is None:
            return "{}", []
        await self._ready.wait()
        if self._sandbox is None or not self._sandbox.alive:
            return "{}", []
        return await self._sandbox.export_variables()

    def kill(self, reason: str = "interrupted") -> None:
        """Kill the sandbox at once (synchronous; reaping happens in ``discard``, or in the
        launcher when it stops serving)."""
        if self._sandbox is not None:
            self._sandbox.kill(reason)

    async def discard(self) -> None:
        """Kill, reap and forget the current sandbox, if any."""
        sandbox, self._sandbox, self._ready = self._sandbox, None, None
        if sandbox is not None:
            await sandbox.aclose()
