"""The host side of one sandbox process.

A sandbox is ``python -m sandbox`` in its own session (process group), started
with a scrubbed environment (no API keys, no host variables) and an empty
temporary working directory.  Frames travel on two dedicated pipes, never on
the child's stdout/stderr.  The host caps the bytes it reads per frame and per
execution, enforces the per-execution wall-clock limit by killing the whole
process group, and turns anything the child does into a SandboxError for the
call that owns it: the host never dies with a sandbox.

Seams for the hardening issue: ``_child_env``/``_child_argv`` (what the child
gets) and ``isolation`` (what is reported in the ``sandbox_started`` event).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

import sandbox
from rlm._events import EventBus, SandboxExited, SandboxStarted
from rlm.errors import ExecutionTimeout, SandboxCrashed
from sandbox.protocol import FrameDecoder, FrameError, encode_frame

__all__ = ["BridgeHandler", "ExecResult", "Sandbox", "SandboxIdentity", "SandboxLauncher"]

#: Cap on one child→host frame, and on everything one execution may send.
MAX_CHILD_FRAME_BYTES = 16 * 1024 * 1024
MAX_EXEC_BYTES = 64 * 1024 * 1024
#: Host→child frames carry the whole context in ``init``.
MAX_HOST_FRAME_BYTES = 1024 * 1024 * 1024
_STDERR_TAIL = 4096
_START_TIMEOUT = 30.0

BridgeHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class SandboxIdentity:
    """Who owns a sandbox, for its events."""

    call_id: str
    parent_id: str | None
    depth: int


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one code execution."""

    ok: bool
    output: str
    output_chars: int
    error: str | None
    final: str | None
    duration_s: float


def _child_env() -> dict[str, str]:
    """The child's whole environment: nothing from the host is inherited."""
    return {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(Path(sandbox.__file__).resolve().parent.parent),
        "PYTHONSAFEPATH": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }


def _child_argv(in_fd: int, out_fd: int) -> list[str]:
    return [sys.executable, "-m", "sandbox", "--in-fd", str(in_fd), "--out-fd", str(out_fd)]


