"""The two places a journal can live: a SQLite file or a PostgreSQL database.

Each back end opens a connection, runs one write transaction at a time
(:meth:`transaction`) and translates its driver's exceptions into
:class:`rlm.errors.JournalError` where they enter.  The statements are the
same for both (see ``_schema``); only the placeholder style, the row lock
clause, the JSON table a group of rows is written through, and whether a claim
may return a row per task (``cheap_returning``) differ.

Neither back end is thread-safe by itself: :class:`rlm.journal.JournalStore`
serialises every call with a lock, so the async layer may run them in any
worker thread.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rlm.errors import JournalError

if TYPE_CHECKING:
    import psycopg

__all__ = ["Backend", "PostgresBackend", "SQLiteBackend", "Tx"]

Params = Sequence[Any]


class Tx(Protocol):
    """One open transaction."""

    def rows(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]: ...

    def run(self, sql: str, params: Params = ()) -> int:
        """Run a statement; the number of rows it changed."""
        ...

    def many(self, sql: str, params: Iterable[Params]) -> int:
        """Run a statement once per parameter row; the rows changed in all."""
        ...


class Backend(Protocol):
    #: How to name this journal in a message (a path, or a URL without its password).
    where: str
    #: Appended to a SELECT that picks rows to claim.
    lock_clause: str
    #: Lists the tables of the journal's database (or schema).
    tables_sql: str
    #: Reads the database server's clock (epoch seconds); None when the journal has no
    #: server (SQLite: the machine's own clock is the journal's).
    clock_sql: str | None
    #: Whether a statement may return many rows at no more cost than one (PostgreSQL
    #: sends them together; SQLite steps once per row, giving the GIL up each time).
    cheap_returning: bool
    #: A table of the elements of a JSON array given as the statement's parameter,
    #: each in a column ``value`` (one statement writes a whole group of rows).
    json_rows: str

    def json_item(self, i: int) -> str:
        """SQL for element ``i`` of ``value`` (a JSON array) as an SQL value; a nested
        object or array as its JSON text."""
        ...

    def json_number(self, column: str, key: str) -> str:
        """SQL for the number under ``key`` of the JSON object in ``column`` (NULL when
        the column is NULL or has no such key)."""
        ...

    def transaction(self) -> Any:
        """A context manager yielding a :class:`Tx`; commits on success, rolls back on error."""
        ...

    def snapshot(self) -> Any:
        """A context manager yielding a :class:`Tx` that only reads: one consistent view of
        the journal that takes no write lock, so it never waits on a writer."""
        ...

    def ready(self) -> None:
        """Called once the schema is checked."""
        ...

    def close(self) -> None: ...


class _SQLiteTx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def rows(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(sql, params).fetchall())

    def run(self, sql: str, params: Params = ()) -> int:
        # Not the cursor's rowcount: sqlite3 reports -1 for an UPDATE that starts with WITH.
        before = self._conn.total_changes
        self._conn.execute(sql, params)
        return self._conn.total_changes - before

    def many(self, sql: str, params: Iterable[Params]) -> int:
        return self._conn.executemany(sql, params).rowcount


class SQLiteBackend:
    """A journal file in WAL mode: readers never block the writer, writers queue.

    ``synchronous=FULL`` makes a commit survive a power cut as well as a
    ``kill -9``; the async layer batches commits so the fsync is paid per batch,
    not per result.

    A write transaction (``BEGIN IMMEDIATE``) waits for the file's write lock while
    another process holds it: after ``notice_after_s`` it says so through ``on_wait``
    (once per wait), and after ``busy_timeout_s`` it fails saying what holds the lock
    and what to do.  A read (:meth:`snapshot`) takes no write lock: under WAL it
    answers at once while another process writes.
    """

    lock_clause = ""  # BEGIN IMMEDIATE already holds the file's write lock
    tables_sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
    clock_sql: str | None = None
    cheap_returning = False
    json_rows = "json_each(?)"

    def json_item(self, i: int) -> str:
        return f"json_extract(value, '$[{i}]')"

    def json_number(self, column: str, key: str) -> str:
        return f"json_extract({column}, '$.{key}')"

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_s: float = 60.0,
        notice_after_s: float = 5.0,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        self.where = str(path)
        self._busy_timeout_s = busy_timeout_s
        # SQLite's own busy handler waits this long at a time; a write transaction
        # that is refused for longer says so and tries again until busy_timeout_s.
        self._wait_step_s = min(notice_after_s, busy_timeout_s)
        self._on_wait = on_wait
        target = Path(path)
        if target.is_dir():
            raise JournalError(f"--journal {self.where} is a directory; give a file path")
        if not target.parent.is_dir():
            raise JournalError(
                f"cannot open journal {self.where}: directory {target.parent} does not exist"
            )
        try:
            conn = sqlite3.connect(
                self.where,
                isolation_level=None,
                check_same_thread=False,
                timeout=self._wait_step_s,
            )
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open journal {self.where}: {exc}") from exc
        self._conn = conn
        try:
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            conn.close()
            raise JournalError(
                f"cannot open journal {self.where}: {exc} (is it an rlm journal?)"
            ) from exc

    def ready(self) -> None:
        """Switch to WAL, once the file is known to be a journal (never touch one that is not)."""
        deadline = time.monotonic() + self._busy_timeout_s
        pause = 0.001
        while True:
            try:
                (mode,) = self._conn.execute("PRAGMA journal_mode").fetchone()
                if str(mode).lower() == "wal":
                    return
                self._conn.execute("PRAGMA journal_mode=WAL").fetchall()
                return
            except sqlite3.OperationalError as exc:
                # Two connections switching a new file to WAL at once deadlock, and
                # SQLite refuses one of them at once without calling the busy
                # handler; the other finishes the switch in moments, so wait for it.
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise JournalError(f"cannot open journal {self.where}: {exc}") from exc
            except sqlite3.Error as exc:
                raise JournalError(f"cannot open journal {self.where}: {exc}") from exc
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        self._begin_immediate()
        with self._open_tx() as tx:
            yield tx

    @contextmanager
    def snapshot(self) -> Iterator[Tx]:
        # A deferred transaction: under WAL its reads take no lock a writer holds.
        try:
            self._conn.execute("BEGIN")
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.where}: {exc}") from exc
        with self._open_tx() as tx:
            yield tx

    def _begin_immediate(self) -> None:
        deadline = time.monotonic() + self._busy_timeout_s
        said = False
        while True:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                # SQLite's busy handler has waited _wait_step_s already.
                if not _is_busy(exc):
                    raise JournalError(f"journal {self.where}: {exc}") from exc
                if time.monotonic() >= deadline:
                    raise JournalError(
                        f"journal {self.where} is locked: another process has held its "
                        f"write lock for {self._busy_timeout_s:g} s{self._holders()}; "
                        "let it finish (or stop it), then run this again"
                    ) from exc
                if not said and self._on_wait is not None:
                    said = True
                    self._on_wait(
                        f"waiting for journal {self.where}: another process holds its "
                        f"write lock{self._holders()}; waiting up to "
                        f"{self._busy_timeout_s:g} s (Ctrl-C to stop)"
                    )
            except sqlite3.Error as exc:
                raise JournalError(f"journal {self.where}: {exc}") from exc

    def _holders(self) -> str:
        """Who may hold the write lock, as far as the journal says: the workers
        registered in it (readable while another process writes)."""
        try:
            with self.snapshot() as tx:
                rows = tx.rows(
                    "SELECT host, pid, volley_id FROM workers ORDER BY heartbeat_at DESC LIMIT 4"
                )
        except JournalError:
            return ""  # not a journal yet, or a journal before schema version 2
        if not rows:
            return " (no rlm worker is registered in it: another program, or a volley being made)"
        named = ", ".join(f"pid {pid} on {host} (volley {vid})" for host, pid, vid in rows[:3])
        more = ", ..." if len(rows) > 3 else ""
        return f" (workers registered in it: {named}{more})"

    @contextmanager
    def _open_tx(self) -> Iterator[Tx]:
        try:
            yield _SQLiteTx(self._conn)
            self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            undone = self._roll_back()
            raise JournalError(self._failure(exc) + undone) from exc
        except BaseException:
            self._roll_back()
            raise

    def _roll_back(self) -> str:
        """Roll the open transaction back; what went wrong doing so, or nothing.

        After some errors (a full disk, an I/O error) SQLite has rolled it back
        itself, and a ROLLBACK then fails with "no transaction is active", which
        must not hide the error that mattered.
        """
        if not self._conn.in_transaction:
            return ""
        try:
            self._conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            return f" (and rolling it back failed: {exc})"
        return ""

    def _failure(self, exc: sqlite3.Error) -> str:
        """What a failed transaction says: which journal, what happened, what to do."""
        if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            return (
                f"journal {self.where}: the disk is full ({exc}): this write was rolled "
                "back, and nothing the journal had committed before it is lost; free space "
                f"on the disk that holds {self.where} (its -wal file grows beside it), then "
                "run the command again (a volley: with --resume)"
            )
        hint = " (is it an rlm journal?)" if "not a database" in str(exc) else ""
        return f"cannot use journal {self.where}: {exc}{hint}"

    def close(self) -> None:
        self._conn.close()


class _PostgresTx:
    def __init__(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        self._conn = conn

    def rows(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        return self._conn.execute(_pg(sql), params).fetchall()

    def run(self, sql: str, params: Params = ()) -> int:
        return self._conn.execute(_pg(sql), params).rowcount

    def many(self, sql: str, params: Iterable[Params]) -> int:
        with self._conn.cursor() as cursor:
            cursor.executemany(_pg(sql), params)
            return cursor.rowcount


def _pg(sql: str) -> str:
    # Our statements never hold a literal '?' or '%', so the rewrite is exact.
    return sql.replace("?", "%s")


class PostgresBackend:
    """A journal in a PostgreSQL database, shared by workers on several machines.

    Claims lock the rows they pick with ``FOR UPDATE SKIP LOCKED``, so two
    workers claiming at once take different tasks without waiting on each other.
    """

    lock_clause = " FOR UPDATE SKIP LOCKED"
    tables_sql = (
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
    )
    # clock_timestamp(), not now(): now() is the start of the transaction.
    clock_sql: str | None = "SELECT EXTRACT(EPOCH FROM clock_timestamp())::double precision"
    cheap_returning = True
    json_rows = "json_array_elements(CAST(? AS json))"

    def json_item(self, i: int) -> str:
        return f"(value ->> {i})"

    def json_number(self, column: str, key: str) -> str:
        return f"CAST(CAST({column} AS json) ->> '{key}' AS DOUBLE PRECISION)"

    def __init__(self, url: str) -> None:
        self.where = _redact(url)
        try:
            import psycopg
        except ImportError as exc:
            raise JournalError(
                "a postgresql:// journal needs psycopg: pip install 'rlm[postgresql]'"
            ) from exc
        self._errors: type[Exception] = psycopg.Error
        try:
            self._conn: psycopg.Connection[tuple[Any, ...]] = psycopg.connect(
                url, autocommit=True, connect_timeout=30
            )
        except psycopg.Error as exc:
            # libpq quotes a URL it cannot parse whole, password and all.
            said = str(exc).replace(url, self.where)
            raise JournalError(f"cannot open journal {self.where}: {said}".strip()) from None

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        try:
            with self._conn.transaction():
                yield _PostgresTx(self._conn)
        except self._errors as exc:
            raise JournalError(f"journal {self.where}: {exc}".strip()) from exc

    @contextmanager
    def snapshot(self) -> Iterator[Tx]:
        # A PostgreSQL read never waits on another transaction's row locks.
        with self.transaction() as tx:
            yield tx

    def ready(self) -> None:
        pass

    def close(self) -> None:
        self._conn.close()


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def _redact(url: str) -> str:
    """The URL without its password, fit for messages and logs."""
    head, sep, tail = url.partition("://")
    if not sep or "@" not in tail:
        return url
    userinfo, _, host = tail.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return f"{head}://{user}:***@{host}" if ":" in userinfo else url
