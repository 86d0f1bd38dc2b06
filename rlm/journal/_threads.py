"""Blocking journal calls, off the trio thread, committed in groups.

``RunSync`` is how the async layer runs a blocking store call: by default
``trio.to_thread.run_sync``; tests inject an inline runner so claim logic runs
in virtual time (an autojumping clock would jump while a real thread works).

:class:`GroupCommit` gives each writer a durable write without a transaction
per item: writers queue their items, the first to take the lock commits
everything queued so far in one transaction, and the rest find theirs already
committed.  A result is therefore durable before ``write`` returns, and the
fsync is paid per group, not per item.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import trio

__all__ = ["GroupCommit", "RunSync", "inline_run_sync", "thread_run_sync"]

T = TypeVar("T")
R = TypeVar("R")


class RunSync(Protocol):
    def __call__(self, fn: Callable[..., R], /, *args: Any) -> Awaitable[R]: ...


async def thread_run_sync(fn: Callable[..., R], /, *args: Any) -> R:
    """Run ``fn`` in a trio worker thread; cancellation waits for it to finish."""
    return await trio.to_thread.run_sync(fn, *args)


async def inline_run_sync(fn: Callable[..., R], /, *args: Any) -> R:
    """Run ``fn`` on the trio thread (tests with an in-memory or tiny store)."""
    await trio.lowlevel.checkpoint()
    return fn(*args)


class _Group(Generic[T]):
    def __init__(self) -> None:
        self.items: list[T] = []
        self.done = trio.Event()
        self.error: Exception | None = None


class GroupCommit(Generic[T]):
    """Many writers, one ``commit(items)`` per group of items queued meanwhile.

    The first writer of a group leads it: it waits (shielded from
    cancellation) for the previous group's commit to end and for ``interval``
    to pass since it, closes the group (later writers start the next one),
    commits it, and wakes the group's writers at once.  Every other writer
    waits once, for its group's commit: no writer is woken before its item is
    committed, so a fast volley pays one transaction (and fsync), one thread
    hand-off and one wake-up per writer per group.
    """

    def __init__(
        self,
        commit: Callable[[Sequence[T]], object],
        run_sync: RunSync,
        *,
        interval: float = 0.01,
    ) -> None:
        self._commit = commit
        self._run_sync = run_sync
        self._open: _Group[T] = _Group()
        self._previous = trio.Event()  # set when the last closed group's commit has ended
        self._previous.set()
        self._interval = interval
        self._last = -float("inf")

    async def write(self, item: T) -> None:
        """Return once ``item`` is committed; raise what the commit raised.

        If the caller is cancelled while waiting, its item stays queued and is
        committed with its group (a group's leader cannot be cancelled).
        """
        group = self._open
        group.items.append(item)
        if len(group.items) == 1:
            await self._lead(group)
        else:
            await group.done.wait()
        if group.error is not None:
            raise group.error

    async def _lead(self, group: _Group[T]) -> None:
        with trio.CancelScope(shield=True):
            # One commit at a time, at most one per interval: items arriving
            # meanwhile join this group.
            await self._previous.wait()
            await trio.sleep_until(self._last + self._interval)
            self._open = _Group()
            self._previous = finished = trio.Event()
            try:
                await self._run_sync(self._commit, group.items)
            except Exception as exc:  # the store's error, for every writer of the group
                group.error = exc
            finally:
                self._last = trio.current_time()
                group.done.set()
                finished.set()
