"""The zygote: a pre-started, single-threaded process that forks sandboxes.

The host starts ``python -m rlm_sandbox --zygote FD`` once per run with a
scrubbed environment.  The zygote imports everything a sandbox needs
(RestrictedPython, msgpack, the allowed modules), holds no secrets and never
runs model code.  It serves requests on a Unix SOCK_SEQPACKET socket, one
msgpack message per packet:

``spawn`` ``{"t", "memory_bytes", "cpu_seconds"}`` + four descriptors
    (SCM_RIGHTS: frames in, frames out, context socket, stderr).  The zygote
    forks; the child becomes its own session, moves the descriptors to
    3, 4, 5 and 2, hardens itself (``isolation.py``), announces it with a
    ``hardened`` frame and serves the REPL protocol.  Answer:
    ``{"t": "spawned", "pid"}`` (or ``{"t": "error", "error"}``).
``ping`` ``{"t"}``
    Answer ``{"t": "pong", "pid"}`` (sent once preloading is done).
``reap`` ``{"t", "pid"}``
    Kill the child's process group and reap it.  Answer:
    ``{"t": "reaped", "pid", "returncode"}``.  Children are reaped only on
    request, so a pid the host holds can never be reused under it.

When the socket reaches end of input (the host closed it, or died) the
zygote kills every child it forked and exits.
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import signal
import socket
import sys
import traceback
from typing import Any, NoReturn

import msgpack

from rlm_sandbox.isolation import Limits, harden, preload
from rlm_sandbox.worker import serve, warm_up

__all__ = ["serve_zygote"]

CHILD_FDS = (3, 4, 5, 2)  # frames in, frames out, context socket, stderr
_MAX_REQUEST = 4096
_EXIT_SETUP_FAILED = 70


def serve_zygote(control_fd: int) -> int:
    """Serve spawn/reap requests on ``control_fd`` until it closes; return the exit code."""
    preload()
    # The host let the zygote write bytecode for what it imported (a faster next start);
    # nothing a sandbox does may write any.
    sys.dont_write_bytecode = True
    warm_up()  # what the first block compiles and runs is then warm in every fork
    # Everything loaded so far lives as long as the zygote: frozen, the collector never
    # walks it again, so a fork needs no collection first (one took 5-20 ms on a loaded
    # 2-core machine, on the path of every sandbox a call waits for) and a sandbox's own
    # collections do not write to the pages it shares with the zygote.
    gc.collect()
    gc.freeze()
    children: set[int] = set()
    control = socket.socket(fileno=control_fd)
    try:
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(control, _MAX_REQUEST, len(CHILD_FDS))
            except ConnectionError:
                return 0
            if not data:
                return 0
            answer = _handle(data, fds, children, control)
            control.send(msgpack.packb(answer, use_bin_type=True))
    finally:
        # Kill them all before reaping any, so they die at the same time.
        for pid in children:
            _kill(pid)
        for pid in children:
            _reap(pid)


def _handle(data: bytes, fds: list[int], children: set[int],
            control: socket.socket) -> dict[str, Any]:
    try:
        request = msgpack.unpackb(data, raw=False)
        kind = request.get("t") if isinstance(request, dict) else None
        if kind == "spawn" and len(fds) == len(CHILD_FDS):
            limits = Limits(int(request["memory_bytes"]), int(request["cpu_seconds"]))
            pid = _fork_child(fds, limits, control)
            children.add(pid)
            return {"t": "spawned", "pid": pid}
        if kind == "ping":
            return {"t": "pong", "pid": os.getpid()}
        if kind == "reap" and request.get("pid") in children:
            pid = int(request["pid"])
            children.discard(pid)
            return {"t": "reaped", "pid": pid, "returncode": _kill_and_reap(pid)}
        return {"t": "error", "error": f"bad request {kind!r} with {len(fds)} descriptors"}
    except (ValueError, KeyError, TypeError, OSError, msgpack.UnpackException) as exc:
        return {"t": "error", "error": f"{type(exc).__name__}: {exc}"}
    finally:
        for fd in fds:
            os.close(fd)


def _kill_and_reap(pid: int) -> int:
    _kill(pid)
    return _reap(pid)


def _kill(pid: int) -> None:
    # The child itself too: right after the fork it may not have called setsid() yet.
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError):
            kill(pid, signal.SIGKILL)


def _reap(pid: int) -> int:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return -signal.SIGKILL
    return os.waitstatus_to_exitcode(status)


def _fork_child(fds: list[int], limits: Limits, control: socket.socket) -> int:
    zygote = os.getpid()
    pid = os.fork()
    if pid == 0:
        control.detach()  # closed with every other descriptor in harden()
        _child_main(fds, limits, zygote)
    return pid


def _child_main(fds: list[int], limits: Limits, zygote: int) -> NoReturn:
    code = _EXIT_SETUP_FAILED
    try:
        os.setsid()
        high = [os.dup(fd) for fd in fds]  # off 0..5, so the dup2s below cannot clobber them
        for fd, target in zip(high, CHILD_FDS, strict=True):
            os.dup2(fd, target)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        random.seed()  # the zygote's state is shared by every fork; each sandbox gets its own
        report = harden({0, 1, 2, 3, 4, 5}, limits, parent=zygote)
        warm_up()
        code = serve(3, 4, 5, report, announce=True)
    except BaseException:
        with contextlib.suppress(OSError, ValueError):
            traceback.print_exc(file=sys.stderr)
            sys.stderr.flush()
    finally:
        os._exit(code)
