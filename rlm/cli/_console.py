"""The ``rlm`` executable: what happens before the command line is parsed and after it ran.

One thing here is about start-up time, not behaviour:

- ``rlm run`` starts its sandbox zygote first thing, before click, trio and
  the runtime are imported, so that the zygote's own start (an interpreter,
  RestrictedPython, the allowed modules) runs on the other core while this
  process imports.  The run adopts it (``ctx.obj``); whatever happens, it is
  closed (killed and reaped if no run took it) before the process exits.  A run
  that took it does not wait for its exit: the zygote reaps the run's sandboxes
  and exits while the answer is printed, and closing it reaps it.

``python -m rlm`` goes through here too.  :func:`rlm.cli.main` (the click
group, what tests drive in-process) exits normally.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:  # imported inside console_main, where a Ctrl-C is handled
    from rlm._sandbox.early import EarlyZygote

__all__ = ["caused_by_interrupt", "console_main", "starts_a_run"]


def caused_by_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was raised because of, a Ctrl-C: Python wraps an error
    raised while a class is made (``RuntimeError: Error calling __set_name__``, a
    dataclass's fields) and some libraries re-raise it as their own."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        one = pending.pop()
        if one is None or id(one) in seen:
            continue
        seen.add(id(one))
        if isinstance(one, KeyboardInterrupt):
            return True
        if isinstance(one, BaseExceptionGroup):
            pending.extend(one.exceptions)
        pending.extend((one.__cause__, one.__context__))
    return False


def starts_a_run(args: Sequence[str]) -> bool:
    """Whether the command line is ``rlm [--debug] run ...`` that will run (not ``--help``)."""
    words = [a for a in args if a != "--debug"]
    if not words or words[0] != "run":
        return False
    options = words[: words.index("--")] if "--" in words else words
    return "--help" not in options and "-h" not in options


def console_main() -> NoReturn:
    """Run the ``rlm`` command line and exit with its code.

    A Ctrl-C before the command's own handling of it began (while click, the
    command or the runtime is imported) ends it as one does later: ``Error:
    interrupted``, exit 130, no traceback, the zygote gone.
    """
    # A shell starts a background job (``rlm run ... &`` in a script, a test runner
    # started that way) with SIGINT ignored, and Python then installs no handler of
    # its own; the run catches SIGINT anyway once it has started (_signals.py), so a
    # Ctrl-C before that was lost and the run went on waiting.  Take it from here on.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    early: EarlyZygote | None = None
    try:
        if starts_a_run(sys.argv[1:]):
            from rlm._sandbox.early import EarlyZygote

            # reap_at_close: the answer is printed while the zygote exits; closing reaps it.
            early = EarlyZygote.begin(reap_at_close=True)
        from rlm.cli._group import main

        main(obj=early)
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:
        # A Ctrl-C, bare or wrapped by Python (RuntimeError from a class made while
        # the command's modules load); anything else is not ours to report here.
        if not caused_by_interrupt(exc):
            raise
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second one cannot cut this short
        _flush_stderr("interrupted\n")
        code = 130
    else:  # pragma: no cover - RLMGroup.main always ends with sys.exit
        code = 0
    finally:
        # The command has ended: a Ctrl-C now cannot leave the zygote behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if early is not None:
            early.close()
    _flush_stderr()
    raise SystemExit(code)


def _flush_stderr(text: str = "") -> None:
    """Write ``text`` to stderr and flush it: a side channel, which closed or broken
    never changes the exit code."""
    with contextlib.suppress(OSError, ValueError):
        if sys.stderr is not None:
            sys.stderr.write(text)
            sys.stderr.flush()
