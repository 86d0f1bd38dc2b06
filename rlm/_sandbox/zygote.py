"""The host's handle on the zygote: a warm interpreter that forks sandboxes.

The zygote (``sandbox/zygote.py``) is started once per run with a scrubbed
environment and serves ``spawn``/``reap`` requests on a SOCK_SEQPACKET
socket.  A forked sandbox is not the host's child, so the host kills it by
process group (it is its own session) and asks the zygote to reap it; the
zygote reaps only on request, so a pid the host still holds is never reused.
If the host dies, the socket closes and the zygote kills every sandbox it
forked; if the zygote dies, its sandboxes get their parent-death signal.
"""

from __future__ import annotations

import array
import contextlib
import os
import signal
import socket
import subprocess
from typing import Protocol

import msgpack
import trio

from rlm._sandbox.early import EarlyZygote, zygote_argv, zygote_env
from rlm._sandbox.spawn import ChildEnds, open_scrubbed_process
from rlm.errors import SandboxCrashed

__all__ = ["Zygote", "ZygoteChild"]

_EXCHANGE_TIMEOUT = 10.0
_START_TIMEOUT = 30.0


class ZygoteChild:
    """A sandbox forked by the zygote (a :class:`rlm._sandbox.process.ChildProcess`)."""

    def __init__(self, zygote: Zygote, pid: int, stderr: trio.lowlevel.FdStream) -> None:
        self._zygote = zygote
        self._pid = pid
        self._stderr = stderr
        self._returncode: int | None = None

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._returncode

    @property
    def stderr(self) -> trio.abc.ReceiveStream | None:
        return self._stderr

    def kill(self) -> None:
        if self._returncode is None:  # unreaped: the pid is still this sandbox's
            for kill in (os.killpg, os.kill):  # os.kill: it may not have called setsid() yet
                with contextlib.suppress(ProcessLookupError):
                    kill(self._pid, signal.SIGKILL)

    async def wait(self) -> None:
        if self._returncode is None:
            if self._zygote.alive:
                await _until_exited(self._pid)
            self._returncode = await self._zygote.reap(self._pid)


async def _until_exited(pid: int) -> None:
    """Wait until the zygote's unreaped child ``pid`` has exited, without the zygote.

    Only the zygote can reap it, and its reap waits for the death: a dying
    sandbox would hold the zygote (and every fork queued behind it) for that
    long.  Watched through a pidfd, deaths overlap and the reap that follows
    is immediate.  The pid cannot be reused meanwhile: nothing reaps it but
    the zygote, which is alive.  Without pidfds the reap waits instead.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        await trio.lowlevel.wait_readable(pidfd)  # readable once it exited
    finally:
        os.close(pidfd)


class _Process(Protocol):
    """What the zygote handle needs of its process (a ``trio.Process`` fits)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


