"""Ctrl-C, SIGTERM and SIGHUP for ``rlm run`` (and the signals ``rlm volley`` and
``rlm chat`` stop on).

The first signal stops the run gracefully: no new work starts, in-flight
requests are cancelled, every sandbox is killed, the trace is flushed, and the
run returns with status ``interrupted`` (exit 130).  A second signal exits at
once with 130, killing any sandbox process group still known.

SIGHUP (the terminal was closed, an ssh connection dropped) is SIGTERM's twin:
left to its default it killed a volley as ``kill -9`` does, its claims in
progress until the stale timeout.  Every command stops on it as on SIGTERM,
with the same exit code (130), with two differences: the terminal is gone, so
what would be written to it goes to /dev/null instead of failing (a pipe or a
file keeps its output), and a hang-up never makes the stop immediate: it often
comes twice (the kernel's, then the shell's to its jobs), and nobody is left at
the terminal to insist.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from rlm.errors import RLMError

if TYPE_CHECKING:  # only named here: a volley and a chat import this module too
    from rlm._api import RLM
    from rlm._events import Event
    from rlm._result import RunResult
    from rlm._run.context import Context

__all__ = [
    "STOP_SIGNALS",
    "TERMINATE_SIGNALS",
    "insists",
    "leave_terminal",
    "run_with_signals",
    "watch_stop_signals",
]

#: The signals that end a command as SIGTERM does: SIGTERM (``kill``, a supervisor) and,
#: where there is one, SIGHUP (the terminal closed, an ssh connection dropped).
TERMINATE_SIGNALS: tuple[signal.Signals, ...] = (
    (signal.SIGTERM,) if sys.platform == "win32" else (signal.SIGTERM, signal.SIGHUP)
)
#: The signals that stop a run or a volley gracefully: Ctrl-C and the ones above.
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, *TERMINATE_SIGNALS)


def _is_hangup(signum: int) -> bool:
    return signum == getattr(signal, "SIGHUP", None)


def leave_terminal(signum: int) -> None:
    """After a hang-up (``signum`` SIGHUP), point stdout and stderr that were the
    terminal at /dev/null: writing to a terminal that is gone fails (EIO), which
    would end the command with an error instead of its results in the journal and
    exit 130.  Any other signal, or a stream that is a pipe or a file: nothing."""
    if not _is_hangup(signum):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            if _terminal(fd):
                os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _terminal(fd: int) -> bool:
    """Whether ``fd`` is a terminal, one that hung up included (``os.isatty`` says no
    to those: asking for its settings fails with EIO where a pipe's says ENOTTY)."""
    import termios  # POSIX only, as SIGHUP is

    try:
        termios.tcgetattr(fd)
    except termios.error as exc:
        return bool(exc.args and exc.args[0] == errno.EIO)
    return True


def insists(signum: int) -> bool:
    """Whether ``signum``, coming after a first stop signal, ends the command at once:
    a second Ctrl-C or SIGTERM does; another hang-up does not (see the module docstring)."""
    return not _is_hangup(signum)


async def watch_stop_signals(stop: Callable[[], None], kill: Callable[[], None]) -> None:
    """Until cancelled: the first stop signal calls ``stop``; a second one that
    :func:`insists` calls ``kill`` (no sandbox may outlive the process) and exits 130.

    After a hang-up, later ones are ignored for the rest of the process: the shell's
    copy may come after this watch has ended (the command is finishing its stop), when
    SIGHUP's default would kill it before its results are kept and it exits 130.
    """
    hung_up = False
    try:
        with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
            stopping = False
            async for signum in signals:
                leave_terminal(signum)
                hung_up = hung_up or _is_hangup(signum)
                if not stopping:
                    stopping = True
                    stop()
                elif insists(signum):
                    kill()
                    os._exit(130)
    finally:
        if hung_up:
            signal.signal(signal.SIGHUP, signal.SIG_IGN)


async def _main(
    model: RLM, query: str, context: Context, on_event: Callable[[Event], None] | None
) -> RunResult:
    outcome: RunResult | RLMError | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_stop_signals, model.interrupt, model.kill_sandboxes)
        try:
            if on_event is None:
                outcome = await model.acompletion(query, context)
            else:
                from rlm.streaming import StreamMerger, drain  # --stream only

                merger = StreamMerger()
                async with trio.open_nursery() as consumer:
                    consumer.start_soon(drain, merger, on_event)
                    try:
                        outcome = await model.acompletion(query, context, stream=merger)
                    finally:
                        merger.close()  # the consumer drains what is left, then ends
        except RLMError as exc:  # raised outside the nursery, so not in an exception group
            outcome = exc
        finally:
            nursery.cancel_scope.cancel()
    if isinstance(outcome, RLMError):
        raise outcome
    assert outcome is not None
    return outcome


def run_with_signals(
    model: RLM,
    query: str,
    context: Context,
    on_event: Callable[[Event], None] | None = None,
) -> RunResult:
    """Run ``model`` to its end in a fresh trio loop, handling :data:`STOP_SIGNALS`.

    With ``on_event`` the run streams: every event, streamed text included,
    goes to ``on_event`` as it happens (``rlm run --stream``).
    """
    return trio.run(_main, model, query, context, on_event)
