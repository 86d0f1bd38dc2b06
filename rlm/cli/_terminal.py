"""What the CLI shows a person: text made safe for a terminal, stderr that never costs a run.

Model replies and model code's output are untrusted: an answer or an error
message may carry escape sequences that set the terminal's title, clear the
screen or move the cursor over earlier lines.  Everything the CLI shows a
person passes :func:`safe_text`, the answer on stdout too, whether stdout is a
terminal or a pipe (a file or a pipe is shown by a terminal sooner or later:
``cat answer.txt``, ``| less``); ``--raw`` prints its exact text, and data
outputs (``--json``, which escapes controls, and the trace) keep it exact.

stderr is a side channel: when it is closed or its reader went away
(``rlm run ... 2>&1 | head -3``), :func:`say` silences it for the rest of the
process instead of letting a ``BrokenPipeError`` end the run.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import sys
from typing import Any, TextIO

import click

__all__ = [
    "RAW_HELP",
    "answer_for_stdout",
    "echo_exact",
    "plural",
    "raw_option",
    "safe_text",
    "say",
    "silence",
    "survive_hangups",
]

# Whole sequences first (their parameters would otherwise be left behind as
# text), then any control character that is left.  Compiled on first use: most
# text (every progress line) has nothing to strip and never needs them.
_SEQUENCES = r"""
      \x1b\[ [0-?]* [ -/]* [@-~]?               # CSI: cursor moves, colours, clear screen
    | \x1b[\]PX^_] .*? (?: \x07 | \x1b\\ | $ )  # OSC (title, hyperlink), DCS, SOS, PM, APC
    | \x1b [ -/]* [0-~]?                        # other escapes (charset, keypad, reset)
    | \x9b [0-?]* [ -/]* [@-~]?                 # 8-bit CSI
    | [\x9d\x90\x98\x9e\x9f] .*? (?: \x07 | \x9c | \x1b\\ | $ )  # 8-bit OSC, DCS, SOS, PM, APC
    """
# C0 and C1 controls but tab and newline; DEL; bidirectional overrides, which
# can make text read differently from what it is.
_CONTROLS = "[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"


@functools.cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    return re.compile(_SEQUENCES, re.VERBOSE | re.DOTALL), re.compile(_CONTROLS)


def safe_text(text: str) -> str:
    """``text`` without escape sequences and control characters (tab and newline kept).

    >>> safe_text("\\x1b]0;PWNED\\x07done\\x1b[2J")
    'done'
    """
    # Every character the patterns remove is a control (Cc: C0, DEL, C1 and so every
    # escape sequence's introducer) or a format character (Cf: the bidirectional
    # overrides), and str.isprintable() is False for both: printable text (tabs and
    # newlines aside) is returned as it is, without compiling them.
    if text.replace("\n", "").replace("\t", "").isprintable():
        return text
    return _strip(text)


def _strip(text: str) -> str:
    sequences, controls = _patterns()
    return controls.sub("", sequences.sub("", text.replace("\r\n", "\n")))


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 step``, ``2 steps``, ``1,024 LLM calls``."""
    word = noun if count == 1 else plural_form or f"{noun}s"
    return f"{count:,} {word}"


def silence(fd: int = 2) -> None:
    """Point ``fd`` (stderr by default) at /dev/null: its reader is gone for good."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:  # no /dev/null (a very bare container): leave fd 2 alone
        return


class _HangupSafe:
    """A terminal stream whose writes outlive the terminal.

    When the terminal hangs up, writes to it fail (EIO) at once, while SIGHUP is
    still on its way to the watch that stops the command: a result or a progress
    line written in between would end the command with an error (exit 1, its claims
    left in progress) instead of its stop.  The first such failure points the stream
    at /dev/null, as the hang-up's handler does (``_signals.leave_terminal``).
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            self._hung_up(exc)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            self._hung_up(exc)

    def _hung_up(self, exc: OSError) -> None:
        if exc.errno != errno.EIO:
            raise exc
        silence(self._stream.fileno())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def survive_hangups() -> None:
    """Make stdout and stderr, where they are a terminal, survive its hang-up."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            terminal = stream is not None and os.isatty(stream.fileno())
        except (OSError, ValueError, AttributeError):  # closed, or not a file
            continue
        if terminal and not isinstance(stream, _HangupSafe):
            setattr(sys, name, _HangupSafe(stream))


def say(message: str) -> None:
    """One line on stderr, made terminal-safe; a closed stderr silences it, never fails."""
    try:
        click.echo(safe_text(message), err=True)
    except OSError:  # BrokenPipeError, or EBADF when stderr was closed (2>&-)
        silence()


def answer_for_stdout(answer: str, raw: bool = False) -> str:
    """The answer as printed: terminal-safe (tab and newline kept), or exact with ``raw``."""
    return answer if raw else safe_text(answer)


def echo_exact(text: str) -> None:
    """Write ``text`` and a newline to stdout as it is.  ``click.echo`` takes colour and
    cursor sequences (CSI) out by itself when stdout is not a terminal, OSC sequences
    left in, which made ``--raw`` inexact on a pipe; text that is not raw has passed
    :func:`safe_text` already."""
    click.echo(text, color=True)


RAW_HELP = (
    "Print model text exactly, escape and control sequences included (by default they are "
    "taken out, as a terminal would run them; --json escapes them)."
)
#: The ``--raw`` flag of the commands that print model text on stdout.
raw_option = click.option("--raw", is_flag=True, help=RAW_HELP)
