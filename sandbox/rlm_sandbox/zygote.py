"""The zygote: a pre-started, single-threaded process that forks sandboxes.

The host starts ``python -m rlm_sandbox --zygote FD`` once per run with a
scrubbed environment.  The zygote imports everything a sandbox needs
(RestrictedPython, msgpack, the allowed modules), holds no secrets and never
runs model code.  It serves requests on a Unix SOCK_SEQPACKET socket, one
msgpack message per packet:

``spawn`` ``{"t", "memory_bytes", "cpu_seconds", "warm"?}`` + four descriptors
    (SCM_RIGHTS: frames in, frames out, context socket, stderr).  The zygote
    forks; the child becomes its own session, moves the descriptors to
    3, 4, 5 and 2, hardens itself (``isolation.py``), announces it with a
    ``hardened`` frame and serves the REPL protocol.  With ``warm`` (a sandbox
    for the warm pool) it warms up before ``hardened``, else after ``ready``.  Answer:
    ``{"t": "spawned", "pid"}`` (or ``{"t": "error", "error"}``).
``ping`` ``{"t"}``
    Answer ``{"t": "pong", "pid", "spare"}`` (sent once preloading is done).
``reap`` ``{"t", "pid"}``
    Kill the child's process group and reap it.  Answer:
    ``{"t": "reaped", "pid", "returncode"}``.  Children are reaped only on
    request, so a pid the host holds can never be reused under it.

When the socket reaches end of input (the host closed it, or died) the
zygote kills every child it forked and exits.

The spare: once preloaded, the zygote forks one sandbox ahead of any request
and it hardens itself (every layer but its resource limits, which the request
brings) and warms up while the host is still starting; the first ``spawn`` hands it the
request's descriptors and limits over a socket of its own instead of forking,
so the first sandbox a run asks for (its root's) is ready at once.  Its pid
is the ``spare`` of the ``pong`` (None if there is none), so the host knows
the zygote has a child to reap even before it asked for one.  Until it is
handed over it stays in the zygote's process group: killing that group kills
both.
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
from collections.abc import Callable
from typing import Any, NoReturn

import msgpack

from rlm_sandbox.isolation import Limits, apply_limits, harden, preload
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
    # walks it again, so a fork needs no collection first (on the path of every sandbox
    # a call waits for) and a sandbox's own collections do not write to the pages it
    # shares with the zygote.  The collector was paused while all this loaded
    # (``python -m rlm_sandbox --zygote``): it would have walked the growing heap over
    # and over, and a last collection before freezing finds next to nothing.
    gc.freeze()
    gc.enable()
    children: set[int] = set()
    control = socket.socket(fileno=control_fd)
    spare: list[_Spare] = []  # at most one, until the first spawn takes it
    with contextlib.suppress(OSError):
        spare.append(_Spare.fork(control))
        children.add(spare[0].pid)
    try:
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(control, _MAX_REQUEST, len(CHILD_FDS))
            except ConnectionError:
                return 0
            if not data:
                return 0
            answer = _handle(data, fds, children, control, spare)
            control.send(msgpack.packb(answer, use_bin_type=True))
    finally:
        for unused in spare:
            unused.socket.close()
        # Kill them all before reaping any, so they die at the same time.
        for pid in children:
            _kill(pid)
        for pid in children:
            _reap(pid)


class _Spare:
    """A sandbox forked and hardened ahead of any request, waiting for one on ``socket``."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self.socket = sock

    @classmethod
    def fork(cls, control: socket.socket) -> _Spare:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        zygote = os.getpid()
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            raise
        if pid == 0:
            control.detach()  # closed with every other descriptor in harden()
            ours.detach()
            _spare_main(theirs, zygote)
        theirs.close()
        return cls(pid, ours)

    def hand_over(self, fds: list[int], limits: Limits) -> None:
        """Give it a request's descriptors and limits (it then serves like a forked one)."""
        try:
            request = {"memory_bytes": limits.memory_bytes, "cpu_seconds": limits.cpu_seconds}
            socket.send_fds(self.socket, [msgpack.packb(request)], fds)
        finally:
            self.socket.close()


