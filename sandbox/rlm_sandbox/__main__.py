"""Entry point: ``python -m rlm_sandbox --in-fd N --out-fd M [--ctx-fd K]`` or ``--zygote FD``.

Direct mode: the host passes two pipe ends (and optionally the socket a
large context arrives on): frames arrive on ``--in-fd`` and leave on
``--out-fd``.  The process preloads what model code may import, hardens
itself (``isolation.py``) and serves one call.

Zygote mode: serve spawn requests on a Unix socket and fork hardened
sandboxes from a warm interpreter (``zygote.py``).

Either way standard input is closed and standard output points at
/dev/null, so nothing the interpreter might print can reach the host as if
it were a frame.  Standard error is kept for crash reports only: warnings and
"Exception ignored in ..." reports caused by model code are dropped (the model
sees its errors in result frames).  SIGINT is ignored: Ctrl-C belongs to the
host, which stops its sandboxes itself.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import warnings
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import argparse

#: Deep enough for recursive analysis code, shallow enough to fail fast.
RECURSION_LIMIT = 2_000


def _parse_args(argv: list[str]) -> argparse.Namespace:
    import argparse  # not for the zygote (main), whose start would load it for nothing

    parser = argparse.ArgumentParser(prog="python -m rlm_sandbox", description=__doc__)
    parser.add_argument("--in-fd", type=int, help="fd to read host frames from")
    parser.add_argument("--out-fd", type=int, help="fd to write frames to")
    parser.add_argument("--ctx-fd", type=int, help="socket a shared context arrives on")
    parser.add_argument("--memory-bytes", type=int, help="address-space limit")
    parser.add_argument("--zygote", type=int, metavar="FD", help="serve fork requests on FD")
    args = parser.parse_args(argv)
    if args.zygote is None and (args.in_fd is None or args.out_fd is None):
        parser.error("pass --in-fd and --out-fd (or --zygote FD)")
    return args


def _quiet_standard_streams() -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)


def _drop_unraisable(report: object) -> None:
    """Errors with no caller to raise them to (e.g. in a collected generator's finally)."""


def configure_interpreter() -> None:
    """Process-wide settings every sandbox inherits (a zygote sets them before forking)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    warnings.simplefilter("ignore")
    sys.unraisablehook = _drop_unraisable
    sys.setrecursionlimit(RECURSION_LIMIT)


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if len(words) == 2 and words[0] == "--zygote" and words[1].isdigit():
        _serve_zygote(int(words[1]))  # the host's own command line for it: no parser needed
    args = _parse_args(words)
    if args.zygote is not None:
        _serve_zygote(args.zygote)
    fds = {args.in_fd, args.out_fd, args.ctx_fd} - {None}
    if fds & {0, 1}:
        raise SystemExit("descriptors 0 and 1 are reserved for /dev/null")
    _quiet_standard_streams()
    for fd in fds - {args.ctx_fd}:
        os.set_blocking(fd, True)
    configure_interpreter()
    from rlm_sandbox.isolation import Limits, harden, preload
    from rlm_sandbox.worker import serve

    preload()
    limits = Limits() if args.memory_bytes is None else Limits(memory_bytes=args.memory_bytes)
    report = harden({0, 1, 2, *fds}, limits, parent=None)
    return serve(args.in_fd, args.out_fd, args.ctx_fd, report)


def _serve_zygote(control_fd: int) -> NoReturn:
    if control_fd in (0, 1):
        raise SystemExit("descriptors 0 and 1 are reserved for /dev/null")
    _quiet_standard_streams()
    configure_interpreter()
    # Paused while the zygote loads what every sandbox shares; serve_zygote freezes that
    # heap and turns the collector on again before it forks anything.
    gc.disable()
    from rlm_sandbox.zygote import serve_zygote

    # Every sandbox it forked is reaped by now and nothing is buffered: an orderly
    # interpreter exit would only add milliseconds to the end of every run.
    os._exit(serve_zygote(control_fd))


if __name__ == "__main__":
    sys.exit(main())
