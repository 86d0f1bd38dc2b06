"""``rlm volley create`` and ``rlm volley work``: one volley, any number of workers.

``create`` takes the same tasks, context and settings as plain ``rlm volley``,
records the volley in the journal and prints its id; nothing is sent.
``work ID`` runs a worker on it: it claims open tasks, runs them through its
gate and commits each verdict; ``--pool N`` starts N such workers (this process
and N-1 supervised children).  Where and how to send comes from the journal;
flags given to ``work`` override it.  Limits stored with the volley
(``--max-concurrent``, ``--rpm``, ``--tpm``) are per journal: live workers
divide them.
"""

from __future__ import annotations

import json
import os
import sys
from functools import partial
from typing import Any

import click
import trio

from rlm.cli import volley_cmd
from rlm.cli._flags import usage_message
from rlm.cli._pool_link import PoolParent, link_to_parent, pool_argv, supervise_siblings
from rlm.cli._progress import stderr_console
from rlm.cli._settings_cli import settings_params
from rlm.cli._volley_input import read_volley
from rlm.cli._volley_run import (
    Plan,
    drive,
    host_tools,
    open_volleys,
    require_key,
    resumed_fixture,
    volley_settings,
)
from rlm.errors import RLMError, UsageError
from rlm.providers.fixture import FixtureOptions
from rlm.providers.open import check_batch_service
from rlm.volley.journaled import JournaledVolley
from rlm.volley.progress import BatchLines, ProgressLines
from rlm.volley.records import VolleyResult

__all__ = ["create_cmd", "work_cmd"]

#: Plain `rlm volley` flags `work` takes beside its settings (the table's "volley work").
_WORK_FLAGS = ("fixture_latency", "trace_path", "quiet", "tools")


def _fail(exc: RLMError) -> None:
    # A setting is named as this command's flag (--base-url), not as Python spells it.
    context = click.get_current_context(silent=True)
    message = str(exc) if context is None else usage_message(exc, context.command)
    click.echo(f"Error: {message}", err=True)
    sys.exit(exc.exit_code)


def _create(**values: Any) -> None:
    """Record a volley in the journal without running it, and print its id.

    Takes the tasks, context and settings plain `rlm volley` takes; the API key
    is never stored.  Run it with `rlm volley work ID` (as many as you like).
    """
    output_format = values.pop("output_format")
    for name in _IGNORED_BY_CREATE:
        values.pop(name)
    fixture = FixtureOptions(sub_latency=values.pop("fixture_latency") or 0.0)
    try:
        tasks, context, config, options = read_volley(
            "volley create", values.pop("tasks"), values.pop("task_file"),
            values.pop("from_stdin"), values.pop("contexts"), values.pop("context_files"),
            values.pop("encoding"),
        )
        if options.batch_api:
            check_batch_service(config)
        with open_volleys("volley create", stderr_console(), existing=False) as journal:
            volley_id = journal.create(tasks, context, config, options, fixture=fixture)
    except RLMError as exc:
        _fail(exc)
    if output_format in ("json", "jsonl"):  # one JSON line either way
        click.echo(json.dumps({"volley_id": volley_id}))
    else:
        click.echo(volley_id)


@click.pass_context
def _work(
    ctx: click.Context,
    /,
    volley_ref: str,
    pool: int,
    fixture_latency: float | None,
    trace_path: str | None,
    quiet: bool,
    tools: tuple[str, ...],
) -> None:
    """Work on volley ID (or the latest) from the journal until no task is left.

    Several workers (--pool N, or this command run again, here or on another
    machine sharing a postgresql:// journal) split the tasks; each task runs
    once.  A worker that dies has its tasks reopened by the others after
    --stale-timeout.  Results go to the journal: see them with `rlm volley show`.

    Flags given here (and the settings of --profile NAME) override the ones
    stored with the volley.

    \b
    Exit codes: 0 no task left failed · 1 the volley has failed tasks · 2 usage
    error · 3 a budget or limit stopped this worker · 4 credentials refused ·
    130 interrupted (its unfinished tasks are given back to the journal).
    """
    if pool < 1:
        _fail(UsageError(f"--pool must be at least 1, got {pool}"))
    try:
        parent = link_to_parent()  # a pool's sibling dies with the pool's first worker
    except RLMError as exc:
        _fail(exc)
    err = stderr_console()  # no hard wrap when redirected, NO_COLOR
    try:
        with open_volleys("volley work", err, existing=True) as journal:
            # A sibling works on the pool's volley, whatever ``last`` names by now.
            stored = journal.load(volley_ref if parent is None else parent.volley_id)
            config, options = volley_settings("volley work", stored=stored.settings)
            if options.batch_api and pool > 1:
                raise UsageError("a volley sent as provider batches (--batch-api) has one "
                                 "worker at a time: leave out --pool")
            require_key(config, options)
            plan = Plan(stored, config, options, resumed_fixture(stored.settings,
                                                                  fixture_latency),
                        host_tools(tools, options))
            sinks: list[Any] = [] if quiet else [BatchLines(err)] if options.batch_api else [
                ProgressLines(len(stored.tasks), err, done=len(stored.earlier))]
            siblings = pool_argv(sys.argv[1:]) if pool > 1 else ([], {})
            result = trio.run(partial(
                _work_pool, journal, plan, siblings, pool - 1, parent,
                sinks=sinks, trace_path=trace_path,
            ))
            assert journal.worker is not None
            mine = journal.worker.accepted
            left = journal.store.volley(stored.volley_id).counts
    except RLMError as exc:
        _fail(exc)
    volley_id = stored.volley_id
    click.echo(
        f"worker finished: {mine} task(s) here; volley {volley_id}: {left['done']} done, "
        f"{left['failed']} failed, {left['open'] + left['in_progress']} open",
        err=True,
    )
    _exit(result, volley_id, left["failed"])


