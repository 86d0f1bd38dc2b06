"""Reading a file a person named: bounded, and refused in one line when it cannot be read.

One reader for every such file: the run's context (``--context-file``) and task files,
the files a setting or a flag names (``--prices``, ``rlm chat --load``,
``--judge-prompt``, the trace ``rlm view`` reads), an eval's dataset and its items'
context files, and what ``rlm mcp`` reads for a client (``admit`` checks where each
file really is once open).  What it may take is a
:class:`ReadLimits`: at most ``max_bytes`` (a regular file is measured by its size
before it is read), and, when ``streams`` allows it, stdin (``-``) and a named pipe,
which must deliver its data within ``wait`` seconds.  Anything else (a device such as
``/dev/zero``, a socket; a pipe where only files are read) is refused before a byte
is read.  Every failure is a :class:`~rlm.errors.UsageError` naming ``what`` was read.
"""

from __future__ import annotations

import dataclasses
import os
import select
import stat
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO

from rlm._config import DEFAULT_MAX_CONTEXT_BYTES
from rlm._sizes import format_size
from rlm.errors import UsageError

__all__ = ["SMALL_FILE_BYTES", "TRACE_FILE_BYTES", "ReadLimits", "open_file", "read_bytes",
           "read_text"]

#: The most read of a file that holds settings or a saved session (a price table, a
#: ``--load`` file, a judge's prompt): far above any real one, far below what hurts.
SMALL_FILE_BYTES = 64 << 20
#: The most ``rlm view`` reads of a trace (a page shows all of it, so it is held whole).
TRACE_FILE_BYTES = 1 << 30
_CHUNK = 1 << 20


@dataclass
class ReadLimits:
    """What reading may take: bytes in all (what is read counts down from ``max_bytes``),
    seconds a named pipe may keep us waiting (``wait``; None: no limit), the flag that
    raises ``max_bytes`` (``raised_by``; None: a fixed bound), and whether stdin and
    named pipes are read at all (``streams``; else only regular files)."""

    max_bytes: int = DEFAULT_MAX_CONTEXT_BYTES
    wait: float | None = None
    raised_by: str | None = "--max-context-bytes"
    streams: bool = True
    # Sees where each file opened really is (its links followed, as opened, so a link
    # swapped in after a check of the path does not lead elsewhere) and may refuse it.
    admit: Callable[[str], None] | None = None

    @classmethod
    def file_only(cls, max_bytes: int = SMALL_FILE_BYTES) -> ReadLimits:
        """A regular file of at most ``max_bytes``, a fixed bound: no stdin, no pipe."""
        return cls(max_bytes, raised_by=None, streams=False)

    def check(self, size: int, name: str) -> None:
        """Refuse ``size`` bytes of ``name`` when they are more than what is left."""
        if size <= self.max_bytes:
            return
        if self.raised_by is None:
            raise UsageError(
                f"{name} is larger than {format_size(self.max_bytes)}, the most rlm reads "
                "of it: check that it is the file you meant"
            )
        raise UsageError(
            f"{name} holds more than the {format_size(self.max_bytes)} left of "
            f"{self.raised_by}; raise it (e.g. {self.raised_by} 2GiB) or pass less"
        )

    def take(self, size: int, name: str) -> None:
        """Count ``size`` bytes of ``name`` against what is left; refuse past it."""
        self.check(size, name)
        self.max_bytes -= size


def read_text(
    path: str, encoding: str, what: str = "context file", *, limits: ReadLimits | None = None,
    announce: Callable[[str], None] | None = None,
) -> str:
    """The text of ``path`` (``-``: stdin); every failure is a UsageError naming ``what``."""
    name = "stdin" if path == "-" else path
    data = read_bytes(path, what, limits or ReadLimits(), announce=announce)
    try:
        return data.decode(encoding)
    except LookupError as exc:
        raise UsageError(f"unknown --encoding {encoding!r}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{what} {name} is not valid {encoding} (byte 0x{data[exc.start]:02x} at "
            f"offset {exc.start}); pass the file's encoding, e.g. --encoding latin-1"
        ) from exc


