"""A volley worker's view of the journal: the runner's task source and result sink.

:class:`JournalWorker` implements :class:`rlm.volley.store.TaskSource` and
:class:`~rlm.volley.store.ResultSink` over one volley of a journal:

- ``claim`` takes open tasks in task order, a few per transaction (kept in a
  small buffer, all held under this worker's claim and heartbeat); when tasks
  are taken faster than the journal answers a claim, the next batch is claimed
  in the background before the buffer runs dry, so a fast volley never stops
  for a claim (a slow one claims no earlier than it did); given its
  ``capacity`` (its share of the volley's concurrency), a worker holds only
  what it can run soon, so workers beside it find the rest open;
- ``keep`` queues a verdict and calls back once it is committed, so the runner
  reports a result only when it is durable, while the task's runner worker
  goes on with the next task; verdicts queued meanwhile are committed together
  in one transaction by one committer task (group commit): a fast volley pays
  one transaction, one fsync and one thread hand-off per group, and no task
  waits for an fsync before the next one starts (``accept`` is ``keep`` and
  wait, for callers that want to block); a group's rows are built in the
  store's thread, off the event loop (:mod:`rlm.journal._verdicts`).  A
  verdict kept while no commit is under way is committed at once; one kept
  during a commit goes in the next, which starts when that one ends and no
  sooner than ``group_interval`` after it began.  That is the whole window in
  which a ``kill -9`` loses a verdict whose task was answered (and paid for):
  the commit's own time, and at most ``group_interval`` more;
- ``release`` gives a task back to ``open``.

While :meth:`JournalWorker.running` is open (``keep`` needs it: its committer
runs there), a heartbeat refreshes every claim
this worker holds (every ``stale_timeout / 4``), and a sweep reopens claims of
other workers whose heartbeat is older than ``stale_timeout`` (every
``stale_timeout / 2``, and once at start, when claims of dead processes of this
host are reopened too, as they are whenever it finds nothing open while others
hold tasks).  A task that is slow but whose worker is alive keeps
heartbeating, so it is never reclaimed.  Leaving ``running`` releases whatever
is still claimed and records what the volley spent since the last verdict.

A worker never sends a task whose claim it may have lost (DESIGN invariant 13).
A claim is reopened only after ``stale_timeout`` without a heartbeat, so while
the heartbeat is on time every claim is still this worker's and nothing is
checked.  Once it is late (more than ``stale_timeout / 2`` since the last one
began: the process was paused, the machine slept, the journal was slow), the
gate's :meth:`JournalWorker.before_send` and :meth:`JournalWorker.claim` first
heartbeat, which says which claims the worker still holds: the tasks it lost
are dropped from its buffer, and a request of one of them is refused with
:class:`~rlm.errors.ClaimLost` (the runner ends that task with no verdict).

Blocking store calls run through the injected ``run_sync`` (a trio worker
thread by default; inline in virtual-time tests).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager

import trio

from rlm._config import DEFAULT_STALE_TIMEOUT
from rlm._traffic.budget import Budget
from rlm.errors import ClaimLost, JournalError
from rlm.journal._threads import RunSync, thread_run_sync
from rlm.journal._verdicts import FlatVerdict, flat_verdict, verdict_rows
from rlm.journal.records import Alive, Owner, Recovered, Spend, pid_alive
from rlm.journal.store import JournalStore
from rlm.providers.base import CompletionRequest
from rlm.volley.records import TaskResult, VolleyTask

__all__ = ["JournalWorker", "pid_alive"]

#: The default for ``--stale-timeout``: ten minutes without a heartbeat.


#: The most tasks one claim takes (a very fast volley's claims grow up to this).
_MAX_CLAIM = 4096

#: How often the pace of verdicts is sampled: it is measured over the last one to two of these.
_PACE_WINDOW = 1.0


def _decaying_max(last: float, seen: float) -> float:
    """The larger of ``seen`` and three quarters of ``last``: a duration's recent high."""
    return max(last * 0.75, seen)


