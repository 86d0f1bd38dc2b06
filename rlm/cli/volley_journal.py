"""The journal side of ``rlm volley``: create, work, list, show, and --resume.

Plain ``rlm volley ...`` creates a volley in the journal, works on it and
shows it, in one process; these commands split that up so that several
processes (``work --pool N``, or ``work`` on several machines sharing a
PostgreSQL journal) run one volley:

    rlm volley create -f tasks.txt --model m      # prints the volley id
    rlm volley work v1a2b3c4d5e6 --pool 4         # four workers share the journal
    rlm volley show v1a2b3c4d5e6                  # every task's result, in task order
    rlm volley list

A result is committed to the journal before it is printed anywhere.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import shlex
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import trio
from rich.console import Console

from rlm._config import DEFAULT_STALE_TIMEOUT, RunConfig, VolleyOptions
from rlm._settings import Layer, api_key_from_environment, settings_of
from rlm.cli._flags import model_or_blank
from rlm.cli._progress import stderr_console
from rlm.cli._settings_cli import command_settings, settings_options
from rlm.cli._stale_lines import lost_line, recovery_lines
from rlm.cli._terminal import plural, raw_option, safe_text
from rlm.errors import JournalError, RLMError, UnknownVolleyError
from rlm.journal import (
    JournalStore,
    Recovered,
    Spend,
    TaskRow,
    default_journal_path,
    open_store,
)
from rlm.journal.records import Alive, local_host
from rlm.journal.volleys import (
    StoredVolley,
    load_volley,
    record_volley,
    result_from_row,
    stored_fixture,
    stored_layer,
    stored_settings,
)
from rlm.journal.worker import JournalWorker, pid_alive
from rlm.providers.base import Lane, Provider
from rlm.providers.fixture import FixtureOptions, FixtureProvider
from rlm.volley.engine import Volley
from rlm.volley.events import StaleRecovery, task_call_id
from rlm.volley.output import OrderedWriter, heartbeat_age
from rlm.volley.records import TaskResult, VolleyResult, VolleyStatus, VolleySummary, VolleyTask

__all__ = [
    "JournalFlags",
    "JournalSession",
    "fixture_providers",
    "journal_flags",
    "list_cmd",
    "live_heartbeat_age",
    "open_journal",
    "pool_argv",
    "require_key",
    "resumed_fixture",
    "show_cmd",
    "stale_recovery_event",
    "stored_result",
    "volley_settings",
    "with_other_workers",
]

def journal_flags(command: str, resume: str | None = None, skip_failed: bool = False
                  ) -> JournalFlags:
    """Where the journal is and how long a worker may be silent, as ``command`` resolves
    them (flag > RLM_JOURNAL > profile > config file > default)."""
    options = VolleyOptions(**command_settings(("volley",), command).scope(
        settings_of(VolleyOptions))).validate()
    return JournalFlags(options.journal, resume, skip_failed, options.stale_timeout)


def volley_settings(
    command: str, *, stored: Mapping[str, Any] | None = None, file_cap: int | None = None
) -> tuple[RunConfig, VolleyOptions]:
    """The run settings and volley options of ``command``: a new volley's (a task file's
    ``max_concurrent`` between the environment and the profile), or, with ``stored``, a
    volley read back from its journal (flags and the profile on top of what it stored).

    The key comes from this process's environment; a volley reserves no root permits.
    """
    layers: list[Layer] = [] if file_cap is None else [({"max_concurrent": file_cap},
                                                        "the task file")]
    resolved = command_settings(
        ("run", "volley"), command, before_profile=layers,
        stored=None if stored is None else (stored_layer(stored), "stored with the volley"),
    )
    run = resolved.scope(settings_of(RunConfig))
    if resolved.sources["model"] == "default":
        run["model"] = model_or_blank(run["provider"], None)
    run["root_permits"] = 0
    config = RunConfig(**run, api_key=api_key_from_environment(run["provider"]))
    options = VolleyOptions(**resolved.scope(settings_of(VolleyOptions)))
    # No model, a bad URL: said before anything runs or is stored.
    return config.validate().validate_endpoint(), options.validate()


@dataclass(frozen=True)
class JournalFlags:
    path: str | None = None
    resume: str | None = None
    skip_failed: bool = False
    stale_timeout: float = DEFAULT_STALE_TIMEOUT


def open_journal(path: str | None, *, existing: bool = False) -> JournalStore:
    """The journal ``path`` names (the default one for None).

    With ``existing`` (commands that read a volley back: list, show, work,
    --resume) a journal file that is not there is an error: a mistyped
    --journal must not quietly become a new, empty journal.
    """
    if existing and (path is None or "://" not in path):
        where = default_journal_path() if path is None else Path(path).expanduser()
        if not where.exists():
            raise JournalError(
                f"no journal at {where}: check --journal (or RLM_JOURNAL); a volley run or "
                "`rlm volley create` makes one"
            )
    return open_store(path, on_wait=_say_waiting)


def _say_waiting(message: str) -> None:
    click.echo(f"note: {message}", err=True)


def resolve_volley(store: JournalStore, ref: str, journal_path: str | None) -> str:
    """The volley id ``ref`` names (an id or ``last``); UnknownVolleyError (a usage error,
    exit 2, saying how to list the volleys) when the journal has none; a journal that
    cannot be read stays a JournalError (exit 1)."""
    try:
        return store.resolve(ref)
    except UnknownVolleyError as exc:
        if ref == "last":
            message = (
                f"journal {store.where} holds no volley yet; a volley run or "
                "`rlm volley create` makes one"
            )
        else:
            where = "" if journal_path is None else f" --journal {shlex.quote(store.where)}"
            message = (
                f"no volley {ref!r} in journal {store.where}; list its volleys with "
                f"`rlm volley list{where}`"
            )
        raise UnknownVolleyError(message, ref=exc.ref, journal=exc.journal) from None


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


def _fail(exc: RLMError) -> None:
    click.echo(f"Error: {exc}", err=True)
    sys.exit(exc.exit_code)


@click.command("list")
@click.option(
    "--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@settings_options("volley list")
def list_cmd(output_format: str) -> None:
    """List the journal's volleys, newest first: tasks done/failed/open and cost so far."""
    try:
        journal_path = journal_flags("volley list").path
        if journal_path is None and not default_journal_path().exists():
            rows = []  # nothing has made the default journal yet
        else:
            with closing(open_journal(journal_path, existing=True)) as store:
                rows = store.volleys()
    except RLMError as exc:
        _fail(exc)
    items: list[dict[str, Any]] = [
        {
            "volley_id": row.volley_id,
            "created": _iso(row.created_at),
            "tasks": row.total,
            "done": row.counts["done"],
            "failed": row.counts["failed"],
            "open": row.counts["open"],
            "in_progress": row.counts["in_progress"],
            "cost": round(row.spent.cost, 8),
            "llm_calls": row.spent.calls,
        }
        for row in rows
    ]
    if output_format == "json":
        click.echo(json.dumps(items, ensure_ascii=False))
        return
    if not items:
        click.echo("no volleys yet", err=True)
    for item in items:
        click.echo(
            f"{item['volley_id']}  {item['created']}  {plural(item['tasks'], 'task')}: "
            f"{item['done']} done, {item['failed']} failed, "
            f"{item['open'] + item['in_progress']} open  ${item['cost']:.4f}"
        )


