"""What a volley command reads: its tasks, its shared context, and the go-ahead.

Tasks come from arguments, a task file (``-f``: lines, JSON, JSONL) and stdin; the
shared context from task files, ``--context`` and ``--context-file``, all within
``--max-context-bytes``.  Before anything is stored or sent, a large volley's
estimate (tokens, cost, time) is shown, and asked about on a terminal.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable
from typing import Any

import click

from rlm._config import RunConfig, VolleyOptions
from rlm._run.assembly import load_prices
from rlm.cli._context_input import ReadLimits, read_context, read_text
from rlm.cli._settings_cli import command_settings, given_flag
from rlm.cli._volley_run import volley_settings
from rlm.errors import UsageError
from rlm.journal import TaskRow
from rlm.journal.volleys import StoredVolley
from rlm.providers.fixture import FixtureOptions
from rlm.providers.open import bills_cache_writes
from rlm.volley.estimate import Estimate, estimate
from rlm.volley.layout import RequestLayout
from rlm.volley.records import VolleyTask
from rlm.volley.tasks import Items, TaskFile, TaskStream, parse_lines, parse_task_file

__all__ = ["check_resume_flags", "confirmed", "go_ahead", "read_volley", "still_to_run"]


def read_volley(
    command: str, tasks: tuple[str, ...], task_file: str | None, from_stdin: bool,
    contexts: tuple[str, ...], context_files: tuple[str, ...], encoding: str,
) -> tuple[TaskStream, list[str], RunConfig, VolleyOptions]:
    """Tasks (made again from their input on each pass, never all held; every one
    checked here), shared context, run settings and volley options from the flags."""
    read = command_settings(("run",), command).values  # what reading may take
    limits = ReadLimits(read["max_context_bytes"], read["timeout"])
    parsed = _read_tasks(tasks, task_file, from_stdin, context_files, encoding, limits)
    context = [*parsed.context, *contexts, *_context_list(context_files, encoding, limits)]
    task_stream = TaskStream(parsed.tasks)
    len(task_stream)  # a bad task is a usage error now, before anything is stored
    config, options = volley_settings(command, file_cap=parsed.max_concurrent)
    return task_stream, context, config, options


def _read_tasks(args: tuple[str, ...], task_file: str | None, from_stdin: bool,
                context_files: tuple[str, ...], encoding: str, limits: ReadLimits) -> TaskFile:
    if from_stdin and "-" in context_files:
        raise UsageError("--stdin and --context-file - both want stdin; put one in a file")
    if from_stdin and task_file == "-":
        raise UsageError("use either --stdin or -f -, not both")
    items = [{"prompt": a} for a in args]
    parsed = TaskFile([])
    if task_file is not None:
        name = "stdin" if task_file == "-" else task_file
        parsed = parse_task_file(read_text(task_file, encoding, "task file", limits=limits),
                                 name)
        if next(iter(parsed.tasks), None) is None and not items and not from_stdin:
            raise UsageError(f"task file {name} holds no tasks (blank lines are skipped): "
                             "one task per line, JSON or JSONL")
    stdin_tasks: Iterable[dict[str, Any]] = (
        parse_lines(read_text("-", encoding, "task file", limits=limits)) if from_stdin else ())
    in_file = parsed.tasks
    return TaskFile(Items(lambda: itertools.chain(items, in_file, stdin_tasks)),
                    parsed.context, parsed.max_concurrent)


def _context_list(paths: tuple[str, ...], encoding: str, limits: ReadLimits) -> list[str]:
    context = read_context(paths, encoding, limits=limits)
    if isinstance(context, str):
        return [context] if paths else []
    return context


def confirmed(tasks: Iterable[VolleyTask], context: list[str], config: RunConfig,
               options: VolleyOptions, only: bool, skip: bool, yes: bool,
               fixture: FixtureOptions) -> bool:
    """Show the estimate when asked or when the volley is large; ask on a TTY only."""
    if skip and not only:
        return True
    layout = RequestLayout(context, model=config.model, max_tokens=config.max_tokens)
    latency = fixture.sub_latency if config.provider == "fixture" else 2.0
    warm = options.cache_warm and options.mode == "completion"
    prices = load_prices(config)
    est = estimate(tasks, layout, config, prices, cache_warm=warm,
                   rlm=options.mode == "rlm", latency=latency,
                   bills_cache_writes=bills_cache_writes(config), batch_prices=prices.batch(),
                   batch_api=options.batch_api)
    return go_ahead(est, only=only, yes=yes)


def go_ahead(est: Estimate, *, only: bool, yes: bool) -> bool:
    """Print ``est`` when only it was asked for (then False), or on stderr when the work
    is large, asking on a TTY unless ``yes``; exit 1 when it is declined."""
    if only:
        click.echo("\n".join(est.lines()))
        return False
    if not est.large:
        return True
    click.echo("\n".join(est.lines()), err=True)
    if yes or not (sys.stdin.isatty() and sys.stderr.isatty()):
        return True  # without a TTY nobody could answer: never wait for input
    if click.confirm("Continue?", default=True, err=True):
        return True
    click.echo("Error: not confirmed; nothing was sent (pass -y to skip the question)", err=True)
    sys.exit(1)


def check_resume_flags(tasks: tuple[str, ...], task_file: str | None, from_stdin: bool,
                        contexts: tuple[str, ...], context_files: tuple[str, ...]) -> None:
    """--resume runs what the journal holds: flags that would change it are refused."""
    if tasks or task_file or from_stdin:
        raise UsageError("--resume runs the tasks stored in the journal; give no new tasks")
    if contexts or context_files:
        raise UsageError("--resume uses the shared context stored with the volley; leave out "
                         "--context and --context-file (a new context is a new volley)")
    if given_flag("mode"):
        raise UsageError("--resume keeps the stored volley's kind of task; leave out --rlm "
                         "(a volley of --rlm tasks resumes as one)")


def still_to_run(stored: StoredVolley, skip_failed: bool) -> Iterable[VolleyTask]:
    """The tasks a resume will run: not done, and not failed with --skip-failed (read from
    the journal as they are counted)."""
    standing = ("done", "failed") if skip_failed else ("done",)

    def left(row: TaskRow) -> VolleyTask | None:
        return None if row.status in standing else VolleyTask.from_dict(row.spec)

    return stored.tasks.where(left)
