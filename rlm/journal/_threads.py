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
        self.committed = False
        self.error: BaseException | None = None


class GroupCommit(Generic[T]):
    """Many writers, one ``commit(items)`` per group of items queued meanwhile."""

    def __init__(self, commit: Callable[[Sequence[T]], object], run_sync: RunSync) -> None:
        self._commit = commit
        self._run_sync = run_sync
        self._open: _Group[T] = _Group()
        self._lock = trio.Lock()

    async def write(self, item: T) -> None:
        """Return once ``item`` is committed; raise what the commit raised.

        If the caller is cancelled while queued, its item may still be
        committed by the next writer (commits are idempotent per item).
        """
        group = self._open
        group.items.append(item)
        async with self._lock:
            if not group.committed and group.error is None:
                if self._open is group:  # else a cancelled writer already took it
                    self._open = _Group()
                try:
                    await self._run_sync(self._commit, group.items)
                except Exception as exc:  # the store's error, for every writer of the group
                    group.error = exc
                else:
                    group.committed = True  # no checkpoint between the commit and this line
        if group.error is not None:
            raise group.error
