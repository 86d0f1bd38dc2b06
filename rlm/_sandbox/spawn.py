"""Starting sandbox processes directly, and what every sandbox is given.

The zygote (``_zygote.py``) is the fast path; this module is the fallback and
the shared parts: the scrubbed environment, the host ends of the channels,
and the sealed memfd a large context travels in.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence

import msgpack
import trio

from rlm._sandbox.early import child_env
from rlm._sandbox.process import HostEnds
from rlm.errors import SandboxCrashed

__all__ = [
    "ChildEnds", "DirectChild", "child_env", "context_memfd", "open_scrubbed_process",
    "spawn_direct",
]

#: Contexts at least this large (in characters) travel as a memfd, not inside ``init``.
SHARED_CONTEXT_CHARS = 1 << 20
#: Frame pipes hold this much (Linux's default is 64 KiB): a batch's prompts or an
#: ``init`` with a context of a few hundred KB then cross in one write and one read, not
#: in turns of the writer and the reader (each a wake-up of both).  Kept moderate: a
#: user's pipes past 64 MiB in all get one page each.
FRAME_PIPE_BYTES = 256 * 1024


class ChildEnds:
    """Fresh channels for one sandbox: the child's ends and the host's.

    ``child`` is (frames in, frames out, context socket).  Close the child's
    ends once they were handed over (:meth:`close_child`), and the host's via
    the sandbox, or :meth:`close_all` if the start failed.
    """

    def __init__(self) -> None:
        self.child_in, self.host_out = os.pipe()
        self.host_in, self.child_out = os.pipe()
        resize: int = getattr(fcntl, "F_SETPIPE_SZ", 0)  # Linux only
        for fd in (self.host_out, self.child_out) if resize else ():
            with contextlib.suppress(OSError):  # refused past the user's pipe quota: keep 64 KiB
                fcntl.fcntl(fd, resize, FRAME_PIPE_BYTES)
        self.host_context, self.child_context = socket.socketpair(socket.AF_UNIX)
        self._host_taken = False

    @property
    def child(self) -> tuple[int, int, int]:
        return self.child_in, self.child_out, self.child_context.fileno()

    def close_child(self) -> None:
        os.close(self.child_in)
        os.close(self.child_out)
        self.child_context.close()

    def host(self) -> HostEnds:
        self._host_taken = True
        return HostEnds(
            trio.lowlevel.FdStream(self.host_out),
            trio.lowlevel.FdStream(self.host_in),
            self.host_context,
        )

    def close_all(self) -> None:
        with contextlib.suppress(OSError):
            self.close_child()
        if not self._host_taken:
            os.close(self.host_out)
            os.close(self.host_in)
            self.host_context.close()


class DirectChild:
    """A sandbox the host started itself (``python -m rlm_sandbox --in-fd ...``)."""

    def __init__(self, process: trio.Process) -> None:
        self._process = process

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    @property
    def stderr(self) -> trio.abc.ReceiveStream | None:
        return self._process.stderr

    def kill(self) -> None:
        if self._process.returncode is None:
            # ProcessLookupError: it already exited; wait() reaps it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)

    async def wait(self) -> None:
        await self._process.wait()


async def spawn_direct(ends: ChildEnds, memory_bytes: int) -> DirectChild:
    """Start ``python -m rlm_sandbox`` on ``ends``; it hardens itself before serving."""
    child_in, child_out, child_context = ends.child
    argv: Sequence[str] = [
        sys.executable, "-m", "rlm_sandbox", "--in-fd", str(child_in), "--out-fd", str(child_out),
        "--ctx-fd", str(child_context), "--memory-bytes", str(memory_bytes),
    ]
    return DirectChild(await open_scrubbed_process(argv, ends.child, keep_stderr=True))


async def open_scrubbed_process(
    argv: Sequence[str], pass_fds: Sequence[int], *, keep_stderr: bool,
    env: dict[str, str] | None = None,
) -> trio.Process:
    """Start ``argv`` in its own session, in ``/``, with ``env`` (:func:`child_env` by
    default) and only ``pass_fds`` (plus a stderr pipe when ``keep_stderr``);
    SandboxCrashed if it fails."""
    try:
        return await trio.lowlevel.open_process(
            argv,
            pass_fds=pass_fds,
            env=child_env() if env is None else env,
            cwd="/",
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE if keep_stderr else subprocess.DEVNULL,
        )
    except OSError as exc:
        raise SandboxCrashed(f"cannot start {' '.join(argv[1:4])}: {exc}") from exc


def context_memfd(context: str | list[str]) -> int:
    """A sealed, read-only-from-now-on memfd holding the msgpack of ``context``.

    Blocking (it copies the whole context once): run it in a worker thread.
    """
    payload = msgpack.packb(context, use_bin_type=True)
    fd = os.memfd_create("rlm-context", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
        del view
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    except BaseException:
        os.close(fd)
        raise
    return fd
