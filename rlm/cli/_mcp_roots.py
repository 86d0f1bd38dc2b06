"""The directories ``rlm mcp`` serves, and reading a tool call's paths from them.

The server was started with ``--root DIR`` (repeatable; default the current
directory).  A path a client names is resolved with every symbolic link followed
(relative paths from the first root) and refused unless it lands inside one of
those directories; a directory's files are held to the same rule, one by one, so
a link inside a root cannot lead out of it; and each file, once open, is checked
again where it really is, so a link swapped in between the check and the reading
leads nowhere.  Only regular files and directories
are read: a device, a socket or a named pipe is refused, whatever its place.
What is read is bounded as ``rlm run`` bounds it (``max_context_bytes``), by the
same reading code (:mod:`rlm.cli._context_input`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from rlm._files import ReadLimits
from rlm._run.context import Context
from rlm.cli._context_input import read_context
from rlm.errors import UsageError

__all__ = ["Roots"]


class Roots:
    """The directories a server may read from, resolved once when it starts."""

    def __init__(self, directories: Sequence[str]) -> None:
        resolved: list[Path] = []
        for given in directories or (".",):
            path = Path(os.path.realpath(given))
            if not path.is_dir():
                raise UsageError(f"--root {given} is not a directory; pass one that exists")
            resolved.append(path)
        self.paths: tuple[Path, ...] = tuple(dict.fromkeys(resolved))

    def __str__(self) -> str:
        return ", ".join(str(p) for p in self.paths)

    def contains(self, path: Path) -> bool:
        """Whether ``path`` (already resolved) is one of the roots or lies inside one."""
        return any(path == root or path.is_relative_to(root) for root in self.paths)

    def resolve(self, given: str) -> Path:
        """``given`` with its links followed, if it is a file or directory inside the roots;
        a UsageError saying why not otherwise."""
        if not given.strip():
            raise UsageError("a path is empty; name a file or a directory")
        path = Path(os.path.realpath(self.paths[0] / os.path.expanduser(given)))
        if not self.contains(path):
            raise UsageError(f"{given} is outside the directories this server reads ({self}); "
                             "restart it with --root DIR to serve another")
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise UsageError(f"{given} does not exist") from None
        except OSError as exc:
            raise UsageError(f"cannot read {given}: {exc.strerror}") from None
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise UsageError(f"{given} is not a regular file or a directory; "
                             "only those are read")
        return path

    def admit(self, path: Path) -> None:
        """Refuse a directory's file whose links lead out of the roots."""
        if not self.contains(Path(os.path.realpath(path))):
            raise UsageError(f"{path} links outside the directories this server reads "
                             f"({self}); remove the link or narrow the glob")

    def admit_opened(self, real: str) -> None:
        """Refuse a file opened outside the roots: a path checked, then swapped for a link
        before it was opened."""
        if not self.contains(Path(real)):
            raise UsageError(f"{real} is outside the directories this server reads ({self}); "
                             "restart it with --root DIR to serve another")

    def read(self, paths: Sequence[str], *, glob: str, encoding: str,
             max_bytes: int) -> Context:
        """The context ``paths`` hold: one file a str, several or a directory a list.

        Blocking (it reads files): run it in a worker thread.
        """
        if not paths:
            raise UsageError("no paths: name at least one file or directory to read")
        resolved = tuple(str(self.resolve(p)) for p in paths)
        return read_context(resolved, encoding, glob,
                            limits=ReadLimits(max_bytes, admit=self.admit_opened),
                            admit=self.admit)