def _exit(result: VolleyResult, volley_id: str, failed: int) -> None:
    """Say why this worker stopped, or that the volley has failed tasks, with the exit code."""
    if result.status == "interrupted":
        click.echo(f"interrupted; this worker's unfinished tasks are open again "
                   f"(`rlm volley work {volley_id}` takes them up)", err=True)
        sys.exit(result.exit_code)
    if result.status in ("credentials_refused", "budget_exceeded"):
        click.echo(f"Error: {result.error}", err=True)
        sys.exit(result.exit_code)
    if failed:
        click.echo(f"Error: {failed} task(s) of volley {volley_id} failed (see `rlm volley "
                   f"show {volley_id}`; `rlm volley --resume {volley_id}` runs them again)",
                   err=True)
        sys.exit(1)


async def _work_pool(
    journal: JournaledVolley,
    plan: Plan,
    argv: tuple[list[str], dict[str, str]],
    siblings: int,
    parent: PoolParent | None = None,
    **engine: Any,
) -> VolleyResult:
    """This worker, and ``siblings`` more as child processes (``argv``: their command
    line and the environment variables that carry its credentials, from ``pool_argv``).

    When this worker stops early (Ctrl-C or SIGTERM, which only this process may
    get, or an error) the siblings are sent SIGTERM, so each gives its tasks back
    and exits, instead of working on alone; when it ran out of tasks, they finish
    theirs.  They run in their own session, so a Ctrl-C at the terminal reaches
    them once, from here, not twice (a second signal makes a worker exit at once).
    A sibling (``parent`` given) stops the same way when the first worker dies,
    however it died (:mod:`rlm.cli._pool_link`).
    """
    async with trio.open_nursery() as nursery:
        if siblings:
            command, env = argv
            nursery.start_soon(supervise_siblings, command, siblings, plan.stored.volley_id,
                               env)
        async with trio.open_nursery() as watching:
            if parent is not None:
                watching.start_soon(parent.watch, journal.interrupt, partial(_die, journal))
            main = drive
            # It prints counts, not results: nothing holds every verdict.
            result = await journal.work(plan.stored, plan.config, plan.options, main=main,
                                        keep_results=False, **plan.engine(), **engine)
            watching.cancel_scope.cancel()
        if result.status == "interrupted":
            nursery.cancel_scope.cancel()  # each sibling gets SIGTERM
        return result


def _die(journal: JournaledVolley) -> None:
    """Exit now, as a second Ctrl-C does: this worker did not stop within the grace."""
    journal.kill_sandboxes()
    os._exit(130)


#: Plain `rlm volley` flags that mean nothing to `create` (the ones that only quiet a
#: run, -q, -y and --no-estimate, are accepted so a command line can switch verbs).
_NOT_FOR_CREATE = (
    "resume", "skip_failed", "estimate_only", "trace_path", "show_text", "history",
    "tools",  # not kept in the journal: given to `rlm volley work`
)  # fmt: skip
_IGNORED_BY_CREATE = ("no_estimate", "yes", "quiet")


def _tools_not_stored(ctx: click.Context, param: click.Parameter, specs: tuple[str, ...]) -> None:
    """`create --tools`: say where tools go instead of click's bare "No such option"."""
    if specs:
        _fail(UsageError(
            "--tools is not stored in the journal (a function is not data): create the volley "
            "without it and give --tools MODULE:FUNCTION to `rlm volley work ID` (or to "
            "`rlm volley --resume ID`)"
        ))


def _build_create() -> click.Command:
    own = [p for p in volley_cmd.volley.params
           if p.expose_value and p.name not in _NOT_FOR_CREATE]
    own.append(click.Option(["--tools"], multiple=True, hidden=True, expose_value=False,
                            callback=_tools_not_stored))
    return click.Command("create", callback=_create, help=_create.__doc__,
                         params=[*own, *settings_params("volley create")])


def _build_work() -> click.Command:
    return click.Command(
        "work",
        callback=_work,
        params=[
            click.Argument(["volley_ref"], metavar="ID|last"),
            *[p for p in volley_cmd.volley.params if p.name in _WORK_FLAGS],
            click.Option(
                ["--pool"],
                type=int,
                default=1,
                show_default=True,
                help="Run N workers on this machine (this process and N-1 children).",
            ),
            *settings_params("volley work"),
        ],
        help=_work.__doc__,
    )


create_cmd = _build_create()
work_cmd = _build_work()
