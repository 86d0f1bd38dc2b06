"""The durable volley: created once in a journal, worked by any number of workers, resumed
after any stop.

:class:`JournaledVolley` is one journal (a SQLite file, or ``postgresql://...`` for
workers on several machines) and what can be done with a volley in it:
:meth:`~JournaledVolley.create` records the tasks, the shared context and the
settings (never the key); :meth:`~JournaledVolley.load` reads a volley back
(``last``: the newest); :meth:`~JournaledVolley.work` runs this process's worker on
it until no task is left.  A worker claims tasks, sends them through its gate,
and commits each verdict before it is reported (DESIGN invariant 9); it never
sends a task whose claim it may have lost (invariant 13); the volley's limits are
shared among the live workers, each a ceiling the gate's adaptive control moves
within (invariant 11).  ``rlm volley``, ``rlm volley create|work`` and
``RLM(...).volley(..., journal=...)`` / ``resume_volley`` / ``work_volley`` are
this object.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from rlm._config import DEFAULT_STALE_TIMEOUT, RunConfig, VolleyOptions
from rlm._trace import TraceWriter
from rlm.errors import JournalError, UnknownVolleyError, UsageError
from rlm.journal import JournalStore, Recovered, Spend, default_journal_path, open_store
from rlm.journal.batches import batches
from rlm.journal.volleys import (
    StoredVolley,
    load_volley,
    record_volley,
    reopen_failed,
    stored_settings,
    this_origin,
)
from rlm.journal.worker import JournalWorker
from rlm.providers.fixture import FixtureOptions
from rlm.volley.batch import BatchVolley
from rlm.volley.engine import Volley, VolleyRun
from rlm.volley.events import StaleRecovery, task_call_id
from rlm.volley.readback import stored_result, with_other_workers
from rlm.volley.records import VolleyResult, VolleyTask, new_volley_id

__all__ = ["JournalHooks", "JournaledVolley", "open_journal", "stale_recovery_event"]


def _ignore(*_: object) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class JournalHooks:
    """What a journaled volley tells its caller as it works (the command line prints them).

    ``recovered``: claims of dead or silent workers this worker reopened, gathered
    and told at most once a second (a claim of a thousand tasks is a thousand
    recoveries); ``lost``: this worker's own claims that others reopened while its
    heartbeat was late (the task numbers, and how late it was in seconds);
    ``waiting``: a write waits on another process's lock (a line of text).
    """

    recovered: Callable[[list[Recovered]], None] = _ignore
    lost: Callable[[str, list[int], float], None] = _ignore
    waiting: Callable[[str], None] = _ignore
    #: ``--retry-live``: the volley id, and how many tasks the batches failed that now run
    #: again as live requests.
    retrying_live: Callable[[str, int], None] = _ignore


def open_journal(
    path: str | None, *, existing: bool = False, on_wait: Callable[[str], None] | None = None
) -> JournalStore:
    """The journal ``path`` names (the default one, in the state directory, for None).

    With ``existing`` (reading a volley back: list, show, work, resume) a journal file
    that is not there is an error: a mistyped path must not quietly become a new,
    empty journal.
    """
    if existing and (path is None or "://" not in path):
        where = default_journal_path() if path is None else Path(path).expanduser()
        if not where.exists():
            raise JournalError(
                f"no journal at {where}: check --journal (or RLM_JOURNAL); a volley run or "
                "`rlm volley create` makes one"
            )
    return open_store(path, on_wait=on_wait)


class JournaledVolley:
    """One journal, and the volleys in it (see the module docstring).  Close it (or use
    ``with``) when done."""

    def __init__(
        self,
        journal: str | None = None,
        *,
        existing: bool = False,
        stale_timeout: float = DEFAULT_STALE_TIMEOUT,
        hooks: JournalHooks | None = None,
    ) -> None:
        self.hooks = hooks or JournalHooks()
        self.journal = journal
        self.stale_timeout = stale_timeout
        self.store = open_journal(journal, existing=existing, on_wait=self.hooks.waiting)
        self.volley: Volley | None = None  # the one this process works on, while it does
        self.batch: BatchVolley | None = None  # the same, sent through a batch service
        self.worker: JournalWorker | None = None
        self._recoveries: list[Recovered] = []  # not yet told (see _tell_recoveries)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> JournaledVolley:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the record -------------------------------------------------------------------

    def create(
        self,
        tasks: Iterable[VolleyTask],
        context: Sequence[str],
        config: RunConfig,
        options: VolleyOptions,
        *,
        fixture: FixtureOptions | None = None,
        about: Mapping[str, Any] | None = None,
    ) -> str:
        """Record a volley (nothing is sent) and return its id; ``tasks`` are taken one at a
        time (a :class:`~rlm.volley.tasks.TaskStream` is never held whole).  ``about`` is kept
        with its settings for whoever made it (an eval keeps what it is there)."""
        volley_id = new_volley_id()
        settings = {**(about or {}), **stored_settings(config, options.stored(), fixture)}
        record_volley(self.store, volley_id, settings, tasks, context)
        return volley_id

    def load(self, ref: str) -> StoredVolley:
        """The volley ``ref`` names (an id, or ``last``), as the journal holds it; nothing
        in the journal changes."""
        return load_volley(self.store, self.resolve(ref), rerun_failed=False)

    def resolve(self, ref: str) -> str:
        """The id of the volley ``ref`` names: an id, or ``last``, the newest volley this
        user started from this directory (another process's volley in a shared journal is
        named by its id); UnknownVolleyError (a usage error) saying what to do when there
        is none."""
        origin = this_origin()
        try:
            return self.store.resolve(ref, origin=origin)
        except UnknownVolleyError as exc:
            if ref == "last":
                message = self._no_last(origin)
            else:
                where = shlex.quote(self.store.where)
                given = "" if self.journal is None else f" --journal {where}"
                message = (f"no volley {ref!r} in journal {self.store.where}; list its "
                           f"volleys with `rlm volley list{given}`")
            raise UnknownVolleyError(message, ref=exc.ref, journal=exc.journal) from None

    def _no_last(self, origin: dict[str, str]) -> str:
        """Why there is no ``last`` volley here, naming the journal's newest if any."""
        try:
            newest = self.store.volley(self.store.resolve("last"))
        except UnknownVolleyError:
            return (f"journal {self.store.where} holds no volley yet; a volley run or "
                    "`rlm volley create` makes one")
        made = newest.settings.get("origin") or {}
        where = f", started from {made['cwd']}" if "cwd" in made else ""
        return (f"no volley in journal {self.store.where} was started by {origin['user']} "
                f"from {origin['cwd']}; its newest is {newest.volley_id} ({newest.total} "
                f"task{'' if newest.total == 1 else 's'}{where}): name it by its id")

    def reopen_failed(self, stored: StoredVolley) -> StoredVolley:
        """Reopen ``stored``'s failed tasks, so that working on it runs them again."""
        return reopen_failed(self.store, stored)

    # -- working ----------------------------------------------------------------------

    async def work(
        self,
        stored: StoredVolley,
        config: RunConfig,
        options: VolleyOptions,
        *,
        main: Callable[[VolleyRun], Awaitable[VolleyResult]] | None = None,
        **engine: Any,
    ) -> VolleyResult:
        """Work on ``stored`` with ``config`` until no task is left, or a stop, beside any
        other worker; return the whole volley as the journal holds it then.

        ``engine`` are :class:`~rlm.volley.engine.Volley`'s own keyword arguments
        (providers, sinks, trace path, on_result, stream, tools, sandboxes).  ``main``
        runs the wired volley (default: its ``run``): the command line runs it beside
        its signal handling and displays.  Its ledger starts with what earlier workers
        spent; the journal records what this one spends.

        A volley sent through the provider's batch service (``batch_api``, or batches
        of it not collected yet) is worked by :class:`~rlm.volley.batch.BatchVolley`
        (``batch_service`` in ``engine`` replaces the service ``config`` names); with
        ``retry_live``, the tasks its batches failed then run here as live requests.
        """
        if options.batch_api or await trio.to_thread.run_sync(
            _batches_left, self.store, stored.volley_id
        ):
            return await self._work_batches(stored, config, options, main, engine)
        return await self._work_live(stored, config, options, main, engine)

    async def _work_batches(
        self,
        stored: StoredVolley,
        config: RunConfig,
        options: VolleyOptions,
        main: Callable[[VolleyRun], Awaitable[VolleyResult]] | None,
        engine: dict[str, Any],
    ) -> VolleyResult:
        """The volley through its provider batches, then (``retry_live``) live what they
        failed.  Both parts write one trace."""
        engine = dict(engine)
        trace_path = engine.pop("trace_path", None)
        trace = TraceWriter(trace_path, content=config.trace_content) if trace_path else None
        sinks = [*engine.pop("sinks", ()), *([trace] if trace is not None else [])]
        try:
            run = self.batch = BatchVolley(
                self.store, stored, config, options, sinks=sinks,
                on_result=engine.get("on_result"), report_failed=not options.retry_live,
                service=engine.pop("batch_service", None),
                keep_results=engine.get("keep_results", True),
            )
            result = await (main or _run)(run)
            failed = result.summary.failed
            if not options.retry_live or result.status not in ("succeeded", "failed") or \
                    not failed:
                return result
            again = self.reopen_failed(self.load(stored.volley_id))
            self.hooks.retrying_live(stored.volley_id, failed)
            live = dataclasses.replace(options, batch_api=False, retry_live=False)
            retried = await self._work_live(again, config, live, main,
                                            {**engine, "sinks": sinks})
            # The whole volley's: its batches, and the time both parts took.
            read = await trio.to_thread.run_sync(stored_result, self.store, stored.volley_id)
            summary = dataclasses.replace(
                retried.summary, batch_tasks=read.summary.batch_tasks,
                duration_sec=result.summary.duration_sec + retried.summary.duration_sec,
            )
            return dataclasses.replace(retried, summary=summary, batches=read.batches)
        finally:
            if trace is not None:
                trace.close()

    async def _work_live(
        self,
        stored: StoredVolley,
        config: RunConfig,
        options: VolleyOptions,
        main: Callable[[VolleyRun], Awaitable[VolleyResult]] | None,
        engine: dict[str, Any],
    ) -> VolleyResult:
        volley_id = stored.volley_id
        run: Volley | None = None

        def share(workers: int) -> None:
            if run is not None:
                run.share_limits(workers)

        worker = JournalWorker(
            self.store, volley_id, stale_timeout=self.stale_timeout,
            on_recovered=lambda found: self._recovered(run, found),
            on_workers=share,
            on_lost=lambda tasks, late: self.hooks.lost(volley_id, tasks, late),
            # It holds only what its share runs soon, so other workers find the rest open.
            capacity=lambda: run.concurrency if run is not None else 1,
        )
        # (Its claims read each task from the journal: the tasks are never all held.)
        run = Volley(config, stored.tasks, context=stored.context, options=options,
                     volley_id=volley_id, source=worker, sink=worker, earlier=stored.earlier,
                     before_send=worker.before_send, **engine)
        _preload(run, stored.spent)
        worker.follow_ledger(run.ledger)
        self.volley, self.worker = run, worker
        try:
            async with worker.running(), trio.open_nursery() as nursery:
                await self._count_live(run, volley_id)  # the share before a claim
                nursery.start_soon(self._share_limits, run, volley_id)
                try:
                    result = await (main or _run)(run)
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            self._tell_recoveries()
        return with_other_workers(self.store, result)

    async def cancel(
        self,
        stored: StoredVolley,
        config: RunConfig,
        options: VolleyOptions,
        *,
        main: Callable[[VolleyRun], Awaitable[VolleyResult]] | None = None,
        **engine: Any,
    ) -> VolleyResult:
        """Cancel ``stored``'s provider batches (``rlm volley cancel``): each one at the
        provider is cancelled, what it answered before is kept, and every task still
        without a verdict fails as cancelled (a resume runs them again).  ``engine``:
        ``sinks``, ``on_result``, ``batch_service``."""
        left = await trio.to_thread.run_sync(_batches_left, self.store, stored.volley_id)
        if not (options.batch_api or left):
            raise UsageError(
                f"volley {stored.volley_id} was not sent through a provider's batch service "
                "(--batch-api): it has no batches to cancel; stop its workers instead "
                "(Ctrl-C, or SIGTERM)"
            )
        run = self.batch = BatchVolley(
            self.store, stored, config, options, sinks=engine.get("sinks", ()),
            on_result=engine.get("on_result"), service=engine.get("batch_service"),
            cancel=True,
        )
        return await (main or _run)(run)

    def interrupt(self) -> None:
        """Stop the volley this process works on: in-flight tasks go back to the journal
        (a batch volley's batches keep running at the provider)."""
        if self.volley is not None:
            self.volley.interrupt()
        if self.batch is not None:
            self.batch.interrupt()

    def kill_sandboxes(self) -> None:
        """Kill every sandbox of the ``rlm`` tasks now (a second Ctrl-C)."""
        if self.volley is not None:
            self.volley.kill_sandboxes()

    def _recovered(self, run: Volley | None, found: Recovered) -> None:
        self._recoveries.append(found)
        if run is not None:
            run.record(stale_recovery_event(found))

    def _tell_recoveries(self) -> None:
        found, self._recoveries = self._recoveries, []
        if found:
            self.hooks.recovered(found)

    async def _share_limits(self, run: Volley, volley_id: str) -> None:
        """Keep this worker's share of the volley's limits current (and tell what stale
        recovery reopened meanwhile).

        Workers register when they start, so counting the live ones every second
        (at most a quarter of the stale timeout apart) gives a worker its share
        before its first request and adjusts it as workers come and go; the
        heartbeat alone would tell only every quarter of the stale timeout.
        """
        interval = min(1.0, self.stale_timeout / 4)
        while True:
            self._tell_recoveries()
            await trio.sleep(interval)
            await self._count_live(run, volley_id)

    async def _count_live(self, run: Volley, volley_id: str) -> None:
        live = await trio.to_thread.run_sync(
            self.store.live_workers, volley_id, self.stale_timeout
        )
        run.share_limits(live)


async def _run(run: VolleyRun) -> VolleyResult:
    return await run.run()


def _batches_left(store: JournalStore, volley_id: str) -> bool:
    """Whether the volley has provider batches not collected yet (sent by a process that
    stopped): they are collected before anything else runs."""
    return any(row.stage != "collected" for row in batches(store, volley_id))


def _preload(run: Volley, spent: Spend) -> None:
    run.ledger.preload(spent.calls, spent.input_tokens, spent.output_tokens, spent.cost)


def stale_recovery_event(recovered: Recovered) -> StaleRecovery:
    """The run's event for one recovery (the journal_log row and the stderr line say the same)."""
    return StaleRecovery(
        call_id=task_call_id(recovered.index),
        volley_id=recovered.volley_id,
        index=recovered.index,
        owner=None if recovered.owner is None else str(recovered.owner),
        idle_s=round(recovered.idle_s, 3),
        reason=recovered.reason,
    )

