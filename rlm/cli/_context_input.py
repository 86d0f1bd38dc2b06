"""Reading ``--context-file`` arguments into the run's ``context``."""

from __future__ import annotations

import sys
from pathlib import Path

from rlm._run.context import Context
from rlm.errors import UsageError

__all__ = ["read_context", "read_text"]


def read_context(paths: tuple[str, ...], encoding: str) -> Context:
    """One file → a str; several → a list of str; ``-`` reads stdin (once)."""
    if sum(1 for p in paths if p == "-") > 1:
        raise UsageError("--context-file - (stdin) can be given only once")
    texts = [read_text(path, encoding) for path in paths]
    if not texts:
        return ""
    return texts[0] if len(texts) == 1 else texts


def read_text(path: str, encoding: str, what: str = "context file") -> str:
    """The text of ``path`` (``-``: stdin); every failure is a UsageError naming ``what``."""
    name = "stdin" if path == "-" else path
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise UsageError(f"{what} {name} does not exist") from exc
    except IsADirectoryError as exc:
        raise UsageError(f"{what} {name} is a directory; pass a file") from exc
    except OSError as exc:
        raise UsageError(f"cannot read {what} {name}: {exc.strerror}") from exc
    try:
        return data.decode(encoding)
    except LookupError as exc:
        raise UsageError(f"unknown --encoding {encoding!r}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{what} {name} is not valid {encoding} (byte 0x{data[exc.start]:02x} at "
            f"offset {exc.start}); pass the file's encoding, e.g. --encoding latin-1"
        ) from exc