@click.command("show")
@click.argument("volley_ref", metavar="ID|last")
@click.option(
    "--output-format",
    type=click.Choice(["text", "json", "jsonl"]),
    default="text",
    show_default=True,
)
@raw_option
@settings_options("volley show")
def show_cmd(volley_ref: str, output_format: str, raw: bool) -> None:
    """Print volley ID (or the latest) from the journal, every task in task order."""
    try:
        journal_path = journal_flags("volley show").path
        with closing(open_journal(journal_path, existing=True)) as store:
            result = stored_result(store, volley_ref, journal_path)
    except RLMError as exc:
        _fail(exc)
    writer = OrderedWriter(output_format, len(result.tasks), click.echo,  # type: ignore[arg-type]
                           clean=str if raw else safe_text)
    writer.finish(result)


def stored_result(
    store: JournalStore, ref: str, journal_path: str | None = None
) -> VolleyResult:
    """The volley as the journal has it, in the ``--output-format json`` shape."""
    volley_id = resolve_volley(store, ref, journal_path)
    row = store.volley(volley_id)
    rows = store.tasks(volley_id)
    tasks: list[TaskResult] = []
    now = store.now()
    for task in rows:
        done = result_from_row(task)
        if done is None:
            waiting = "not started"
            if task.status == "in_progress":
                waiting = f"in progress ({_claim_note(task, now)})"
            done = TaskResult(
                index=task.index,
                prompt=str(task.spec.get("prompt", "")),
                status="cancelled",
                error=waiting,
            )
        tasks.append(done)
    status: VolleyStatus
    age: float | None = None
    if row.counts["open"] or row.counts["in_progress"]:
        age = live_heartbeat_age(store, rows)
        if age is not None:
            status = "running"
        elif all(t.status == "open" and not t.attempts for t in rows):
            status = "created"  # not "interrupted": nothing ever ran
        else:
            status = "interrupted"
    else:
        status = "failed" if row.counts["failed"] else "succeeded"
    started = [t.started_at for t in rows if t.started_at is not None]
    finished = [t.finished_at for t in rows if t.finished_at is not None]
    summary = VolleySummary(
        total_tasks=len(tasks),
        succeeded=sum(1 for t in tasks if t.status == "succeeded"),
        failed=sum(1 for t in tasks if t.status == "failed"),
        cancelled=sum(1 for t in tasks if t.status == "cancelled"),
        duration_sec=max(finished) - min(started) if started and finished else 0.0,
        tokens_input=row.spent.input_tokens,
        tokens_output=row.spent.output_tokens,
        tokens_cached=sum(t.tokens_cached for t in tasks),
        total_cost=row.spent.cost,
        max_concurrent_used=0,
        total_retries=sum(t.retries for t in tasks),
        rate_limited=0,
    )
    return VolleyResult(volley_id=volley_id, status=status, summary=summary, tasks=tuple(tasks),
                        heartbeat_age_sec=None if age is None else round(age, 3),
                        read_back=True)


