"""Reading ``--context-file`` arguments into the run's ``context``.

A path is a file, ``-`` (stdin, once), a named pipe or a directory, whose
files become one document each (sorted by path, filtered by ``--glob``, hidden
entries and binary files skipped).  Several paths make ``context`` a list.
Reading is bounded: all of it together holds at most ``--max-context-bytes``
(a file larger than what is left is refused before it is read, by its size), a
directory at most ``MAX_DIR_FILES`` files, and a named pipe must deliver its
data within ``--timeout``.  Anything else (a device such as ``/dev/zero``, a
socket) is refused: :mod:`rlm._files` reads every file a person names.  An empty
context is allowed but never silent: the person is told, and told about data
waiting on stdin that was not asked for.
"""

from __future__ import annotations

import fcntl
import fnmatch
import os
import select
import stat
import sys
from collections.abc import Callable
from pathlib import Path

from rlm._files import ReadLimits, read_bytes, read_text
from rlm._run.context import Context
from rlm._sizes import format_size
from rlm._symbols import symbol
from rlm.cli._terminal import plural, say
from rlm.errors import UsageError

__all__ = ["MAX_DIR_FILES", "context_paths", "read_context", "warn_if_empty"]

MAX_DIR_FILES = 10_000


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
            texts.append(read_text(path, encoding, limits=limits, announce=say))
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
        data = read_bytes(str(path), "context file", limits)
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