def read_bytes(path: str, what: str, limits: ReadLimits, *,
               announce: Callable[[str], None] | None = None) -> bytes:
    """The bytes of ``path`` within ``limits`` (``-``: stdin, when ``limits.streams``);
    ``announce`` is told when stdin is a terminal, so the person knows to type."""
    if path == "-" and limits.streams:
        if announce is not None and sys.stdin.isatty():
            announce(f"reading the {what} from stdin (this terminal): type or paste it, "
                     "then Ctrl-D")
        return _read_capped(sys.stdin.buffer.read, f"{what} stdin", limits)
    name = f"{what} {path}"
    with _opened(path, what, limits) as (fd, mode):
        if stat.S_ISFIFO(mode.st_mode):
            return _read_pipe(fd, name, limits)
        os.set_blocking(fd, True)
        return _read_capped(lambda n: os.read(fd, n), name, limits)


@contextmanager
def open_file(path: str, what: str, limits: ReadLimits) -> Iterator[BinaryIO]:
    """``path`` open for reading in pieces (a file too large to hold whole, read a line
    at a time): a regular file of at most ``limits.max_bytes``, refused as
    :func:`read_bytes` refuses one, never a pipe or a device."""
    with _opened(path, what, dataclasses.replace(limits, streams=False)) as (fd, _):
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as handle:
            yield handle


@contextmanager
def _opened(path: str, what: str, limits: ReadLimits) -> Iterator[tuple[int, os.stat_result]]:
    """``path`` open (a regular file measured against ``limits``, or a named pipe when
    they allow it) and its status; closed after."""
    name = f"{what} {path}"
    try:
        # Non-blocking: opening a named pipe with no writer must not hang here.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise UsageError(f"{name} does not exist") from exc
    except IsADirectoryError as exc:
        raise UsageError(f"{name} is a directory; pass a file") from exc
    except OSError as exc:
        raise UsageError(f"cannot read {name}: {exc.strerror}") from exc
    try:
        if limits.admit is not None:
            limits.admit(_opened_path(fd, path))
        mode = os.fstat(fd)
        if stat.S_ISREG(mode.st_mode):
            limits.check(mode.st_size, name)  # by its size, before reading it
        elif not (limits.streams and stat.S_ISFIFO(mode.st_mode)):
            raise UsageError(_not_a_file(name, mode.st_mode, limits.streams))
        yield fd, mode
    except OSError as exc:
        raise UsageError(f"cannot read {name}: {exc.strerror}") from exc
    finally:
        os.close(fd)


def _opened_path(fd: int, path: str) -> str:
    """Where the file open on ``fd`` is: what the kernel says it opened, or (where it
    does not say: not Linux) ``path`` with its links followed now."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)


def _not_a_file(name: str, mode: int, streams: bool) -> str:
    kinds = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISFIFO, "a named pipe"))
    kind = next((text for test, text in kinds if test(mode)), "not a regular file")
    if streams:
        return (f"{name} is not a file ({kind}); pass a file, a directory, a named pipe, "
                "or - for stdin")
    return f"{name} is not a regular file ({kind}); pass a regular file"


def _read_capped(read: Callable[[int], bytes], name: str, limits: ReadLimits) -> bytes:
    """Everything ``read`` gives until it ends, refused as soon as it passes ``limits``."""
    chunks: list[bytes] = []
    while chunk := read(min(_CHUNK, limits.max_bytes + 1)):
        limits.take(len(chunk), name)
        chunks.append(chunk)
    return b"".join(chunks)


def _read_pipe(fd: int, name: str, limits: ReadLimits) -> bytes:
    """A named pipe's data until its writer closes it, within ``limits.wait`` seconds."""
    deadline = None if limits.wait is None else time.monotonic() + limits.wait
    chunks: list[bytes] = []
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise UsageError(
                f"{name} (a named pipe) sent no end of data within --timeout "
                f"({limits.wait:g} s): start its writer first, or raise --timeout"
            )
        # Readable once data came or a writer came and went (Linux reports no hang-up
        # for a pipe no writer ever opened): only then does a read's b"" mean the end.
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        try:
            chunk = os.read(fd, min(_CHUNK, limits.max_bytes + 1))
        except BlockingIOError:  # a writer is there, its data not yet
            continue
        if not chunk:
            return b"".join(chunks)
        limits.take(len(chunk), name)
        chunks.append(chunk)
