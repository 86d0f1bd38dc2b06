"""A volley worker's view of the journal: the runner's task source and result sink.

:class:`JournalWorker` implements :class:`rlm.volley.store.TaskSource` and
:class:`~rlm.volley.store.ResultSink` over one volley of a journal:

- ``claim`` takes open tasks in task order, a few per transaction (kept in a
  small buffer, all held under this worker's claim and heartbeat);
- ``accept`` returns once the verdict is committed, so the runner reports a
  result only when it is durable; verdicts that arrive together are committed
  in one transaction (group commit), which keeps the journal's cost per task
  small on a fast volley;
- ``release`` gives a task back to ``open``.

While :meth:`JournalWorker.running` is open, a heartbeat refreshes every claim
this worker holds (every ``stale_timeout / 4``), and a sweep reopens claims of
other workers whose heartbeat is older than ``stale_timeout`` (every
``stale_timeout / 2``, and once at start, when claims of dead processes of this
host are reopened too).  A task that is slow but whose worker is alive keeps
heartbeating, so it is never reclaimed.  Leaving ``running`` releases whatever
is still claimed and records what the volley spent since the last verdict.

Blocking store calls run through the injected ``run_sync`` (a trio worker
thread by default; inline in virtual-time tests).
"""

from __future__ import annotations

import errno
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import trio

from rlm.journal._threads import GroupCommit, RunSync, thread_run_sync
from rlm.journal.store import JournalStore, Owner, Recovered, Spend, Verdict
from rlm.volley.records import TaskResult, VolleyTask

__all__ = ["JournalWorker", "pid_alive"]