class _AdoptedProcess:
    """A ``subprocess.Popen`` started before trio ran, waited for without blocking the loop."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        if self._popen.poll() is None:
            try:
                pidfd = os.pidfd_open(self._popen.pid)
            except OSError:  # no pidfd (Linux < 5.3): a thread waits instead
                return await trio.to_thread.run_sync(self._popen.wait, abandon_on_cancel=True)
            else:
                try:
                    await trio.lowlevel.wait_readable(pidfd)  # readable once it exited
                finally:
                    os.close(pidfd)
        return self._popen.wait()


class Zygote:
    """One zygote process.  :meth:`start` it (or :meth:`adopt` an early one) in a nursery;
    :meth:`aclose` on every exit path."""

    def __init__(
        self, process: _Process, control: socket.socket, *, wait_at_close: bool = True
    ) -> None:
        self._process = process
        self._control = trio.socket.from_stdlib_socket(control)
        self._lock = trio.Lock()
        self._children: set[int] = set()
        self._spare: int | None = None  # forked ahead by the zygote, not handed out yet
        self._broken = False
        self._closing = False  # close_soon(): the zygote is on its way out
        # False: whoever started the process waits for its exit (EarlyZygote.close).
        self._wait_at_close = wait_at_close

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def spare(self) -> int | None:
        """The pid of the sandbox the zygote forked ahead, until a spawn hands it out."""
        return self._spare

    @property
    def alive(self) -> bool:
        return not (self._broken or self._closing) and self._process.returncode is None

    def close_soon(self) -> None:
        """Let the zygote go now, without waiting: it kills and reaps every sandbox it
        forked and exits while the host finishes the run (:meth:`aclose` then waits).

        Synchronous, for the end of a run.  An exchange in flight finishes first (the
        socket closes after it); from now on nothing is forked, and :meth:`reap` leaves
        each sandbox to the zygote's way out instead of asking for it (its pid is still
        counted, so :meth:`aclose` waits for the zygote rather than killing it).
        """
        self._closing = True
        if not self._lock.locked():
            self._close_control()

    def _close_control(self) -> None:
        self._broken = True
        self._control.close()

    @classmethod
    async def start(cls) -> Zygote:
        """Start the zygote and wait until it answers (it preloads before serving)."""
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            process = await open_scrubbed_process(
                zygote_argv(child.fileno()), [child.fileno()], keep_stderr=False,
                env=zygote_env()
            )
        except SandboxCrashed:
            host.close()
            raise
        finally:
            child.close()
        return await cls(process, host)._until_ready()

    @classmethod
    async def adopt(cls, early: EarlyZygote) -> Zygote:
        """Take over a zygote started at process start and wait until it answers.

        SandboxCrashed if another run took it already, it could not start, or it
        does not answer.
        """
        taken = early.take()
        if taken is None:
            raise SandboxCrashed("no early zygote to adopt (taken by another run, or not started)")
        popen, control = taken
        zygote = cls(_AdoptedProcess(popen), control, wait_at_close=not early.reap_at_close)
        return await zygote._until_ready()

    async def _until_ready(self) -> Zygote:
        """Ping; the zygote answers once it has preloaded.  On failure close it and raise."""
        try:
            with trio.fail_after(_START_TIMEOUT):
                answer = await self._exchange({"t": "ping"}, [])
        except BaseException:
            await self.aclose()
            raise
        if answer.get("t") != "pong":
            await self.aclose()
            raise SandboxCrashed(f"the zygote answered a ping with {answer!r}")
        spare = answer.get("spare")
        self._spare = spare if isinstance(spare, int) else None
        return self

    async def spawn(self, ends: ChildEnds, *, memory_bytes: int, cpu_seconds: int,
                    warm: bool = False) -> ZygoteChild:
        """Fork a hardened sandbox on ``ends`` (the caller then closes the child ends).
        ``warm``: it warms up before it reports hardened (a pool's), else after ready."""
        err_read, err_write = os.pipe()
        try:
            request = {"t": "spawn", "memory_bytes": memory_bytes, "cpu_seconds": cpu_seconds,
                       "warm": warm}
            answer = await self._exchange(request, [*ends.child, err_write])
        except BaseException:
            os.close(err_read)
            raise
        finally:
            os.close(err_write)
        pid = answer.get("pid")
        if answer.get("t") != "spawned" or not isinstance(pid, int):
            os.close(err_read)
            raise SandboxCrashed(f"the zygote could not fork a sandbox: {answer.get('error')}")
        self._children.add(pid)
        if pid == self._spare:
            self._spare = None
        return ZygoteChild(self, pid, trio.lowlevel.FdStream(err_read))

    async def reap(self, pid: int) -> int | None:
        """Kill and reap a sandbox; its exit code (None if the zygote is gone)."""
        if self._closing:
            return -signal.SIGKILL  # killed, and reaped by the zygote on its way out
        self._children.discard(pid)
        with contextlib.suppress(SandboxCrashed):
            answer = await self._exchange({"t": "reap", "pid": pid}, [])
            code = answer.get("returncode")
            return code if isinstance(code, int) else None
        return -signal.SIGKILL  # the zygote died: its children got their parent-death signal

    async def _exchange(self, request: dict[str, object], fds: list[int]) -> dict[str, object]:
        """One request and its answer.  Shielded (bounded): a half-done exchange would
        desynchronise the socket and leave an unknown sandbox behind."""
        async with self._lock:
            if self._broken or self._closing:
                raise SandboxCrashed("the zygote is gone")
            try:
                return await self._exchange_locked(request, fds)
            finally:
                if self._closing and not self._broken:
                    self._close_control()  # close_soon() came during the exchange

    async def _exchange_locked(self, request: dict[str, object], fds: list[int]
                               ) -> dict[str, object]:
        with trio.CancelScope(shield=True), trio.move_on_after(_EXCHANGE_TIMEOUT):
            try:
                data = msgpack.packb(request, use_bin_type=True)
                ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
                await self._control.sendmsg([data], ancillary if fds else [])
                reply = await self._control.recv(4096)
            except OSError as exc:
                self._broken = True
                raise SandboxCrashed(f"lost the zygote: {exc}") from exc
            if not reply:
                self._broken = True
                raise SandboxCrashed("the zygote exited")
            answer = msgpack.unpackb(reply, raw=False)
            if isinstance(answer, dict):
                return answer
        self._broken = True
        raise SandboxCrashed("the zygote did not answer")

    async def aclose(self) -> None:
        """Close the socket (the zygote then kills and reaps its sandboxes and exits), reap
        it, and kill whatever is left.  Shielded: nothing outlives the run.

        When every sandbox it forked was reaped already (its spare included:
        ``sandbox/rlm_sandbox/zygote.py``), the zygote has nothing left to do and is
        killed outright.  A sandbox still unreaped here is
        reaped by the zygote on its way out; its handle's ``wait`` then returns
        at once.  An early zygote begun with ``reap_at_close`` is not waited
        for here: its :meth:`EarlyZygote.close` does that, after the answer.
        """
        self._broken = True
        self._control.close()
        if not self._children and self._spare is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)  # its own session: only itself
        if not self._wait_at_close:
            self._children.clear()
            return
        with trio.CancelScope(shield=True):
            with trio.move_on_after(5):
                await self._process.wait()
            if self._process.returncode is None:
                # Stuck: its sandboxes are still unreaped (so their pids are still
                # theirs); kill them, then the zygote.
                for pid in (*self._children, self._process.pid):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pid, signal.SIGKILL)
                with trio.move_on_after(5):
                    await self._process.wait()
            self._children.clear()