def _claim_note(task: TaskRow, now: float) -> str:
    """Who holds an in-progress task, and how long ago it last heartbeat."""
    held = f"held by {task.claimed_by}" if task.claimed_by is not None else "no holder"
    if task.heartbeat_at is None:
        return held
    return f"heartbeat {heartbeat_age(max(0.0, now - task.heartbeat_at))} ago, {held}"


def live_heartbeat_age(
    store: JournalStore, rows: Sequence[TaskRow], alive: Alive = pid_alive
) -> float | None:
    """Seconds since the youngest heartbeat of a live worker's claim on the volley; None
    when no live worker (in any process) holds a task of it.  A claim is live when its
    heartbeat is younger than the default stale timeout and its process, when it is on
    this host, still runs (the same process: its start time, when recorded, matches).
    (The workers table cannot say "none": ``live_workers`` counts at least one.)"""
    now = store.now()
    since = now - DEFAULT_STALE_TIMEOUT
    here = local_host()
    youngest: float | None = None
    for task in rows:
        if task.status != "in_progress" or task.heartbeat_at is None:
            continue
        owner = task.claimed_by
        if task.heartbeat_at >= since and not (
            owner is not None and owner.host == here and not alive(owner.pid, owner.started)
        ):
            youngest = task.heartbeat_at if youngest is None else max(youngest, task.heartbeat_at)
    return None if youngest is None else max(0.0, now - youngest)


