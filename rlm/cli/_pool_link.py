"""``rlm volley work --pool N``: the first worker's children die with it.

The first worker starts N-1 siblings and supervises them: it waits for them
when it ran out of tasks, and sends them SIGTERM (then SIGKILL after a grace)
when it stops early.  A ``kill -9`` of the first worker runs none of that, so
each sibling also watches its parent itself:

- on Linux, ``PR_SET_PDEATHSIG`` sends it SIGTERM when the parent dies, as a
  first Ctrl-C would: it gives its claimed tasks back and exits.  The signal
  fires when the *thread* that forked the child ends, so the siblings are
  started from the main thread (trio's ``run_process`` forks from a worker
  thread, which ends after ten idle seconds).  A parent that died before the
  signal was armed is caught by checking ``getppid`` right after;
- everywhere, the sibling holds the read end of a pipe whose only write end
  the parent holds: end of file there means the parent is gone, whatever
  killed it.  The sibling then stops the same way, and exits at once if that
  takes longer than a grace period.

Claims a sibling could not give back (it was killed too) are claims of a dead
process of this host: the next worker on the volley reopens them at once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import click
import trio

from rlm.errors import Interrupted

__all__ = ["PARENT_ENV", "PoolParent", "link_to_parent", "pool_argv", "supervise_siblings"]

#: Set for a sibling only: ``"<parent pid>:<read end of the parent's pipe>:<volley id>"``.
PARENT_ENV = "RLM_POOL_PARENT"

#: How long a stopping worker may take to give its tasks back before it is killed.
GRACE_S = 5.0

_PR_SET_PDEATHSIG = 1


# -- the first worker's side ------------------------------------------------------


async def supervise_siblings(
    argv: Sequence[str], count: int, volley_id: str, env: Mapping[str, str] | None = None
) -> None:
    """Run ``count`` sibling workers (``python -m rlm *argv``, with this process's
    environment and ``env``) on ``volley_id`` until they exit (told the id: ``last``
    could name a volley created since).

    Cancelled (this worker stops early), each gets SIGTERM, so it gives its
    tasks back, and SIGKILL if it is still there after :data:`GRACE_S`.  On
    every exit path no sibling outlives this call.  They run in their own
    session, so a Ctrl-C at the terminal reaches them once, from here.
    """
    read_end, write_end = os.pipe()  # neither inherited unless passed
    siblings: list[subprocess.Popen[bytes]] = []
    try:
        try:
            link = f"{os.getpid()}:{read_end}:{volley_id}"
            environment = {**os.environ, **(env or {}), PARENT_ENV: link}
            for _ in range(count):
                # Forked from this (the main) thread, not trio's worker threads: see the
                # module docstring.  A fork takes milliseconds, once per sibling at start.
                siblings.append(
                    subprocess.Popen(  # noqa: ASYNC220
                        [sys.executable, "-m", "rlm", *argv],
                        start_new_session=True,
                        pass_fds=(read_end,),
                        env=environment,
                    )
                )
        finally:
            os.close(read_end)
        async with trio.open_nursery() as nursery:
            for sibling in siblings:
                nursery.start_soon(_supervise, sibling)
    finally:
        for sibling in siblings:  # a failed start, or anything the nursery left
            if sibling.poll() is None:
                sibling.kill()
                sibling.wait()
        os.close(write_end)  # only now: its end of file stops the siblings


async def _supervise(sibling: subprocess.Popen[bytes]) -> None:
    try:
        await _exited(sibling)
    finally:
        if sibling.poll() is None:
            with trio.CancelScope(shield=True):
                sibling.terminate()
                with trio.move_on_after(GRACE_S):
                    await _exited(sibling)
                if sibling.poll() is None:
                    sibling.kill()
                    await _exited(sibling)


async def _exited(process: subprocess.Popen[bytes]) -> None:
    """Wait until ``process`` has exited (and reap it), without blocking the loop."""
    if process.poll() is not None:
        return
    try:
        pidfd = os.pidfd_open(process.pid)
    except (OSError, AttributeError):  # no pidfd (not Linux, or Linux < 5.3): a thread waits
        await trio.to_thread.run_sync(process.wait, abandon_on_cancel=True)
        return
    try:
        await trio.lowlevel.wait_readable(pidfd)  # readable once it exited
    finally:
        os.close(pidfd)
    process.wait()


# -- a sibling's side ------------------------------------------------------------


@dataclass(frozen=True)
class PoolParent:
    """The first worker this sibling dies with: its pid, the pipe it holds open, and the
    volley it works on."""

    pid: int
    pipe: int
    volley_id: str

    async def watch(self, stop: Callable[[], None], kill: Callable[[], None]) -> None:
        """Wait for the parent's end; then ``stop()`` this worker, and ``kill()`` it
        if it has not stopped (cancelling this) within :data:`GRACE_S`."""
        await trio.lowlevel.wait_readable(self.pipe)  # only ever readable at end of file
        click.echo(
            f"rlm volley work: the pool's first worker (pid {self.pid}) is gone: worker "
            f"{os.getpid()} gives its tasks back and stops",
            err=True,
        )
        stop()
        await trio.sleep(GRACE_S)
        kill()


def link_to_parent(environ: dict[str, str] | None = None) -> PoolParent | None:
    """When this process is a pool's sibling, tie its life to the first worker's.

    None for any other process.  Raises :class:`Interrupted` when the parent
    died before the link was made.  The variable is taken out of the
    environment, so nothing this worker starts mistakes itself for a sibling.
    """
    env = os.environ if environ is None else environ
    value = env.pop(PARENT_ENV, None)
    if not value:
        return None
    pid, fd, volley_id = value.split(":", 2)
    parent = PoolParent(int(pid), int(fd), volley_id)
    _arm_parent_death_signal()
    if os.getppid() != parent.pid:  # it died before the signal was armed
        raise Interrupted(
            f"the pool's first worker (pid {parent.pid}) is gone: this worker stops before "
            "taking any task (`rlm volley work ID` takes the volley up again)"
        )
    os.set_inheritable(parent.pipe, False)
    return parent


def _arm_parent_death_signal() -> None:
    """SIGTERM this process when its parent dies (Linux; elsewhere the pipe tells)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)  # failure: the pipe still tells


#: The flags whose value may hold a credential (a base URL's user:password or
#: ``?api_key=``, a postgresql:// journal's password), and the variables that carry
#: them to a pool's siblings instead.  A command line is readable by every process
#: on the machine (/proc/PID/cmdline); an environment only by its own user, and a
#: sandbox gets none of it: the API key reaches the siblings the same way.
_SECRET_FLAGS = {"--base-url": "RLM_BASE_URL", "--journal": "RLM_JOURNAL"}


def pool_argv(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """This worker's command line without ``--pool N`` and without the flags that may
    hold credentials, to start its siblings with; and the environment variables that
    carry those flags' values to them (as the command line would: a flag wins over
    the same setting in the environment, and the last of a repeated flag wins)."""
    out: list[str] = []
    env: dict[str, str] = {}
    args = iter(argv)
    for arg in args:
        if arg == "--":  # the rest are arguments, never flags
            out.extend(["--", *args])
            break
        name, given, value = arg.partition("=")
        if name == "--pool":
            if not given:
                next(args, None)
        elif name in _SECRET_FLAGS:
            env[_SECRET_FLAGS[name]] = value if given else next(args, "")
        else:
            out.append(arg)
    return out, env
