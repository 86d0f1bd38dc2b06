"""The journal writer process: ``python -m rlm.journal._writer_main PATH PARENT_PID``.

Started by :func:`rlm.journal._writer.writer_process`, never by hand.  It opens
the SQLite journal ``PATH`` and answers requests read from stdin, one at a
time and in order, on stdout; both are streams of msgpack objects:

- the first object it writes says whether the journal opened:
  ``[True, None]`` or ``[False, "message"]`` (then it exits);
- each request ``[method, args]`` gets ``[True, result]`` once its transaction
  has committed, or ``[False, "message"]`` when the store raised
  :class:`~rlm.errors.JournalError` (the request's transaction rolled back).

It dies with its parent on every path: it ends at EOF on stdin (the parent
closed the pipe, or the kernel did when the parent died), and the kernel sends
it SIGKILL when the parent dies (``PR_SET_PDEATHSIG``, Linux), so a parent
killed with -9 never leaves it behind even in the middle of a request.  A
SIGKILL mid-transaction loses nothing that was reported: SQLite rolls the
transaction back, and the parent reports a result only once its reply came.
Anything but a JournalError is a bug: it is not caught, the traceback goes to
stderr (which the parent keeps for its error message), and the process exits.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import msgpack

from rlm.errors import JournalError
from rlm.journal._backends import SQLiteBackend
from rlm.journal._verdicts import verdict_rows
from rlm.journal.records import Owner, Spend
from rlm.journal.store import JournalStore

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """Be killed when ``parent`` dies, and exit now if it already has."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it died before the signal was armed
        os._exit(1)


def _methods(store: JournalStore) -> dict[str, Callable[..., Any]]:
    """The requests this process serves, as the parent encodes their arguments."""
    return {
        "claim_indices": lambda vid, owner, limit: store.claim_indices(vid, Owner(*owner), limit),
        "claim_specs": lambda vid, owner, limit: store.claim_specs(vid, Owner(*owner), limit),
        # The event loop's flat verdicts: their rows are built here, on this process's core.
        "finish_flat": lambda vid, flats, spend, group: store.finish_rows(
            vid, verdict_rows(flats), Spend(*spend), None if group is None else (group[0], group[1])
        ),
    }


def _write(obj: object) -> None:
    data = memoryview(msgpack.packb(obj, use_bin_type=True))
    while data:
        data = data[os.write(1, data):]


def main(argv: list[str]) -> int:
    path, parent = argv[0], int(argv[1])
    _die_with_parent(parent)
    # Ctrl-C in a terminal reaches the whole foreground group; the parent decides
    # when this process ends (it is in its own session, but be sure).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        store = JournalStore(SQLiteBackend(path))
    except JournalError as exc:
        _write([False, str(exc)])
        return 1
    try:
        methods = _methods(store)
        _write([True, None])
        requests = msgpack.Unpacker(raw=False, use_list=True)
        while chunk := os.read(0, 1 << 16):
            requests.feed(chunk)
            for method, args in requests:
                try:
                    result = methods[method](*args)
                except JournalError as exc:
                    _write([False, str(exc)])
                else:
                    _write([True, result])
        return 0
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
