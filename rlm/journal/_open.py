"""Where a journal lives: ``--journal PATH``, ``--journal postgresql://...``, or the default.

The default is ``journal.sqlite3`` in the platform's user state directory
(``$XDG_STATE_HOME/rlm`` on Linux, ``~/Library/Application Support/rlm`` on
macOS, ``%LOCALAPPDATA%\\rlm`` on Windows), as platformdirs reports it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import platformdirs

from rlm.errors import JournalError, UsageError
from rlm.journal._backends import Backend, PostgresBackend, SQLiteBackend
from rlm.journal.store import JournalStore

__all__ = ["default_journal_path", "is_postgres", "open_store"]

_PG_SCHEMES = ("postgresql://", "postgres://")


def default_journal_path() -> Path:
    return platformdirs.user_state_path("rlm") / "journal.sqlite3"


def is_postgres(spec: str) -> bool:
    return spec.startswith(_PG_SCHEMES)


def open_store(
    spec: str | None = None,
    *,
    clock: Callable[[], float] = time.time,
    on_wait: Callable[[str], None] | None = None,
) -> JournalStore:
    """Open (creating when new) the journal ``spec`` names; JournalError when it cannot be used.

    ``on_wait`` is told (a line of text) when a write waits long on a SQLite journal
    whose write lock another process holds."""
    backend: Backend
    if spec is not None and is_postgres(spec):
        backend = PostgresBackend(spec)
    else:
        if spec is None:
            path = default_journal_path()
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise JournalError(
                    f"cannot create the journal directory {path.parent}: {exc.strerror}; "
                    "give --journal PATH"
                ) from exc
        else:
            if not spec.strip():  # Path("") is the working directory: not what was meant
                raise UsageError(
                    "--journal is empty: give a journal file path (e.g. volleys.sqlite3) or a "
                    f"postgresql:// URL, or leave --journal out to use {default_journal_path()}"
                )
            if "://" in spec:
                raise JournalError(
                    f"--journal {spec!r}: only postgresql:// URLs and file paths are journals"
                )
            path = Path(spec).expanduser()
        backend = SQLiteBackend(path, on_wait=on_wait)
    return JournalStore(backend, clock=clock)