class Sandbox:
    """One live sandbox process.  Use :meth:`start` inside a nursery, then
    :meth:`aclose` (or :meth:`kill`) on every exit path."""

    isolation = ("restrictedpython", "scrubbed-env", "own-process-group", "dedicated-pipes")

    def __init__(
        self,
        process: trio.Process,
        send: trio.lowlevel.FdStream,
        receive: trio.lowlevel.FdStream,
        workdir: str,
        events: EventBus,
        owner: SandboxIdentity,
    ) -> None:
        self._process = process
        self._send = send
        self._receive = receive
        self._workdir = workdir
        self._events = events
        self._owner = owner
        self._decoder = FrameDecoder(MAX_CHILD_FRAME_BYTES)
        self._pending: list[dict[str, Any]] = []
        self._stderr_tail = b""
        self._exec_ids = 0
        self._closed = False
        self._kill_reason = "closed"
        self._bytes_read = 0
        self.pid = process.pid

    @classmethod
    async def start(
        cls,
        nursery: trio.Nursery,
        *,
        context: str | list[str],
        max_output_chars: int,
        events: EventBus,
        owner: SandboxIdentity,
    ) -> Sandbox:
        """Spawn a sandbox, send it the context, and wait until it is ready.

        ``nursery`` hosts the task that drains the child's stderr; it must
        outlive the sandbox.  On failure or cancellation nothing is left running.
        """
        started = events.now()
        workdir = tempfile.mkdtemp(prefix="rlm-sandbox-")
        child_in, host_out = os.pipe()
        host_in, child_out = os.pipe()
        try:
            process = await trio.lowlevel.open_process(
                _child_argv(child_in, child_out),
                pass_fds=(child_in, child_out),
                env=_child_env(),
                cwd=workdir,
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            for fd in (child_in, host_out, host_in, child_out):
                os.close(fd)
            shutil.rmtree(workdir, ignore_errors=True)
            raise SandboxCrashed(f"cannot start the sandbox process: {exc}") from exc
        os.close(child_in)
        os.close(child_out)
        box = cls(
            process,
            trio.lowlevel.FdStream(host_out),
            trio.lowlevel.FdStream(host_in),
            workdir,
            events,
            owner,
        )
        try:
            nursery.start_soon(box._drain_stderr)
            init = {"t": "init", "context": context, "max_output_chars": max_output_chars}
            with trio.fail_after(_START_TIMEOUT):
                await box._send_frame(init, MAX_HOST_FRAME_BYTES)
                ready = await box._next_frame()
        except BaseException as exc:
            box.kill("start-failed")
            await box.aclose()
            if isinstance(exc, trio.TooSlowError):
                raise SandboxCrashed("the sandbox did not start within 30 s") from exc
            raise
        if ready.get("t") != "ready":
            box.kill("protocol-error")
            await box.aclose()
            raise SandboxCrashed(f"sandbox sent {ready.get('t')!r} instead of 'ready'")
        events.emit(
            SandboxStarted(
                call_id=owner.call_id,
                parent_id=owner.parent_id,
                depth=owner.depth,
                pid=box.pid,
                startup_s=round(events.now() - started, 6),
                isolation=list(cls.isolation),
            )
        )
        return box

    async def execute(self, code: str, on_bridge: BridgeHandler, *, limit: float) -> ExecResult:
        """Run ``code`` and serve its bridge calls until it finishes.

        ``limit`` (seconds) bounds the time the child spends running code; time spent
        waiting for the host to answer a bridge call does not count (the run's
        own --timeout bounds that).  On timeout the process group is killed and
        ExecutionTimeout raised; a crash or protocol violation kills it and
        raises SandboxCrashed.  Either way this sandbox is dead afterwards.
        """
        self._exec_ids += 1
        exec_id = self._exec_ids
        started = trio.current_time()
        deadline = started + limit
        read_limit = self._bytes_read + MAX_EXEC_BYTES
        await self._send_frame({"t": "exec", "id": exec_id, "code": code}, MAX_CHILD_FRAME_BYTES)
        while True:
            frame: dict[str, Any] | None = None
            with trio.move_on_at(deadline):
                frame = await self._next_frame()
            if frame is None:
                self.kill("timeout")
                raise ExecutionTimeout(
                    f"execution exceeded the {limit:g} s limit (--exec-timeout); the sandbox "
                    "was restarted and variables from earlier steps are gone"
                )
            if self._bytes_read > read_limit:
                self.kill("flood")
                raise SandboxCrashed("the sandbox sent more than 64 MiB in one execution")
            kind = frame.get("t")
            if kind == "result" and frame.get("id") == exec_id:
                return ExecResult(
                    ok=bool(frame.get("ok")),
                    output=str(frame.get("output") or ""),
                    output_chars=int(frame.get("output_chars") or 0),
                    error=_opt_str(frame.get("error")),
                    final=_opt_str(frame.get("final")),
                    duration_s=round(trio.current_time() - started, 6),
                )
            if kind == "bridge":
                paused = trio.current_time()
                reply = await on_bridge(frame)
                deadline += trio.current_time() - paused
                await self._send_frame(
                    {"t": "reply", "id": frame.get("id"), **reply}, MAX_HOST_FRAME_BYTES
                )
                continue
            self.kill("protocol-error")
            raise SandboxCrashed(f"the sandbox sent an unexpected {kind!r} frame")

    def kill(self, reason: str = "killed") -> None:
        """Kill the whole process group at once.  Safe to call repeatedly."""
        if self._process.returncode is None:
            # ProcessLookupError: it already exited; aclose() reaps it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._kill_reason = reason

    async def aclose(self) -> None:
        """Kill the process (if alive), reap it, and remove its working directory.

        Runs shielded from cancellation so that no process outlives its call.
        """
        if self._closed:
            return
        self._closed = True
        reason = self._kill_reason
        self.kill(reason)
        with trio.CancelScope(shield=True):
            with trio.move_on_after(5):
                await self._process.wait()
            for stream in (self._send, self._receive):
                await stream.aclose()
        shutil.rmtree(self._workdir, ignore_errors=True)
        self._events.emit(
            SandboxExited(
                call_id=self._owner.call_id,
                parent_id=self._owner.parent_id,
                depth=self._owner.depth,
                pid=self.pid,
                returncode=self._process.returncode,
                reason=reason,
            )
        )

    @property
    def alive(self) -> bool:
        return not self._closed and self._process.returncode is None

    async def _send_frame(self, message: dict[str, Any], cap: int) -> None:
        try:
            data = encode_frame(message, cap)
        except FrameError as exc:
            raise SandboxCrashed(f"cannot send to the sandbox: {exc}") from exc
        try:
            await self._send.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise self._crashed("the sandbox stopped reading its input") from exc

    async def _next_frame(self) -> dict[str, Any]:
        while not self._pending:
            try:
                data = await self._receive.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise self._crashed("lost the pipe from the sandbox") from exc
            if not data:
                raise await self._exited()
            self._bytes_read += len(data)
            try:
                self._pending.extend(self._decoder.feed(data))
            except FrameError as exc:
                self.kill("protocol-error")
                raise SandboxCrashed(f"the sandbox broke the frame protocol: {exc}") from exc
        return self._pending.pop(0)

    async def _exited(self) -> SandboxCrashed:
        with trio.move_on_after(2):
            await self._process.wait()
        self.kill("crashed")
        return self._crashed("the sandbox process exited")

    def _crashed(self, what: str) -> SandboxCrashed:
        code = self._process.returncode
        detail = f"{what} (exit code {code})" if code is not None else what
        tail = self._stderr_tail.decode("utf-8", "replace").strip().splitlines()[-5:]
        if tail:
            detail += ": " + " | ".join(tail)
        self._kill_reason = "crashed"
        return SandboxCrashed(detail)

    async def _drain_stderr(self) -> None:
        """Keep the last few KiB of the child's stderr for error messages."""
        stream = self._process.stderr
        if stream is None:
            return
        try:
            while chunk := await stream.receive_some(65536):
                self._stderr_tail = (self._stderr_tail + chunk)[-_STDERR_TAIL:]
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


class SandboxLauncher:
    """Where calls get their sandboxes.  One per run.

    Today it spawns a fresh process per request; this is the seam for a
    zygote and a warm pool (the hardening issue), so calls never care how a
    sandbox came to be.
    """

    def __init__(self, *, events: EventBus, max_output_chars: int) -> None:
        self._events = events
        self._max_output_chars = max_output_chars

    async def open(
        self, nursery: trio.Nursery, *, context: str | list[str], owner: SandboxIdentity
    ) -> Sandbox:
        """A ready sandbox holding ``context``.  The caller must ``aclose`` it."""
        return await Sandbox.start(
            nursery,
            context=context,
            max_output_chars=self._max_output_chars,
            events=self._events,
            owner=owner,
        )
