"""Reading ``--context-file`` arguments into the run's ``context``.

A path is a file, ``-`` (stdin, once), a named pipe or a directory, whose
files become one document each (sorted by path, filtered by ``--glob``, hidden
entries and binary files skipped).  Several paths make ``context`` a list.
Reading is bounded: all of it together holds at most ``--max-context-bytes``
(a file larger than what is left is refused before it is read, by its size), a
directory at most ``MAX_DIR_FILES`` files, and a named pipe must deliver its
data within ``--timeout``.  Anything else (a device such as ``/dev/zero``, a
socket) is refused.  An empty context is allowed but never silent: the person
is told, and told about data waiting on stdin that was not asked for.
"""

from __future__ import annotations

import fcntl
import fnmatch
import os
import select
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rlm._config import DEFAULT_MAX_CONTEXT_BYTES
from rlm._run.context import Context
from rlm._sizes import format_size
from rlm._symbols import symbol
from rlm.cli._terminal import plural, say
from rlm.errors import UsageError

__all__ = [
    "MAX_DIR_FILES",
    "ReadLimits",
    "context_paths",
    "read_context",
    "read_text",
    "warn_if_empty",
]

MAX_DIR_FILES = 10_000
_CHUNK = 1 << 20


@dataclass
class ReadLimits:
    """What reading may take: bytes in all (``--max-context-bytes``; what is read counts
    down from it), and seconds a named pipe may keep us waiting (``--timeout``; None:
    no limit)."""

    max_bytes: int = DEFAULT_MAX_CONTEXT_BYTES
    wait: float | None = None

    def check(self, size: int, name: str) -> None:
        """Refuse ``size`` bytes of ``name`` when they are more than what is left."""
        if size > self.max_bytes:
            raise UsageError(
                f"{name} holds more than the {format_size(self.max_bytes)} left of "
                f"--max-context-bytes; raise it (e.g. --max-context-bytes 2GiB) or pass less"
            )

    def take(self, size: int, name: str) -> None:
        """Count ``size`` bytes of ``name`` against what is left; refuse past it."""
        self.check(size, name)
        self.max_bytes -= size


def context_paths(flagged: tuple[str, ...], extra: tuple[str, ...]) -> tuple[str, ...]:
    """The paths to read: ``--context-file`` values plus the paths a shell glob spread after one.

    ``--context-file *.txt`` arrives as one flagged path and the rest as extra
    arguments; extra arguments are accepted only as existing paths after a
    ``--context-file``, so an unquoted query still gets a clear message.
    """
    strays = [arg for arg in extra if arg == "-" or not os.path.exists(arg)]
    if extra and (not flagged or strays):
        shown = " ".join(strays or extra)
        # After --context-file a stray may be a mistyped path as well as a word of the query.
        missing = " (no such file, so not read as a context file)" if flagged else ""
        raise UsageError(
            f"unexpected argument(s): {shown}{missing}. Quote the whole query "
            '(rlm run "what is ...?"), and put input files after --context-file'
        )
    return (*flagged, *extra)


def read_context(
    paths: tuple[str, ...],
    encoding: str,
    glob: str = "*",
    *,
    limits: ReadLimits | None = None,
    max_files: int = MAX_DIR_FILES,
    admit: Callable[[Path], None] | None = None,
) -> Context:
    """One file → a str; several files or a directory → a list of str; ``-`` reads stdin.

    A directory holding more than ``max_files`` matching files, or more bytes than
    ``limits`` leave, is refused before anything is read.  ``admit`` sees each file a
    directory would give and may refuse it (``rlm mcp``: a link out of its roots).
    """
    limits = limits or ReadLimits()
    if sum(1 for p in paths if p == "-") > 1:
        raise UsageError("--context-file - (stdin) can be given only once")
    texts: list[str] = []
    for path in paths:
        if path != "-" and os.path.isdir(path):
            files = _directory_files(Path(path), glob, max_files, limits.max_bytes, admit)
            texts.extend(_read_directory(Path(path), files, encoding, glob, limits))
        else:
            texts.append(read_text(path, encoding, limits=limits))
    if not texts:
        return ""
    single = len(texts) == 1 and not any(p != "-" and os.path.isdir(p) for p in paths)
    return texts[0] if single else texts


def warn_if_empty(paths: tuple[str, ...], context: Context) -> None:
    """Say so on stderr when a run's context is empty, and when stdin holds what was meant."""
    texts = [context] if isinstance(context, str) else context
    if not paths:
        if _stdin_has_data():
            say(
                "Warning: stdin has data, but no context was given, so it is not read; "
                "pass --context-file - to use it"
            )
        else:
            say(
                "Warning: no context given: the model has nothing to search; "
                "pass --context-file PATH (or - for stdin)"
            )
    elif not any(texts):
        where = ", ".join("stdin" if p == "-" else p for p in paths)
        say(
            f"Warning: the context is empty ({where}): the model has nothing to search; "
            "check that this is the input you meant"
        )


