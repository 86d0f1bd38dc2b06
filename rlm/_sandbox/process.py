"""The host side of one sandbox process.

A sandbox is a hardened ``python -m rlm_sandbox`` process in its own session
(process group), forked by the zygote or spawned directly with a scrubbed
environment (no API keys, no host variables).  Frames travel on two
dedicated pipes, never on the child's stdout/stderr; a large context travels
as a sealed memfd over a third, Unix-socket, channel.  The host caps the
bytes it reads per frame and per execution, enforces the per-execution
wall-clock limit by killing the whole process group, and turns anything the
child does into a SandboxError for the call that owns it: the host never
dies with a sandbox.

A :class:`Sandbox` is born *spawned* (hardened, waiting for ``init``: what a
warm pool holds) and becomes *ready* after :meth:`Sandbox.initialize`.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

import trio

from rlm._events import EventBus, SandboxExited, SandboxStarted
from rlm._sandbox.isolation import HOST_LAYERS, active_layers
from rlm._spelling import setting
from rlm.errors import ExecutionTimeout, SandboxCrashed
from rlm_sandbox.protocol import (
    CHILD_FRAME_MAX_BYTES,
    HOST_FRAME_MAX_BYTES,
    BridgeAnswer,
    BridgeRequest,
    ExecFrame,
    ExportFrame,
    FrameDecoder,
    FrameError,
    InitFrame,
    ReplyFrame,
    ResultFrame,
    decode_bridge,
    encode_frame,
    join_bridge,
    refusal,
)

__all__ = [
    "BridgeHandler", "ChildProcess", "ExecResult", "HostEnds", "Sandbox", "SandboxIdentity",
]

#: Cap on everything one execution may send (frame caps are the protocol's).
MAX_EXEC_BYTES = 64 * 1024 * 1024
_STDERR_TAIL = 4096
_MAX_READ_BYTES = 1 << 20
_START_TIMEOUT = 30.0

#: Answers one ``bridge`` frame.  The frame is as the child sent it: untrusted, checked by
#: the handler.
BridgeHandler = Callable[[BridgeRequest], Awaitable[BridgeAnswer]]


@dataclass(frozen=True, slots=True, eq=False)
class SandboxIdentity:
    """Who owns a sandbox, for its events."""

    call_id: str
    parent_id: str | None
    depth: int


@dataclass(frozen=True, slots=True, eq=False)
class ExecResult:
    """The outcome of one code execution."""

    ok: bool
    output: str
    output_chars: int
    error: str | None
    final: str | None
    duration_s: float


class ChildProcess(Protocol):
    """A sandbox process however it was started (directly, or forked by the zygote)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    @property
    def stderr(self) -> trio.abc.ReceiveStream | None: ...

    def kill(self) -> None:
        """SIGKILL the child's whole process group (no-op once it was reaped)."""

    async def wait(self) -> None:
        """Reap the child (after ``kill``); the caller shields and bounds this."""


@dataclass(slots=True, eq=False)
class HostEnds:
    """The host's ends of a sandbox's channels."""

    send: trio.lowlevel.FdStream
    receive: trio.lowlevel.FdStream
    context: socket.socket


