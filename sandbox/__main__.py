"""Entry point: ``python -m sandbox --in-fd N --out-fd M``.

The host passes two pipe ends: frames arrive on ``--in-fd`` and leave on
``--out-fd``.  Standard input is closed and standard output points at
/dev/null, so nothing the interpreter might print can reach the host as if
it were a frame.  Standard error is kept for crash reports only: warnings and
"Exception ignored in ..." reports caused by model code are dropped (the model
sees its errors in result frames).  SIGINT is ignored: Ctrl-C belongs to the
host, which stops its sandboxes itself.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import warnings

from sandbox.worker import serve

#: Deep enough for recursive analysis code, shallow enough to fail fast.
RECURSION_LIMIT = 2_000


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__)
    parser.add_argument("--in-fd", type=int, required=True, help="fd to read host frames from")
    parser.add_argument("--out-fd", type=int, required=True, help="fd to write frames to")
    return parser.parse_args(argv)


def _quiet_standard_streams(keep: set[int]) -> None:
    if 0 not in keep:
        with contextlib.suppress(OSError):  # already closed by the host is fine
            os.close(0)
    if 1 not in keep:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)


def _drop_unraisable(report: object) -> None:
    """Errors with no caller to raise them to (e.g. in a collected generator's finally)."""


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    fds = {args.in_fd, args.out_fd}
    _quiet_standard_streams(fds)
    for fd in fds:
        os.set_blocking(fd, True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    warnings.simplefilter("ignore")
    sys.unraisablehook = _drop_unraisable
    sys.setrecursionlimit(RECURSION_LIMIT)
    return serve(args.in_fd, args.out_fd)


if __name__ == "__main__":
    sys.exit(main())