def _handle(data: bytes, fds: list[int], children: set[int],
            control: socket.socket, spare: list[_Spare]) -> dict[str, Any]:
    try:
        request = msgpack.unpackb(data, raw=False)
        kind = request.get("t") if isinstance(request, dict) else None
        if kind == "spawn" and len(fds) == len(CHILD_FDS):
            limits = Limits(int(request["memory_bytes"]), int(request["cpu_seconds"]))
            if spare:
                taken = spare.pop()
                try:
                    taken.hand_over(fds, limits)
                    return {"t": "spawned", "pid": taken.pid}
                except OSError:  # it died (say its setup failed): fork one as usual
                    children.discard(taken.pid)
                    _kill_and_reap(taken.pid)
            pid = _fork_child(fds, limits, control, warm=request.get("warm") is True)
            children.add(pid)
            return {"t": "spawned", "pid": pid}
        if kind == "ping":
            return {"t": "pong", "pid": os.getpid(), "spare": spare[0].pid if spare else None}
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


def _fork_child(fds: list[int], limits: Limits, control: socket.socket, *, warm: bool) -> int:
    zygote = os.getpid()
    pid = os.fork()
    if pid == 0:
        control.detach()  # closed with every other descriptor in harden()
        _child_main(fds, limits, zygote, warm)
    return pid


def _child_main(fds: list[int], limits: Limits, zygote: int, warm: bool) -> NoReturn:
    def setup_and_serve() -> int:
        os.setsid()
        _install(fds)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        random.seed()  # the zygote's state is shared by every fork; each sandbox gets its own
        report = harden({0, 1, 2, 3, 4, 5}, limits, parent=zygote)
        if warm:  # a pool's sandbox: nobody waits for it yet
            warm_up()
        return serve(3, 4, 5, report, announce=True, warm_after_ready=not warm)

    _exit_with(setup_and_serve)


def _exit_with(body: Callable[[], int]) -> NoReturn:
    """A forked child's end: ``body``'s exit code, or a crash report on stderr and 70."""
    code = _EXIT_SETUP_FAILED
    try:
        code = body()
    except BaseException:
        with contextlib.suppress(OSError, ValueError):
            traceback.print_exc(file=sys.stderr)
            sys.stderr.flush()
    finally:
        os._exit(code)


def _install(fds: list[int]) -> None:
    """Move a request's descriptors to 3, 4, 5 and 2 (CHILD_FDS) and close the originals."""
    high = [os.dup(fd) for fd in fds]  # off 0..5, so the dup2s below cannot clobber them
    for fd, target in zip(high, CHILD_FDS, strict=True):
        os.dup2(fd, target)
    for fd in {*fds, *high} - set(CHILD_FDS):
        os.close(fd)


def _spare_main(sock: socket.socket, zygote: int) -> NoReturn:
    """Harden now; serve once a request's descriptors and limits arrive on ``sock``.

    Stays in the zygote's process group until then (the host, or whoever started
    the zygote, kills that group when nothing was ever asked of it).
    """

    def harden_wait_and_serve() -> int:
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        random.seed()  # the zygote's state is shared by every fork; each sandbox gets its own
        report = harden({0, 1, 2, sock.fileno()}, None, parent=zygote)
        # Warm up now, while nothing waits for it (as a pool's sandbox does): the spare
        # is forked as soon as the zygote has preloaded, usually long before the host has
        # imported its runtime and asks for it.  Warmed up after 'ready' instead, the
        # warm-up sat between a fast first step and its first block; a request that
        # arrives meanwhile waits at most for its rest, which the sandbox would
        # otherwise spend after 'ready'.
        warm_up()
        data, fds, _, _ = socket.recv_fds(sock, _MAX_REQUEST, len(CHILD_FDS))
        sock.close()
        if not data:
            return 0  # the zygote is closing: nothing was asked of it
        if len(fds) != len(CHILD_FDS):
            return _EXIT_SETUP_FAILED
        request = msgpack.unpackb(data, raw=False)
        os.setsid()
        _install(fds)
        report["rlimits"] = apply_limits(
            Limits(int(request["memory_bytes"]), int(request["cpu_seconds"])))
        return serve(3, 4, 5, report, announce=True, warm_after_ready=False)

    _exit_with(harden_wait_and_serve)
