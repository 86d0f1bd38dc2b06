"""A worker's hot journal writes (claims, verdict groups), in a thread or a process.

:class:`JournalWrites` is what :class:`rlm.journal.worker.JournalWorker` calls
for the writes it makes per task: a claim of the next batch and a group of
verdicts.  :class:`StoreWrites` runs them on the worker's own store, in a trio
worker thread (PostgreSQL; tests in virtual time run them inline).

:func:`writer_process` runs them in a process of their own for a SQLite
journal.  Why: in a thread, the store's Python work (parameters, the verdict
group's JSON) and every hand-off of the GIL between the store's thread and the
event loop's slow the loop down. Measured on the 10,000-task bench, the loop's
own CPU time per task rose ~20 % with the journal in a thread, and not
measurably with it in a process (``docs/journal.md``, *Cost*).  The writer
process has its own interpreter and, where one is free, its own core.

The process answers one request at a time, in order, each once its
transaction has committed (``rlm.journal._writer_main``); a caller returns only
then, so a verdict is reported only once it is durable, as before.  It is
supervised: started by the trio thread itself (the kernel's parent-death signal
follows the thread that started a process, and trio's worker threads come and
go), it dies with its parent on every path (EOF on its stdin, the parent-death
signal), is closed and waited for when the context ends, killed if it does not
end, and a crash of it fails every request waiting on it with a
:class:`~rlm.errors.JournalError` that says so, never a hang.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import msgpack
import trio

import rlm
from rlm.errors import JournalError
from rlm.journal._backends import SQLiteBackend
from rlm.journal._threads import RunSync
from rlm.journal._verdicts import FlatVerdict, clean_flat, verdict_rows
from rlm.journal.records import Owner, Spend
from rlm.journal.store import JournalStore

__all__ = [
    "JournalWrites",
    "StoreWrites",
    "WriterProcess",
    "supervised",
    "writer_process",
    "writes_for",
]

#: How long a closed writer may take to finish what it was asked before it is killed.
_CLOSE_GRACE_S = 10.0
#: How much of the writer's stderr is kept for an error message.
_STDERR_TAIL = 2000
#: The environment the writer gets: what Python and SQLite read, never a key.
_ENV_KEPT = ("PATH", "HOME", "TMPDIR", "SQLITE_TMPDIR", "LANG", "LC_ALL", "LC_CTYPE")


class JournalWrites(Protocol):
    """The writes a worker makes per task; each returns once committed."""

    async def claim_indices(self, volley_id: str, owner: Owner, limit: int) -> list[int]: ...

    async def claim_specs(
        self, volley_id: str, owner: Owner, limit: int
    ) -> list[dict[str, Any]]: ...

    async def finish_flat(
        self,
        volley_id: str,
        verdicts: Sequence[FlatVerdict],
        spend: Spend,
        group: tuple[str, int] | None = None,
    ) -> int:
        """:meth:`JournalStore.finish_rows` of verdicts as the event loop hands them
        (flat: see :mod:`rlm.journal._verdicts`); their rows are built where the store
        runs, off the event loop."""
        ...


class StoreWrites:
    """:class:`JournalWrites` on a store of this process, through ``run_sync``."""

    def __init__(self, store: JournalStore, run_sync: RunSync) -> None:
        self._store = store
        self._run_sync = run_sync

    async def claim_indices(self, volley_id: str, owner: Owner, limit: int) -> list[int]:
        return await self._run_sync(self._store.claim_indices, volley_id, owner, limit)

    async def claim_specs(self, volley_id: str, owner: Owner, limit: int) -> list[dict[str, Any]]:
        return await self._run_sync(self._store.claim_specs, volley_id, owner, limit)

    async def finish_flat(
        self,
        volley_id: str,
        verdicts: Sequence[FlatVerdict],
        spend: Spend,
        group: tuple[str, int] | None = None,
    ) -> int:
        return await self._run_sync(_finish_flat, self._store, volley_id, verdicts, spend, group)


def _finish_flat(
    store: JournalStore,
    volley_id: str,
    verdicts: Sequence[FlatVerdict],
    spend: Spend,
    group: tuple[str, int] | None,
) -> int:
    """Build the rows and write them (in the store's thread, or the writer process)."""
    return store.finish_rows(volley_id, verdict_rows(verdicts), spend, group)


class _Reply:
    """One request's answer, once it comes."""

    def __init__(self) -> None:
        self.came = trio.Event()
        self.ok = False
        self.value: Any = None

    def settle(self, ok: bool, value: Any) -> None:
        self.ok, self.value = ok, value
        self.came.set()


class WriterProcess:
    """:class:`JournalWrites` in a writer process; made by :func:`writer_process`."""

    def __init__(self, popen: subprocess.Popen[bytes], where: str) -> None:
        self.pid = popen.pid
        self._popen = popen
        self._where = where
        self._stdin, self._stdout, self._stderr = (
            _stream(popen.stdin), _stream(popen.stdout), _stream(popen.stderr)
        )
        self._opened = _Reply()  # the process's first word: whether the journal opened
        self._waiting: deque[_Reply] = deque([self._opened])  # in the order asked
        self._sending = trio.Lock()
        self._gone: str | None = None  # why no request can be answered any more
        self._exited = trio.Event()
        self._stderr_tail = b""
        self._stderr_closed = trio.Event()

    async def ready(self) -> None:
        """Wait until the writer has opened the journal (JournalError if it cannot)."""
        await self._opened.came.wait()
        if not self._opened.ok:
            raise JournalError(str(self._opened.value))

    async def claim_indices(self, volley_id: str, owner: Owner, limit: int) -> list[int]:
        result: list[int] = await self._ask("claim_indices", volley_id, _owner(owner), limit)
        return result

    async def claim_specs(self, volley_id: str, owner: Owner, limit: int) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._ask(
            "claim_specs", volley_id, _owner(owner), limit
        )
        return result

    async def finish_flat(
        self,
        volley_id: str,
        verdicts: Sequence[FlatVerdict],
        spend: Spend,
        group: tuple[str, int] | None = None,
    ) -> int:
        spent = (spend.cost, spend.calls, spend.input_tokens, spend.output_tokens)
        try:
            request = _pack("finish_flat", (volley_id, verdicts, spent, group))
        except JournalError as exc:
            if not isinstance(exc.__cause__, UnicodeEncodeError):
                raise
            # A text UTF-8 cannot encode (a lone surrogate): rare, so cleaned only now.
            cleaned = [clean_flat(v) for v in verdicts]
            request = _pack("finish_flat", (volley_id, cleaned, spent, group))
        result: int = await self._send(request)
        return result

    async def _ask(self, method: str, *args: Any) -> Any:
        """Send a request and wait for its answer.

        Shielded: once sent, a request is carried out, so its caller must learn
        the outcome (a claim's tasks are held, a group's verdicts are kept)
        even when cancelled, as with a store call in a thread.  The wait ends
        when the answer comes or the process is found gone, never later: a
        reply is queued only while the process is not known gone, with no
        checkpoint between that check and the queueing (the reader fails what
        is queued in the same step as it marks the process gone), and a
        request that could not be sent whole fails at once.
        """
        # Packed before queueing: a request that cannot go leaves no trace.
        return await self._send(_pack(method, args))

    async def _send(self, request: bytes) -> Any:
        """Send a packed request and wait for its answer (see :meth:`_ask`)."""
        await self.ready()
        reply = _Reply()
        with trio.CancelScope(shield=True):
            async with self._sending:
                # Checked with no checkpoint before the append: once the reader has found
                # the process gone and failed what waited, nothing is added to wait.
                if self._gone is not None:
                    raise JournalError(self._gone)
                self._waiting.append(reply)  # under the lock: answers come in this order
                try:
                    await self._stdin.send_all(request)
                except trio.BrokenResourceError as exc:
                    self._not_sent(reply, exc)
            await reply.came.wait()
        if not reply.ok:
            raise JournalError(str(reply.value))
        return reply.value

    def _not_sent(self, reply: _Reply, exc: Exception) -> None:
        """Fail a request that could not be sent whole (unless the reader already did).

        The process stopped reading its requests (it died): it answers nothing
        more, and what it was sent may end in part of a request, so it is ended
        (the reader then fails what else waits).
        """
        self._kill()
        if not reply.came.is_set():  # still queued: only an answer or the reader settles it
            self._waiting.remove(reply)
            reply.settle(False, self._death_note(f"its request could not be sent ({exc})"))

    async def _read_replies(self) -> None:
        """Hand each answer to its request; when the process ends, fail what still waits."""
        answers = msgpack.Unpacker(raw=False, use_list=True)
        garbage: str | None = None
        try:
            while data := await self._stdout.receive_some(1 << 16):
                answers.feed(data)
                for answer in answers:
                    if not self._waiting or not (isinstance(answer, list) and len(answer) == 2):
                        raise ValueError(f"unexpected answer {answer!r:.100}")
                    self._waiting.popleft().settle(bool(answer[0]), answer[1])
        except (ValueError, msgpack.UnpackException) as exc:
            garbage = f"it wrote something that is not an answer ({exc})"
            self._kill()
        except trio.BrokenResourceError as exc:
            garbage = f"its answers could not be read ({exc})"
            self._kill()
        await self._wait_exit()
        await self._stderr_closed.wait()  # its last words are all read (it has exited)
        note = self._death_note(garbage)
        self._gone = self._gone or note  # closed first: later requests are told that
        while self._waiting:
            self._waiting.popleft().settle(False, note)

    async def _read_stderr(self) -> None:
        try:
            while data := await self._stderr.receive_some(1 << 16):
                self._stderr_tail = (self._stderr_tail + data)[-_STDERR_TAIL:]
        except trio.BrokenResourceError:  # unreadable: the message goes without its last words
            return
        finally:
            self._stderr_closed.set()

    def _death_note(self, garbage: str | None) -> str:
        code = self._popen.returncode
        how = (
            garbage
            or (f"it was killed by signal {-code}" if code is not None and code < 0 else None)
            or f"it exited with code {code}"
        )
        said = self._stderr_tail.decode("utf-8", "replace").strip().splitlines()
        last = f"; its last words: {said[-1]}" if said else ""
        return (
            f"journal {self._where}: its writer process (pid {self.pid}) ended while requests "
            f"were waiting: {how}{last}. No result waiting on it was reported; run the volley "
            "again with --resume to finish it"
        )

    async def _wait_exit(self) -> None:
        """Wait for the process to end (its stdout is closed: it is ending, or has)."""
        try:
            pidfd = os.pidfd_open(self.pid)
        except OSError:  # no pidfd (not Linux, or Linux < 5.3): a thread waits instead
            await trio.to_thread.run_sync(self._popen.wait, abandon_on_cancel=True)
        else:
            try:
                await trio.lowlevel.wait_readable(pidfd)  # readable once it exited
            finally:
                os.close(pidfd)
        self._popen.wait()
        self._exited.set()

    def _kill(self) -> None:
        if self._popen.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:  # it just exited; _wait_exit reaps it
                return

    async def _close(self) -> None:
        """End the process: EOF on its stdin (it answers what it was asked, then
        exits), then a kill if it has not exited within the grace period."""
        with trio.CancelScope(shield=True):
            async with self._sending:
                # Under the lock: a request asked from now on is refused, never sent.
                self._gone = self._gone or f"journal {self._where}: its writer process was closed"
                await self._stdin.aclose()
            with trio.move_on_after(_CLOSE_GRACE_S):
                await self._exited.wait()
            self._kill()
            await self._exited.wait()


def _stream(pipe: Any) -> trio.lowlevel.FdStream:
    """A trio stream over a Popen pipe (a duplicate of its descriptor; the pipe closed)."""
    stream = trio.lowlevel.FdStream(os.dup(pipe.fileno()))
    pipe.close()
    return stream


#: The fields of a :data:`~rlm.journal._verdicts.FlatVerdict`, to name one that cannot be sent.
_FLAT_FIELDS = (
    "index", "status", "output", "duration", "tokens_input", "tokens_output", "tokens_cached",
    "retries", "cost", "error",
)


def _pack(method: str, args: tuple[Any, ...]) -> bytes:
    """A request as the writer reads it; a JournalError naming what cannot be encoded."""
    try:
        request: bytes = msgpack.packb([method, args], use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:  # UnicodeEncodeError is a ValueError
        raise JournalError(
            f"cannot write {_unpackable(method, args)} to the journal: {exc}"
        ) from exc
    return request


def _unpackable(method: str, args: tuple[Any, ...]) -> str:
    """Which part of a request msgpack cannot encode (a verdict's field, by name)."""
    rows = args[1] if method == "finish_flat" else ()
    for row in rows:
        for name, value in zip(_FLAT_FIELDS, row, strict=False):
            try:
                msgpack.packb(value, use_bin_type=True)
            except (TypeError, ValueError, OverflowError):
                return f"the {name} of task {row[0]!r}'s verdict"
    return f"a {method} request"


def _owner(owner: Owner) -> tuple[str, int, str]:
    return (owner.host, owner.pid, owner.worker)


def _spawn(path: str) -> subprocess.Popen[bytes]:
    """Start the writer process on the journal file ``path``.

    On this (the trio) thread, not a worker thread: the parent-death signal fires
    when the thread that started the process ends.
    """
    root = str(Path(rlm.__file__).resolve().parent.parent)  # where this rlm is imported from
    env = {name: os.environ[name] for name in _ENV_KEPT if name in os.environ}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "rlm.journal._writer_main", path, str(os.getpid())]
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # a terminal's Ctrl-C is the parent's to handle
        )
    except OSError as exc:
        raise JournalError(f"cannot start the journal writer process for {path}: {exc}") from exc


@asynccontextmanager
async def writer_process(path: str) -> AsyncIterator[WriterProcess]:
    """A writer process on the SQLite journal ``path``, ended when the context exits.

    It starts at once and opens the journal while the caller goes on; the first
    request waits for it (:meth:`WriterProcess.ready` waits explicitly).
    """
    async with supervised(_spawn(path), path) as writer:
        yield writer


@asynccontextmanager
async def supervised(popen: subprocess.Popen[bytes], where: str) -> AsyncIterator[WriterProcess]:
    """Talk to the started writer ``popen`` (of journal ``where``) while the context
    runs; end it (EOF, then a kill after the grace period) and reap it on exit."""
    writer = WriterProcess(popen, where)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer._read_replies)
        nursery.start_soon(writer._read_stderr)
        try:
            yield writer
        finally:
            await writer._close()


@asynccontextmanager
async def writes_for(store: JournalStore) -> AsyncIterator[WriterProcess | None]:
    """A writer process for a SQLite journal; None for PostgreSQL (whose driver waits
    on the network without the GIL: its writes stay in a thread)."""
    backend = store.backend
    if not isinstance(backend, SQLiteBackend):
        yield None
        return
    async with writer_process(backend.where) as writer:
        yield writer