def with_other_workers(store: JournalStore, result: VolleyResult) -> VolleyResult:
    """``result`` with the verdicts other workers gave meanwhile (a ``work`` process
    running beside a resume): the whole volley, as the journal has it now.

    A task this process did not run and the journal holds a verdict for is shown
    with that verdict instead of "not started"; when that leaves no task
    without a verdict, a volley that was not stopped is succeeded or failed.
    """
    missing = {t.index for t in result.tasks if t.status == "cancelled"}
    if not missing:
        return result
    found = {
        done.index: done
        for done in map(result_from_row, store.tasks(result.volley_id))
        if done is not None and done.index in missing
    }
    if not found:
        return result
    tasks = tuple(found.get(t.index, t) for t in result.tasks)
    status = result.status
    if status in ("succeeded", "failed") and all(t.status != "cancelled" for t in tasks):
        status = "succeeded" if all(t.status == "succeeded" for t in tasks) else "failed"
    summary = dataclasses.replace(
        result.summary,
        succeeded=sum(1 for t in tasks if t.status == "succeeded"),
        failed=sum(1 for t in tasks if t.status == "failed"),
        cancelled=sum(1 for t in tasks if t.status == "cancelled"),
    )
    return dataclasses.replace(result, status=status, summary=summary, tasks=tasks)


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="seconds")


#: The flags whose value may hold a credential (a base URL's user:password or
#: ``?api_key=``, a postgresql:// journal's password), and the variables that carry
#: them to a pool's siblings instead.  A command line is readable by every process
#: on the machine (/proc/PID/cmdline); an environment only by its own user, and a
#: sandbox gets none of it: the API key reaches the siblings the same way.
_SECRET_FLAGS = {"--base-url": "RLM_BASE_URL", "--journal": "RLM_JOURNAL"}