def _stdin_has_data() -> bool:
    """Whether bytes are waiting on stdin, found without reading (and so without stealing) any."""
    try:
        if sys.stdin is None or sys.stdin.isatty():
            return False
        fd = sys.stdin.fileno()
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            return os.fstat(fd).st_size > os.lseek(fd, 0, os.SEEK_CUR)
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            readable, _, _ = select.select([fd], [], [], 0.05)  # a writer just starting
            if not readable:
                return False
            import termios  # a C extension this check alone needs (a run without a path)

            waiting = bytearray(4)
            fcntl.ioctl(fd, termios.FIONREAD, waiting)
            return int.from_bytes(waiting, sys.byteorder) > 0
    except (OSError, ValueError):  # no usable stdin: nothing is waiting
        return False
    return False


def _directory_files(root: Path, glob: str, max_files: int, max_bytes: int,
                     admit: Callable[[Path], None] | None = None) -> list[Path]:
    """Every file under ``root`` matching ``glob`` (by name or relative path), sorted;
    ``admit`` may refuse one (a UsageError)."""
    files: list[Path] = []
    total = 0
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        for name in sorted(names):
            path = Path(directory, name)
            relative = path.relative_to(root).as_posix()
            if name.startswith(".") or not (
                fnmatch.fnmatch(name, glob) or fnmatch.fnmatch(relative, glob)
            ):
                continue
            if not path.is_file():  # a device or a pipe is never a document of a directory
                continue
            if admit is not None:
                admit(path)
            files.append(path)
            total += path.stat().st_size
            if len(files) > max_files or total > max_bytes:
                raise UsageError(
                    f"{root} holds more than {max_files:,} files or "
                    f"{format_size(max_bytes)} (--max-context-bytes) matching {glob!r}; "
                    "narrow it with --glob (e.g. --glob '*.log') or pass a subdirectory"
                )
    return files


def _read_directory(
    root: Path, files: list[Path], encoding: str, glob: str, limits: ReadLimits
) -> list[str]:
    """Each of ``files`` as one document; binary or undecodable files are skipped, and said."""
    texts: list[str] = []
    skipped: list[str] = []
    for path in files:
        data = _read_bytes(str(path), "context file", limits)
        try:
            if b"\0" in data[:8192]:
                raise UnicodeDecodeError(encoding, data, 0, 1, "binary")
            texts.append(data.decode(encoding))
        except UnicodeDecodeError:
            skipped.append(path.relative_to(root).as_posix())
        except LookupError as exc:
            raise UsageError(f"unknown --encoding {encoding!r}") from exc
    if skipped:
        say(
            f"Warning: skipped {plural(len(skipped), 'file')} in {root} that "
            f"{'is' if len(skipped) == 1 else 'are'} not {encoding} text: "
            f"{', '.join(skipped[:5])}{' ' + symbol('more') if len(skipped) > 5 else ''}"
        )
    if not texts:
        raise UsageError(
            f"{root} has no readable text files matching {glob!r}; check the path or --glob"
        )
    return texts


def _read_bytes(path: str, what: str, limits: ReadLimits) -> bytes:
    name = "stdin" if path == "-" else path
    if path == "-":
        if sys.stdin.isatty():
            say(f"reading the {what} from stdin (this terminal): type or paste it, then Ctrl-D")
        return _read_capped(sys.stdin.buffer.read, f"{what} {name}", limits)
    try:
        # Non-blocking: opening a named pipe with no writer must not hang here.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise UsageError(f"{what} {name} does not exist") from exc
    except IsADirectoryError as exc:
        raise UsageError(f"{what} {name} is a directory; pass a file") from exc
    except OSError as exc:
        raise UsageError(f"cannot read {what} {name}: {exc.strerror}") from exc
    try:
        mode = os.fstat(fd)
        if stat.S_ISREG(mode.st_mode):
            limits.check(mode.st_size, f"{what} {name}")  # by its size, before reading it
            os.set_blocking(fd, True)
            return _read_capped(lambda n: os.read(fd, n), f"{what} {name}", limits)
        if stat.S_ISFIFO(mode.st_mode):
            return _read_pipe(fd, f"{what} {name}", limits)
        raise UsageError(
            f"{what} {name} is not a file ({_kind(mode.st_mode)}); pass a file, a "
            "directory, a named pipe, or - for stdin"
        )
    except OSError as exc:
        raise UsageError(f"cannot read {what} {name}: {exc.strerror}") from exc
    finally:
        os.close(fd)


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


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    return next((text for test, text in kinds if test(mode)), "not a regular file")


def read_text(
    path: str, encoding: str, what: str = "context file", *, limits: ReadLimits | None = None
) -> str:
    """The text of ``path`` (``-``: stdin); every failure is a UsageError naming ``what``."""
    name = "stdin" if path == "-" else path
    data = _read_bytes(path, what, limits or ReadLimits())
    try:
        return data.decode(encoding)
    except LookupError as exc:
        raise UsageError(f"unknown --encoding {encoding!r}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{what} {name} is not valid {encoding} (byte 0x{data[exc.start]:02x} at "
            f"offset {exc.start}); pass the file's encoding, e.g. --encoding latin-1"
        ) from exc