class Sandbox:
    r"""One sandbox process.  Spawned, then :meth:`initialize`\ d once; :meth:`aclose`
    (or :meth:`kill`) it on every exit path."""

    def __init__(self, process: ChildProcess, ends: HostEnds, events: EventBus,
                 reap_cap_s: float = 5.0) -> None:
        self._process = process
        #: How long aclose() waits for the reap before it kills again and waits it out.
        self._reap_cap_s = reap_cap_s
        self._send = ends.send
        self._receive = ends.receive
        self._context_channel = ends.context
        self._events = events
        self._owner: SandboxIdentity | None = None
        self._decoder = FrameDecoder(CHILD_FRAME_MAX_BYTES)
        self._pending: list[dict[str, Any]] = []
        self._stderr_tail = b""
        self._exec_ids = 0
        self._closed = False
        self._killed = False
        self._kill_reason = "closed"
        self._bytes_read = 0
        self._max_output_chars = 1 << 20  # set by initialize()
        self.pid = process.pid
        #: Called once the process is reaped (the launcher returns its memory reservation).
        self.on_close: Callable[[], None] | None = None
        #: The child's hardening report (``{layer: "active" | "unavailable: why"}``).
        self.layers: dict[str, str] = {}

    @property
    def isolation(self) -> list[str]:
        """Every layer active around this sandbox (host-side ones included)."""
        return [*HOST_LAYERS, *active_layers(self.layers)]

    def start_draining(self, nursery: trio.Nursery) -> None:
        """Keep the tail of the child's stderr; ``nursery`` must outlive the sandbox."""
        nursery.start_soon(self._drain_stderr)

    async def wait_hardened(self) -> None:
        """Wait for a forked sandbox's ``hardened`` frame (its layers are applied)."""
        try:
            with trio.fail_after(_START_TIMEOUT):
                frame = await self._next_frame()
        except trio.TooSlowError:
            self.kill("start-failed")
            raise SandboxCrashed("the sandbox did not harden itself within 30 s") from None
        if frame.get("t") != "hardened":
            self.kill("protocol-error")
            raise SandboxCrashed(f"sandbox sent {frame.get('t')!r} instead of 'hardened'")

    async def initialize(
        self,
        *,
        context: str | list[str],
        context_fd: int | None,
        max_output_chars: int,
        owner: SandboxIdentity,
        requested_at: float,
        tools: list[str] | None = None,
        answer_json: bool = False,
    ) -> None:
        """Send ``init`` (the context inline, or ``context_fd``: a sealed memfd) and
        wait for ``ready``.  On failure or cancellation the sandbox is closed."""
        self._owner = owner
        self._max_output_chars = max_output_chars
        init: InitFrame = {"t": "init", "max_output_chars": max_output_chars}
        if tools:
            init["tools"] = tools
        if answer_json:
            init["answer_json"] = True
        try:
            with trio.fail_after(_START_TIMEOUT):
                if context_fd is None:
                    init["context"] = context
                else:
                    init["context_fd"] = True
                    try:
                        socket.send_fds(self._context_channel, [b"c"], [context_fd])
                    except OSError as exc:
                        raise self._crashed("cannot pass the context to the sandbox") from exc
                await self._send_frame(init)
                ready = await self._next_frame()
        except BaseException as exc:
            self.kill("start-failed")
            await self.aclose()
            if isinstance(exc, trio.TooSlowError):
                raise SandboxCrashed("the sandbox did not start within 30 s") from exc
            raise
        if ready.get("t") != "ready":
            self.kill("protocol-error")
            await self.aclose()
            raise SandboxCrashed(f"sandbox sent {ready.get('t')!r} instead of 'ready'")
        layers = ready.get("isolation")
        if isinstance(layers, dict):
            self.layers = {str(k): str(v) for k, v in layers.items()}
        self._events.emit(
            SandboxStarted(
                call_id=owner.call_id,
                parent_id=owner.parent_id,
                depth=owner.depth,
                pid=self.pid,
                startup_s=round(self._events.now() - requested_at, 6),
                isolation=self.isolation,
            )
        )

    async def execute(
        self, code: str, on_bridge: BridgeHandler, *, limit: float, answer_json: bool = False,
        window: int = 0,
    ) -> ExecResult:
        """Run ``code`` and serve its bridge calls until it finishes.

        ``answer_json``: its FINAL_VAR of a dict or list answers JSON (a session's
        query that asks for structured data; the launcher's flag covers whole runs).
        ``window``: how many sub-queries its loops may send ahead (auto-batching).

        ``limit`` (seconds) bounds the execution's wall time, except the time spent
        waiting for bridge answers that were served (the run's own --timeout bounds
        that).  A call the budget refused counts in full, so code that swallows the
        refusal and asks again still ends at the limit.  On timeout the process group
        is killed and ExecutionTimeout raised; a crash or protocol violation kills it
        and raises SandboxCrashed.  Either way this sandbox is dead afterwards.
        """
        self._exec_ids += 1
        exec_id = self._exec_ids
        started = trio.current_time()
        deadline = started + limit
        read_limit = self._bytes_read + MAX_EXEC_BYTES
        request = ExecFrame(t="exec", id=exec_id, code=code)
        if answer_json:
            request["answer_json"] = True
        if window:
            request["window"] = window
        await self._send_frame(request)
        parts: list[dict[str, Any]] = []  # of a bridge request too large for one frame
        while True:
            frame: dict[str, Any] | None = None
            with trio.move_on_at(deadline):
                frame = await self._next_frame()
            if frame is None:
                self.kill("timeout")
                raise ExecutionTimeout(
                    f"execution exceeded the {limit:g} s limit ({setting('exec_timeout')}; time "
                    "waiting for answers the budget refused counts); the sandbox was restarted "
                    "and variables from earlier steps are gone"
                )
            if self._bytes_read > read_limit:
                self.kill("flood")
                raise SandboxCrashed("the sandbox sent more than 64 MiB in one execution")
            kind = frame.get("t")
            if kind == "result" and frame.get("id") == exec_id:
                return self._result(frame, round(trio.current_time() - started, 6))
            if kind == "bridge" and frame.get("part") is True:
                parts.append(frame)  # joined with the rest when its last frame comes;
                continue  # the execution's read cap bounds how many parts there can be
            if kind == "bridge":
                paused = trio.current_time()
                request_id = frame.get("id")
                if type(request_id) is not int:
                    self.kill("protocol-error")
                    raise SandboxCrashed("the sandbox sent a bridge frame without an int id")
                try:
                    pieces, parts = parts, []
                    answer = await on_bridge(decode_bridge(
                        join_bridge(pieces, frame) if pieces else frame))
                except FrameError as exc:  # model code's own doing: its call is refused
                    answer = refusal(str(exc), "usage")
                if answer.get("kind") != "budget":
                    deadline += trio.current_time() - paused
                await self._send_frame(ReplyFrame(t="reply", id=request_id, **answer))
                continue
            self.kill("protocol-error")
            raise SandboxCrashed(f"the sandbox sent an unexpected {kind!r} frame")

    def _result(self, frame: dict[str, Any], duration_s: float) -> ExecResult:
        """The outcome in a ``result`` frame, checked: the child is not trusted.

        A frame with the wrong types kills the sandbox (a protocol error); text
        is cut to the configured output size again here, whatever the child
        claims to have done.
        """
        if not _valid_result(frame):
            self.kill("protocol-error")
            raise SandboxCrashed("the sandbox sent a malformed 'result' frame")
        result = cast(ResultFrame, frame)  # checked just above
        cap = self._max_output_chars
        error = result["error"]
        return ExecResult(
            ok=result["ok"],
            output=result["output"][:cap],
            output_chars=max(result["output_chars"], len(result["output"])),
            error=None if error is None else error[-cap:],
            final=result["final"],
            duration_s=duration_s,
        )

    async def export_variables(self) -> tuple[str, list[str]]:
        """JSON of the namespace's plain-data variables and the names left out
        (``sandbox/rlm_sandbox/plaindata.py``); SandboxCrashed if the sandbox does not answer."""
        self._exec_ids += 1
        export_id = self._exec_ids
        await self._send_frame(ExportFrame(t="export", id=export_id))
        with trio.move_on_after(_START_TIMEOUT):
            frame = await self._next_frame()
            data, skipped = frame.get("data"), frame.get("skipped")
            if (frame.get("t") == "exported" and frame.get("id") == export_id
                    and isinstance(data, str) and isinstance(skipped, list)
                    and all(isinstance(name, str) for name in skipped)):
                return data, skipped
            self.kill("protocol-error")
            raise SandboxCrashed("the sandbox answered 'export' with a malformed frame")
        self.kill("timeout")
        raise SandboxCrashed("the sandbox did not export its variables within 30 s")

    def kill(self, reason: str = "killed") -> None:
        """Kill the whole process group at once.  Safe to call repeatedly."""
        if self._process.returncode is None and not self._killed:
            self._process.kill()
            self._killed = True
            self._kill_reason = reason

    async def aclose(self) -> None:
        """Kill the process (if alive), reap it, and close its channels.

        Runs shielded from cancellation so that no process outlives its call.
        """
        if self._closed:
            return
        self._closed = True
        reason = self._kill_reason
        self.kill(reason)
        try:
            with trio.CancelScope(shield=True):
                with trio.move_on_after(self._reap_cap_s):
                    await self._process.wait()
                if self._process.returncode is None:
                    # Slow to die (a large address space on a busy CPU): kill again and
                    # wait it out.  SIGKILL was delivered, so this ends; leaving the pid
                    # unreaped would leave a zombie behind the run.
                    self._process.kill()
                    await self._process.wait()
                for stream in (self._send, self._receive):
                    await stream.aclose()
            self._context_channel.close()
        finally:
            if self.on_close is not None:
                self.on_close()
        if self._owner is None:
            return  # a pool sandbox that never served a call: no events
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
        return not (self._closed or self._killed) and self._process.returncode is None

    async def _send_frame(
        self, message: InitFrame | ExecFrame | ReplyFrame | ExportFrame
    ) -> None:
        try:
            data = encode_frame(message, HOST_FRAME_MAX_BYTES)
        except FrameError as exc:
            raise SandboxCrashed(f"cannot send to the sandbox: {exc}") from exc
        try:
            await self._send.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise self._crashed("the sandbox stopped reading its input") from exc

    async def _next_frame(self) -> dict[str, Any]:
        while not self._pending:
            try:
                # The rest of a large frame (a batch's prompts) in one read when it is
                # there; small reads otherwise (a read allocates its whole size).
                wanted = min(max(65536, self._decoder.missing_bytes), _MAX_READ_BYTES)
                data = await self._receive.receive_some(wanted)
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
        # End of output: the child is exiting (it cannot close the pipe otherwise).
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


def _valid_result(frame: dict[str, Any]) -> bool:
    """Whether a ``result`` frame has the types the protocol promises."""
    output, chars = frame.get("output"), frame.get("output_chars")
    optional = (frame.get("error"), frame.get("final"))
    return (
        isinstance(output, str)
        and type(chars) is int
        and chars >= 0
        and isinstance(frame.get("ok"), bool)
        and all(value is None or isinstance(value, str) for value in optional)
    )
