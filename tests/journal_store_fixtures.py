"""What the journal store tests share (a plugin, see tests/conftest.py): a fake clock,
a journal on each backend, tasks and owners to put in it, and a SQLite journal that
notes the statements it runs."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rlm.journal._backends import SQLiteBackend, Tx
from rlm.journal._open import open_store
from rlm.journal.records import Owner
from rlm.journal.store import JournalStore

__all__ = ["A", "B", "FakeClock", "RecordingSQLite", "clock", "journal_spec", "store", "task_specs"]


class FakeClock:
    """Seconds that pass only when a test moves ``now``."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql"])
def journal_spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "journal.sqlite3")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(journal_spec: str, clock: FakeClock) -> Iterator[JournalStore]:
    opened = open_store(journal_spec, clock=clock)
    yield opened
    opened.close()


def task_specs(n: int) -> list[dict[str, object]]:
    """``n`` tasks, indexed from 1."""
    return [{"index": i, "prompt": f"task {i}"} for i in range(1, n + 1)]


A = Owner("host-a", 11, "wa")
B = Owner("host-b", 22, "wb")


class RecordingTx:
    def __init__(self, tx: Tx, backend: RecordingSQLite) -> None:
        self._tx = tx
        self._backend = backend

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._backend.note(sql, params)
        return self._tx.rows(sql, params)

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        self._backend.note(sql, params)
        return self._tx.run(sql, params)

    def many(self, sql: str, params: Iterable[Sequence[Any]]) -> int:
        rows = list(params)  # (a generator, as a volley's tasks are recorded)
        self._backend.note(sql, rows[0] if rows else ())
        return self._tx.many(sql, rows)


class RecordingSQLite(SQLiteBackend):
    """A SQLite journal that notes every statement its transactions run (``statements``),
    with its parameters (``calls``: the first row's, for a statement run per row)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.statements: list[str] = []
        self.calls: list[tuple[str, Sequence[Any]]] = []

    def note(self, sql: str, params: Sequence[Any]) -> None:
        self.statements.append(sql)
        self.calls.append((sql, params))

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with super().transaction() as tx:
            yield RecordingTx(tx, self)

    @contextmanager
    def snapshot(self) -> Iterator[Tx]:
        with super().snapshot() as tx:
            yield RecordingTx(tx, self)