#: The default for ``--stale-timeout``: ten minutes without a heartbeat.
DEFAULT_STALE_TIMEOUT = 600.0


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this host."""
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM  # exists, owned by someone else
    return True


class JournalWorker:
    """One worker on one volley of a journal; see the module docstring."""

    def __init__(
        self,
        store: JournalStore,
        volley_id: str,
        *,
        owner: Owner | None = None,
        stale_timeout: float = DEFAULT_STALE_TIMEOUT,
        claim_batch: int = 16,
        run_sync: RunSync = thread_run_sync,
        spent: Callable[[], Spend] | None = None,
        on_recovered: Callable[[Recovered], None] | None = None,
        on_workers: Callable[[int], None] | None = None,
    ) -> None:
        self.store = store
        self.volley_id = volley_id
        self.owner = owner or Owner.here()
        self.stale_timeout = stale_timeout
        self._batch = max(1, claim_batch)
        self._run_sync = run_sync
        self._spent = spent
        self._recorded = spent() if spent is not None else Spend()
        self.on_recovered = on_recovered or (lambda r: None)
        self.on_workers = on_workers or (lambda n: None)
        self._buffer: list[VolleyTask] = []
        self._held: set[int] = set()  # claimed by this worker, no verdict yet
        self.accepted = 0  # verdicts this worker committed
        self._refill: trio.Event | None = None  # set when the batch being claimed is in
        self._drained = False  # nothing open, nothing held elsewhere: the volley has ended
        self._poll_s = min(stale_timeout / 4, 2.0)
        self._verdicts: GroupCommit[Verdict] = GroupCommit(self._commit, run_sync)

    def follow_spend(self, spent: Callable[[], Spend]) -> None:
        """Record the growth of ``spent()`` (the volley's ledger) from now on."""
        self._spent = spent
        self._recorded = spent()

    # -- TaskSource / ResultSink ----------------------------------------------

    async def claim(self) -> VolleyTask | None:
        """The next open task; waits while other workers hold the rest; None when all ended.

        Most calls take a task from the local buffer: one checkpoint, no
        transaction, no thread.  When the buffer is empty, one caller claims the
        next batch while the others wait for it.  While nothing is open but
        other workers still hold tasks, this polls (every ``stale_timeout / 4``,
        at most 2 s apart): a holder that dies has its tasks reopened by the
        sweep, and this worker takes them over.
        """
        await trio.lowlevel.checkpoint()
        while not self._buffer:
            if self._drained:
                return None
            if self._refill is not None:  # another caller is claiming the next batch
                await self._refill.wait()
                continue
            refill = self._refill = trio.Event()
            try:
                await self._claim_batch()
            finally:
                self._refill = None
                refill.set()
        return self._buffer.pop()

    async def _claim_batch(self) -> None:
        """Fill the buffer with the next batch, or set ``_drained`` when nothing is left."""
        while True:
            specs = await self._run_sync(
                self.store.claim_specs, self.volley_id, self.owner, self._batch
            )
            if specs:
                # No checkpoint between the claim's return and here: a cancelled
                # caller still leaves every claimed task where _finish releases it.
                self._buffer = [VolleyTask.from_dict(spec) for spec in reversed(specs)]
                self._held.update(task.index for task in self._buffer)
                return
            if not await self._run_sync(self.store.held_elsewhere, self.volley_id, self.owner):
                self._drained = True
                return
            await trio.sleep(self._poll_s)

    async def release(self, task: VolleyTask) -> None:
        self._held.discard(task.index)
        await self._run_sync(
            self.store.release, self.volley_id, self.owner, [task.index], self._spend_delta()
        )

    async def accept(self, result: TaskResult) -> None:
        if result.status == "cancelled":
            await self.release(VolleyTask(result.index, result.prompt))
            return
        verdict = Verdict(
            index=result.index,
            status="done" if result.status == "succeeded" else "failed",
            output=result.output,
            error=result.error,
            cost=result.cost,
            usage={
                "duration_sec": round(result.duration_sec, 6),
                "tokens_input": result.tokens_input,
                "tokens_output": result.tokens_output,
                "tokens_cached": result.tokens_cached,
                "retries": result.retries,
            },
            spend=self._spend_delta(result),
        )
        await self._verdicts.write(verdict)
        self._held.discard(result.index)
        self.accepted += 1

    def _commit(self, verdicts: Sequence[Verdict]) -> None:
        self.store.finish(self.volley_id, verdicts)

    def _spend_delta(self, result: TaskResult | None = None) -> Spend:
        """What the volley spent since the last record: the ledger's growth, when known."""
        if self._spent is None:
            if result is None:
                return Spend()
            return Spend(
                result.cost or 0.0, result.retries + 1, result.tokens_input, result.tokens_output
            )
        now = self._spent()
        last, self._recorded = self._recorded, now
        return now - last

    # -- the worker's life -------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[JournalWorker]:
        """Register, recover orphaned claims, heartbeat and sweep while the body runs."""
        await self._run_sync(self.store.register_worker, self.volley_id, self.owner)
        try:
            await self._recover(at_start=True)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._heartbeat_loop)
                nursery.start_soon(self._sweep_loop)
                yield self
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await self._finish()

    async def _finish(self) -> None:
        """Give back every claim still held, record the last spend, retire."""
        leftovers = sorted(self._held | {t.index for t in self._buffer})
        self._held.clear()
        self._buffer.clear()
        await self._run_sync(
            self.store.release, self.volley_id, self.owner, leftovers, self._spend_delta()
        )
        await self._run_sync(self.store.retire_worker, self.owner)

    async def _heartbeat_loop(self) -> None:
        while True:
            await trio.sleep(self.stale_timeout / 4)
            await self._run_sync(self.store.heartbeat, self.owner, self.volley_id)
            live = await self._run_sync(self.store.live_workers, self.volley_id, self.stale_timeout)
            self.on_workers(live)

    async def _sweep_loop(self) -> None:
        while True:
            await trio.sleep(self.stale_timeout / 2)
            await self._recover(at_start=False)

    async def _recover(self, *, at_start: bool) -> None:
        found: list[Recovered] = []
        if at_start:
            found += await self._run_sync(self.store.recover_dead_local, self.volley_id, pid_alive)
        found += await self._run_sync(self.store.recover_stale, self.volley_id, self.stale_timeout)
        for recovered in found:
            self.on_recovered(recovered)