def pool_argv(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """This worker's command line without ``--pool N`` and without the flags that may
    hold credentials, to start its siblings with; and the environment variables that
    carry those flags' values to them (as the command line would: a flag wins over
    the same setting in the environment, and the last of a repeated flag wins)."""
    out: list[str] = []
    env: dict[str, str] = {}
    args = iter(argv)
    for arg in args:
        if arg == "--":  # the rest are arguments, never flags
            out.extend(["--", *args])
            break
        name, given, value = arg.partition("=")
        if name == "--pool":
            if not given:
                next(args, None)
        elif name in _SECRET_FLAGS:
            env[_SECRET_FLAGS[name]] = value if given else next(args, "")
        else:
            out.append(arg)
    return out, env


def require_key(config: RunConfig) -> None:
    """A hosted API and no key: stop before anything is sent (exit 4), as `rlm run` does.

    Without it every task would send its request and fail on its own (a 401, or
    no network), instead of one line naming the variables to set.
    """
    if config.api_key or config.provider == "fixture":
        return
    from rlm.providers.keys import missing_key_message  # httpx: not for fixture volleys

    problem = missing_key_message(config)
    if problem:
        click.echo(f"Error: {problem}", err=True)
        sys.exit(4)


class JournalSession:
    """The journal of one ``rlm volley`` process: create or load a volley, then work on it."""

    def __init__(
        self, flags: JournalFlags, console: Console | None = None, *, existing: bool = False
    ) -> None:
        self.flags = flags
        self.store = open_journal(flags.path, existing=existing)
        self.console = console or stderr_console()
        self._recoveries: list[Recovered] = []  # not yet on stderr (see _say_recoveries)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> JournalSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create(
        self,
        volley_id: str,
        config: RunConfig,
        options: VolleyOptions,
        tasks: Sequence[VolleyTask],
        context: Sequence[str],
        fixture: FixtureOptions | None = None,
    ) -> None:
        record_volley(self.store, volley_id, stored_settings(config, options.stored(), fixture),
                      tasks, context)

    def load(self, ref: str, *, rerun_failed: bool) -> StoredVolley:
        volley_id = resolve_volley(self.store, ref, self.flags.path)
        return load_volley(self.store, volley_id, rerun_failed=rerun_failed)

    def worker(self, volley_id: str) -> JournalWorker:
        return JournalWorker(
            self.store,
            volley_id,
            stale_timeout=self.flags.stale_timeout,
            on_recovered=self._recovered,
            on_lost=lambda indices, late_s: self.console.print(
                lost_line(volley_id, indices, late_s), markup=False, highlight=False,
                soft_wrap=True,
            ),
        )

    def _recovered(self, recovered: Recovered) -> None:
        self._recoveries.append(recovered)  # a claim of many tasks is reopened task by task

    def _say_recoveries(self) -> None:
        """Print what was reopened since the last call: one line per holder, not per task."""
        found, self._recoveries = self._recoveries, []
        for line in recovery_lines(found):
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    async def work(
        self,
        run: Volley,
        worker: JournalWorker,
        main: Callable[[Volley], Awaitable[VolleyResult]],
        spent_before: Spend | None = None,
    ) -> VolleyResult:
        """Run ``run`` (built with ``worker`` as its source and sink) under the journal.

        The volley's ledger starts with what earlier attempts spent, the journal
        records what this one spends, and limits are shared with live workers.
        """
        worker.know(run.tasks)
        ledger = run.ledger
        spent_before = spent_before or Spend()
        ledger.preload(
            spent_before.calls, spent_before.input_tokens, spent_before.output_tokens,
            spent_before.cost,
        )
        worker.follow_ledger(ledger)
        worker.on_workers = run.share_limits
        worker.capacity = lambda: run.concurrency  # so it holds only what its share runs soon
        printed = worker.on_recovered

        def recovered(found: Recovered) -> None:
            printed(found)
            run.record(stale_recovery_event(found))

        worker.on_recovered = recovered
        try:
            async with worker.running(), trio.open_nursery() as nursery:
                await self._count_live(run, worker.volley_id)  # the share before a claim
                nursery.start_soon(self._share_limits, run, worker.volley_id)
                try:
                    return await main(run)
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            self._say_recoveries()

    async def _share_limits(self, run: Volley, volley_id: str) -> None:
        """Keep this worker's share of the per-journal limits current (and say what
        stale recovery reopened meanwhile).

        Workers register when they start, so counting the live ones every second
        (at most a quarter of --stale-timeout apart) gives a worker its share
        before its first request and adjusts it as workers come and go; the
        heartbeat alone would tell only every quarter of --stale-timeout (2.5
        minutes by default), and until then every worker would use the whole limit.
        """
        interval = min(1.0, self.flags.stale_timeout / 4)
        while True:
            self._say_recoveries()  # recoveries are said within the same second
            await trio.sleep(interval)
            await self._count_live(run, volley_id)

    async def _count_live(self, run: Volley, volley_id: str) -> None:
        live = await trio.to_thread.run_sync(
            self.store.live_workers, volley_id, self.flags.stale_timeout
        )
        run.share_limits(live)


def fixture_providers(
    config: RunConfig, fixture: FixtureOptions | None
) -> dict[Lane, Provider] | None:
    """The fixture model at the volley's pace, when it is the volley's provider (None:
    the providers ``config`` names are opened as usual)."""
    if config.provider != "fixture":
        return None
    model = FixtureProvider.paced(fixture)
    return {"root": model, "sub": model}


def resumed_fixture(stored: Mapping[str, Any], latency: float | None) -> FixtureOptions | None:
    """The fixture's stored pace, with a ``--fixture-latency`` given now on top."""
    fixture = stored_fixture(stored)
    if latency is None:
        return fixture
    return dataclasses.replace(fixture or FixtureOptions(), sub_latency=latency)