def _spend_text(spend: Spend) -> str:
    return (
        f"${spend.cost:.4f}, {spend.calls} requests, {spend.input_tokens} input and "
        f"{spend.output_tokens} output tokens"
    )


def _unwritten_note(tasks: Sequence[int], why: JournalError | None = None) -> str:
    """Which verdicts (their tasks) could not be written, and ``why`` when given."""
    indices = sorted(tasks)
    shown = ", ".join(map(str, indices[:10])) + (", ..." if len(indices) > 10 else "")
    because = f" ({why})" if why is not None else ""
    return (
        f"the verdicts of {len(indices)} task(s) ({shown}) were not written{because} "
        "and not reported"
    )


def _task_of(call_id: str) -> int | None:
    """The task a request belongs to: its call id is ``t<index>`` (``task_call_id``), or
    a child call's ``t<index>.<n>`` under it; None for a call id of no task."""
    head = call_id.split(".", 1)[0]
    return int(head[1:]) if head[:1] == "t" and head[1:].isdigit() else None


def _finish_flat(
    store: JournalStore,
    volley_id: str,
    verdicts: Sequence[FlatVerdict],
    spend: Spend,
    group: tuple[str, int],
) -> int:
    """Build a group's rows and write them (in the store's thread: off the event loop)."""
    return store.finish_rows(volley_id, verdict_rows(verdicts), spend, group)


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
        on_lost: Callable[[list[int], float], None] | None = None,
        group_interval: float = 0.02,
        capacity: Callable[[], int] | None = None,
        alive: Alive = pid_alive,
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
        # Told the tasks whose claims were reopened while this worker's heartbeat was
        # late, and how late it was (seconds).
        self.on_lost = on_lost or (lambda indices, late_s: None)
        # How many tasks this worker runs at once (its share of --max-concurrent), when
        # known: it then holds no more than it can run soon, so other workers find the
        # rest open (see _room).  None: no such cap.
        self.capacity = capacity
        self._alive = alive  # whether a process of this host runs (dead holders' claims)
        self._out = 0  # tasks handed out by claim, not yet handed back (keep, release)
        self._room_freed: trio.Event | None = None  # set when _out drops, while waited for
        # (time, verdicts committed) at the start of the last two pace windows
        self._pace_marks: tuple[tuple[float, int], tuple[float, int]] | None = None
        self._buffer: list[VolleyTask] = []
        self._known: dict[int, VolleyTask] = {}  # the volley's tasks, when given (know)
        self._held: set[int] = set()  # claimed by this worker, no verdict yet
        self.accepted = 0  # verdicts this worker committed (a task another finished first: not)
        self._beaten = 0.0  # when the last heartbeat began (running() sets it)
        self._beating: trio.Event | None = None  # set when the heartbeat under way answers
        self._committing: Sequence[FlatVerdict] = ()  # the verdict group being committed
        self._refill: trio.Event | None = None  # set when the batch being claimed is in
        self._drained = False  # nothing open, nothing held elsewhere: the volley has ended
        self._ahead: trio.Nursery | None = None  # claims ahead run in it, while running
        self._ahead_found_none = False  # the last claim ahead found nothing open
        # How long a claim and a group commit take (a claim may wait for a commit): the
        # longest lately, since a claim that comes back late stops the volley.
        self._claim_s = 0.0
        self._commit_s = 0.0
        self._taken = 0  # tasks handed out by claim
        self._paced_since: float | None = None  # when the pace's window began
        self._paced_from = 0  # _taken when that window began
        self._low_water = 0.0  # claim ahead when the buffer holds fewer tasks
        self._poll_s = min(stale_timeout / 4, 2.0)
        # Verdicts waiting for the committer, and whom to tell once each is durable.
        self._waiting: list[TaskResult] = []
        self._tell: list[Callable[[TaskResult], None]] = []
        self._queued = trio.Event()  # set when _waiting gets its first verdict
        self._all_in = trio.Event()  # set when every task held has its verdict queued
        self._group_s = group_interval
        self._group_since = -float("inf")  # when the last group commit started
        self._committer = False  # running() has started the committer
        self._groups = 0  # verdict groups sent (each numbered: see finish_rows)
        # Groups whose commit failed (on PostgreSQL a commit cut off by a lost connection
        # may have committed): (number, verdicts, spend).
        self._unsure: list[tuple[tuple[str, int], list[FlatVerdict], Spend]] = []

    def follow_spend(self, spent: Callable[[], Spend]) -> None:
        """Record the growth of ``spent()`` (the volley's ledger) from now on."""
        self._spent = spent
        self._recorded = spent()

    def follow_ledger(self, ledger: Budget) -> None:
        """:meth:`follow_spend` of a budget ledger's spending."""

        def spent() -> Spend:
            totals = ledger.spent
            return Spend(totals.cost, totals.calls, totals.input_tokens, totals.output_tokens)

        self.follow_spend(spent)

    # -- TaskSource / ResultSink ----------------------------------------------

    async def claim(self) -> VolleyTask | None:
        """The next open task; waits while other workers hold the rest; None when all ended.

        Most calls take a task from the local buffer: one checkpoint, no
        transaction, no thread.  When the buffer is empty, one caller claims the
        next batch while the others wait for it.  While nothing is open but
        other workers still hold tasks, this polls (every ``stale_timeout / 4``,
        at most 2 s apart): a holder that dies has its tasks reopened by the
        sweep, and this worker takes them over.  With the heartbeat late, a
        heartbeat comes first: a buffered task whose claim was lost is not handed out.
        """
        await trio.lowlevel.checkpoint()
        if self._late():
            await self._confirm()
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
        task = self._buffer.pop()
        self._taken += 1
        self._out += 1
        if (
            len(self._buffer) < self._low_water
            and self._refill is None
            and self._ahead is not None
            and not self._ahead_found_none
            and self._has_room()
        ):
            self._refill = trio.Event()
            self._ahead.start_soon(self._claim_ahead, self._refill)
        return task

    async def _claim_ahead(self, refill: trio.Event) -> None:
        """Claim the next batch behind what the buffer still holds (in the background)."""
        try:
            tasks = await self._claim_next()
            self._ahead_found_none = not tasks
            self._take(tasks)
        finally:
            self._refill = None
            refill.set()

    def know(self, tasks: Iterable[VolleyTask]) -> None:
        """The volley's tasks, as loaded: claims then read only indices from the journal."""
        self._known = {task.index: task for task in tasks}

    async def _claim_next(self) -> list[VolleyTask]:
        """Claim the next batch, sized to the pace tasks are taken at.

        A fast volley takes more tasks per claim (enough for about six claims'
        time, up to ``_MAX_CLAIM``), so claims stay rare and the next one starts
        (in the background: the low-water mark) while the buffer still holds
        about three claims' time of tasks.  A claim's time counts the group commit
        it may queue behind (one store connection runs one transaction at a
        time): measured alone, a claim that waits for a commit comes back after
        the buffer ran dry, and the volley stops for it.  A slow one's pace keeps
        the configured batch and no low-water mark: it claims no earlier than it
        needs to.
        """
        started = trio.current_time()
        elapsed = started - (self._paced_since or started)
        pace = (self._taken - self._paced_from) / elapsed if elapsed > 0 else 0.0
        self._paced_since, self._paced_from = started, self._taken
        size = max(self._batch, min(_MAX_CLAIM, int(pace * 6 * (self._claim_s + self._commit_s))))
        room = self._room()
        if room is not None:
            size = max(1, min(size, room))
        tasks: list[VolleyTask]
        if self._known:
            indices = await self._run_sync(
                self.store.claim_indices, self.volley_id, self.owner, size
            )
            self._held.update(indices)  # before anything can fail: _finish releases them
            known = self._known
            try:
                tasks = [known[index] for index in indices]
            except KeyError as exc:
                raise JournalError(
                    f"volley {self.volley_id} has a task {exc.args[0]} this worker was not given"
                ) from None
        else:
            specs = await self._run_sync(self.store.claim_specs, self.volley_id, self.owner, size)
            self._held.update(int(spec["index"]) for spec in specs)  # as above
            tasks = [VolleyTask.from_dict(spec) for spec in specs]
        self._claim_s = _decaying_max(self._claim_s, trio.current_time() - started)
        # Never below half the batch just claimed: it would be claimed after at once.
        self._low_water = min(pace * 3 * (self._claim_s + self._commit_s), size / 2)
        return tasks

    def _take(self, tasks: list[VolleyTask]) -> None:
        """Buffer claimed tasks (in task order) behind the ones already there (they are
        held, and heartbeated, from the claim's return: ``_claim_next``).

        Called with no checkpoint since the claim returned: a cancelled caller
        still leaves every claimed task where ``_finish`` releases it.
        """
        self._buffer[:0] = reversed(tasks)  # popped from the end

    async def _claim_batch(self) -> None:
        """Fill the buffer with the next batch, or set ``_drained`` when nothing is left.

        Waits first while this worker holds all it can run soon (``_room``).  When
        nothing is open but other workers hold tasks, claims held by dead processes
        of this host are reopened at once (a pool's sibling killed with -9), and
        this one takes them; a holder elsewhere is waited for (stale recovery).
        """
        while True:
            await self._wait_for_room()
            tasks = await self._claim_next()
            if tasks:
                self._ahead_found_none = False
                self._take(tasks)
                return
            if not await self._run_sync(self.store.held_elsewhere, self.volley_id, self.owner):
                self._drained = True
                return
            if await self._reopen_dead_local():
                continue
            await trio.sleep(self._poll_s)

    def _room(self) -> int | None:
        """How many more tasks this worker may hold now (None: no ``capacity``, no cap).

        It holds (handed out without a verdict, or buffered) what it can run soon:
        its share of the concurrency, a small lookahead (a task backing off from a
        429 leaves its permit to the next one), and what it finishes in about ten
        claims' time at the pace verdicts are committed (room for the batch being
        used, six, and the one claimed ahead at three: the cap seldom binds a fast
        volley).
        Only a fast volley's claims grow past its share; a slow one's stay at it, so
        workers that join later find the rest open.  The pace counts verdicts, not
        tasks taken: filling the runner's window at the start is not a fast pace.
        """
        if self.capacity is None:
            return None
        share = max(1, self.capacity())
        soon = self._verdict_pace() * 10 * (self._claim_s + self._commit_s)
        return share + max(2, share // 4) + int(soon) - self._out - len(self._buffer)

    def _verdict_pace(self) -> float:
        """Verdicts committed per second, over the last one to two ``_PACE_WINDOW``s
        (since the first claim, at the start: never more than the true pace)."""
        now = trio.current_time()
        if self._pace_marks is None:
            self._pace_marks = ((now, self.accepted), (now, self.accepted))
        older, last = self._pace_marks
        if now - last[0] >= _PACE_WINDOW:
            older, last = last, (now, self.accepted)
            self._pace_marks = (older, last)
        elapsed = now - older[0]
        return (self.accepted - older[1]) / elapsed if elapsed > 0 else 0.0

    def _has_room(self) -> bool:
        room = self._room()
        return room is None or room > 0

    async def _wait_for_room(self) -> None:
        while (room := self._room()) is not None and room <= 0:
            # Held tasks are running (the buffer is empty): a verdict comes.
            freed = self._room_freed = trio.Event()
            try:
                await freed.wait()
            finally:
                self._room_freed = None

    def _handed_back(self) -> None:
        """A task handed out by ``claim`` came back (a verdict, or released)."""
        if self._out:
            self._out -= 1
        if self._room_freed is not None:  # an Event only while a claim waits for room
            self._room_freed.set()

    async def _reopen_dead_local(self) -> bool:
        """Reopen claims of processes of this host that no longer exist; whether any."""
        found = await self._run_sync(self.store.recover_dead_local, self.volley_id, self._alive)
        for recovered in found:
            self.on_recovered(recovered)
        return bool(found)

    async def release(self, task: VolleyTask) -> None:
        self._handed_back()
        if task.index not in self._held:
            await trio.lowlevel.checkpoint()
            return  # its claim was lost: the task is another worker's now
        self._held.discard(task.index)
        await self._run_sync(
            self.store.release, self.volley_id, self.owner, [task.index], self._spend_delta()
        )

    def keep(self, result: TaskResult, kept: Callable[[TaskResult], None]) -> None:
        """Queue ``result``'s verdict; ``kept(result)`` is called once it is committed.

        Only while :meth:`running` (its committer commits the queue).  A result
        with no verdict (``cancelled``) is not kept: ``release`` its task.
        """
        if not self._committer:
            raise RuntimeError("JournalWorker.keep needs the worker running (see running())")
        if result.status == "cancelled":
            raise ValueError(f"task {result.index} has no verdict: release it, do not keep it")
        # _handed_back, inline (per task, on the event loop).
        if self._out:
            self._out -= 1
        if self._room_freed is not None:
            self._room_freed.set()
        # Only the result and whom to tell wait for the commit: no object per task is
        # made here to outlive it (a verdict waits up to a group interval, long enough to
        # be promoted to older GC generations: each such object brings the next full
        # collection of the whole heap closer).  Its flat verdict is read at commit time.
        self._waiting.append(result)
        self._tell.append(kept)
        if len(self._waiting) == 1:
            self._queued.set()
        if len(self._waiting) >= len(self._held):
            self._all_in.set()

    async def accept(self, result: TaskResult) -> None:
        """:meth:`keep` ``result`` and return once its verdict is committed.

        A ``cancelled`` result has its task released instead.
        """
        if result.status == "cancelled":
            await self.release(VolleyTask(result.index, result.prompt))
            return
        committed = trio.Event()
        self.keep(result, lambda _: committed.set())
        await committed.wait()

    async def _commit_loop(self) -> None:
        """Commit whatever is queued, one group at a time, one transaction at a time."""
        while True:
            await self._queued.wait()
            # Let the group grow while commits come back to back: a commit costs SQLite
            # nearly as much for a few verdicts as for many (each group rewrites the pages
            # its rows share, and fsyncs), so a fast volley commits every
            # ``group_interval`` at most; no later once every task this worker holds has
            # its verdict queued (nothing else is coming).  Short: a verdict not yet
            # committed is one a kill -9 makes the resume pay for again.
            with trio.move_on_at(self._group_since + self._group_s):
                await self._all_in.wait()
            await self._commit_queued()

    async def _commit_queued(self, *, tell: bool = True) -> None:
        """One transaction for every queued verdict, then tell each writer (shielded:
        a verdict taken from the queue is committed even if the worker is cancelled)."""
        with trio.CancelScope(shield=True):
            waiting, tell_all = self._waiting, self._tell
            if not waiting:
                return
            self._waiting, self._tell, self._queued = [], [], trio.Event()
            self._all_in = trio.Event()
            self._group_since = trio.current_time()
            spend = self._spend_delta(waiting)
            self._groups += 1
            group = (self.owner.worker, self._groups)
            # One C call per verdict on the loop; its row is built in the store's thread.
            verdicts: list[FlatVerdict] = list(map(flat_verdict, waiting))
            started = trio.current_time()
            self._committing = verdicts
            try:
                written = await self._run_sync(
                    _finish_flat, self.store, self.volley_id, verdicts, spend, group
                )
            except BaseException:
                # A commit cut off (a lost PostgreSQL connection) may have committed:
                # _finish sends it again as it was, under the same number, so its spend
                # is added once (JournalStore.finish_rows).
                self._unsure.append((group, verdicts, spend))
                raise
            finally:
                self._committing = ()
            self._commit_s = _decaying_max(self._commit_s, trio.current_time() - started)
        self._held.difference_update([v[0] for v in verdicts])
        self.accepted += written
        if tell:
            for result, kept in zip(waiting, tell_all, strict=True):
                kept(result)
        if self._waiting and len(self._waiting) >= len(self._held):
            self._all_in.set()  # what was queued meanwhile is all there is

    def _spend_delta(self, results: Sequence[TaskResult] = ()) -> Spend:
        """What the volley spent since the last record: the ledger's growth when it is
        followed, else what ``results`` (the verdicts being recorded) say."""
        if self._spent is None:
            return Spend(
                sum(r.cost or 0.0 for r in results),
                sum(r.retries + 1 for r in results),
                sum(r.tokens_input for r in results),
                sum(r.tokens_output for r in results),
            )
        now = self._spent()
        last, self._recorded = self._recorded, now
        return now - last

    # -- the worker's life -------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[JournalWorker]:
        """Register, recover orphaned claims, heartbeat and sweep while the body runs."""
        # Register and reopen orphaned claims in one transaction: the volley waits for it.
        # Every claim comes after this (as fresh as the heartbeat that begins here).
        self._beaten = trio.current_time()
        recovered = await self._run_sync(
            self.store.join, self.volley_id, self.owner, self._alive, self.stale_timeout
        )
        try:
            for found in recovered:
                self.on_recovered(found)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._heartbeat_loop)
                nursery.start_soon(self._sweep_loop)
                nursery.start_soon(self._commit_loop)
                self._committer, self._ahead = True, nursery
                try:
                    yield self
                finally:
                    self._committer, self._ahead = False, None
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await self._finish()

    async def _finish(self) -> None:
        """Commit queued verdicts, give back every claim still held, record the last
        spend, retire.  Verdicts still queued (the body was cancelled or failed) are
        committed, but their writers are gone: durable results nobody reported.

        Verdicts are paid for, so a resume must not run them again: a group whose
        commit failed is sent again first, so groups reach the journal in the order
        of their numbers (a retried group's spend is told apart by the last number
        recorded: JournalStore.finish_rows), then what is still queued.
        """
        unwritten: JournalError | None = None
        try:
            await self._commit_unsure()
            await self._commit_queued(tell=False)
        except JournalError as exc:
            unwritten = exc
        finally:
            await self._leave(unwritten)

    async def _commit_unsure(self) -> None:
        """Send again, as they were and in order, the groups whose commit is unknown:
        rows already written are not written again, and a group's spend is added
        once.  A group that fails here stays unsure (see :meth:`_leave`)."""
        while self._unsure:
            group, verdicts, spend = self._unsure[0]
            written = await self._run_sync(
                _finish_flat, self.store, self.volley_id, verdicts, spend, group
            )
            del self._unsure[0]
            self._held.difference_update([v[0] for v in verdicts])
            self.accepted += written

    async def _leave(self, unwritten: JournalError | None) -> None:
        """The worker's end transaction: give back what is still held, record the spend
        not recorded yet, retire.

        Groups whose verdicts could not be written, even sent again (``unwritten``
        says why), were never reported; their tasks go back
        to open (a resume runs them again) and what they cost is recorded here, once.
        What this cannot record either is named in the error, never dropped unsaid.
        """
        leftovers = sorted(self._held | {t.index for t in self._buffer})
        self._held.clear()
        self._buffer.clear()
        unsure, self._unsure = self._unsure, []
        groups = [(group, spend) for group, _, spend in unsure]
        # Verdicts still queued behind an unsure group were never sent: their spend
        # is counted here (in the ledger's growth when it is followed).
        queued, self._waiting, self._tell = self._waiting, [], []
        spend = self._spend_delta(queued)
        unwritten_tasks = [v[0] for _, verdicts, _ in unsure for v in verdicts]
        unwritten_tasks += [r.index for r in queued]
        try:
            await self._run_sync(
                self.store.leave, self.volley_id, self.owner, leftovers, spend, groups
            )
        except JournalError as exc:
            lost = sum((cost for _, cost in groups), spend)
            if lost == Spend() and unwritten is None:
                raise
            said = [str(exc)]
            if unwritten is not None:  # why, unless it is what was just said (a full disk)
                said.append(_unwritten_note(
                    unwritten_tasks, None if str(unwritten) == str(exc) else unwritten
                ))
            if lost != Spend():
                said.append(
                    f"what the volley spent since it was last recorded (up to "
                    f"{_spend_text(lost)}) is not in the journal either, so budgets across "
                    "resumes do not count it"
                )
            raise JournalError("; ".join(said)) from exc
        if unwritten is not None:
            # The cause first: it names the journal and says what to do.
            raise JournalError(
                f"{unwritten}; {_unwritten_note(unwritten_tasks)}: they were given back (a "
                "resume runs them again) and what they cost is recorded"
            ) from unwritten

    async def _heartbeat_loop(self) -> None:
        while True:
            await trio.sleep(self.stale_timeout / 4)
            await self._beat()
            live = await self._run_sync(
                self.store.live_workers, self.volley_id, self.stale_timeout, self._alive
            )
            self.on_workers(live)

    # -- claims that may be lost --------------------------------------------------

    def _late(self) -> bool:
        """Whether the heartbeat is late: a claim may have been reopened meanwhile."""
        return trio.current_time() - self._beaten > self.stale_timeout / 2

    async def before_send(self, request: CompletionRequest) -> None:
        """Raise :class:`~rlm.errors.ClaimLost` if ``request``'s task may be another
        worker's now (the gate asks right before each request goes out).

        Reads nothing while the heartbeat is on time; once it is late, waits for a
        heartbeat that began after that, which says which claims are still held.
        """
        if self._late():
            await self._confirm()
        index = _task_of(request.call_id)
        if index is not None and index not in self._held:
            raise ClaimLost(
                f"volley {self.volley_id} task {index}: not sent: its claim was reopened for "
                "other workers while this worker's heartbeat was late (more than "
                f"--stale-timeout {self.stale_timeout:g} s)"
            )

    async def _confirm(self) -> None:
        """Heartbeat until one that began after the heartbeat went late has answered."""
        while self._late():
            await self._beat()

    async def _beat(self) -> None:
        """Refresh every claim this worker holds and learn which it still holds (one
        transaction); forget the ones it lost.  One at a time: a caller that finds one
        under way waits for it instead."""
        if self._beating is not None:
            await self._beating.wait()
            return
        beating = self._beating = trio.Event()
        began = trio.current_time()
        claimed = set(self._held)
        try:
            held = await self._run_sync(self.store.heartbeat, self.owner, self.volley_id)
        finally:
            self._beating = None
            beating.set()
        late, self._beaten = began - self._beaten, max(self._beaten, began)
        # A claim that came back without a verdict of this worker pending (queued, or in
        # a group being committed meanwhile, whose rows left it in progress no more).
        gone = claimed.difference(held).intersection(self._held)
        if gone:
            gone.difference_update(v[0] for v in self._committing)
            gone.difference_update(r.index for r in self._waiting)
        if gone:
            self._forget(gone, late)

    def _forget(self, lost: set[int], late: float) -> None:
        """Drop claims this worker lost: not held, not in the buffer (never handed out)."""
        self._held.difference_update(lost)
        self._buffer = [task for task in self._buffer if task.index not in lost]
        if self._waiting and len(self._waiting) >= len(self._held):
            self._all_in.set()  # what is queued is all there is
        self.on_lost(sorted(lost), late)

    async def _sweep_loop(self) -> None:
        while True:
            await trio.sleep(self.stale_timeout / 2)
            await self._recover()

    async def _recover(self) -> None:
        found = await self._run_sync(self.store.recover_stale, self.volley_id, self.stale_timeout)
        for recovered in found:
            self.on_recovered(recovered)
