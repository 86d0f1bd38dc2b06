"""What a volley command reads: its tasks, its shared context, and the go-ahead.

Tasks come from arguments, a task file (``-f``: lines, JSON, JSONL) and stdin; the
shared context from task files, ``--context`` and ``--context-file``, all within
``--max-context-bytes``.  Before anything is stored or sent, a large volley's
estimate (tokens, cost, time) is shown, and asked about on a terminal.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Iterable
from typing import Any

import click
from click import ParameterSource

from rlm._config import RunConfig, VolleyOptions
from rlm._files import ReadLimits, read_text
from rlm._run.assembly import load_prices
from rlm.cli._context_input import read_context
from rlm.cli._settings_cli import command_settings, given_flag
from rlm.cli._terminal import say
from rlm.cli._volley_run import volley_settings
from rlm.errors import UsageError
from rlm.journal import TaskRow
from rlm.journal.volleys import StoredVolley
from rlm.providers.fixture import FixtureOptions
from rlm.providers.open import bills_cache_writes
from rlm.volley.estimate import Estimate, estimate
from rlm.volley.layout import RequestLayout
from rlm.volley.output import task_label
from rlm.volley.records import VolleyTask
from rlm.volley.tasks import Items, TaskFile, TaskStream, parse_lines, parse_task_file

__all__ = [
    "check_resume_flags",
    "confirmed",
    "go_ahead",
    "read_volley",
    "resumed_line",
    "still_to_run",
]


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
    named = "the task file on stdin" if task_file == "-" else task_file or "the task file"
    config, options = volley_settings(command, file_cap=parsed.max_concurrent, task_file=named)
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
        text = read_text(task_file, encoding, "task file", limits=limits, announce=say)
        parsed = parse_task_file(text, name)
        if next(iter(parsed.tasks), None) is None and not items and not from_stdin:
            raise UsageError(f"task file {name} holds no tasks (blank lines are skipped): "
                             "one task per line, JSON or JSONL")
    stdin_tasks: Iterable[dict[str, Any]] = (parse_lines(
        read_text("-", encoding, "task file", limits=limits, announce=say)) if from_stdin else ())
    in_file = parsed.tasks
    return TaskFile(Items(lambda: itertools.chain(items, in_file, stdin_tasks)),
                    parsed.context, parsed.max_concurrent)


def _context_list(paths: tuple[str, ...], encoding: str, limits: ReadLimits) -> list[str]:
    context = read_context(paths, encoding, limits=limits)
    if isinstance(context, str):
        return [context] if paths else []
    return context


def confirmed(tasks: Iterable[VolleyTask], context: list[str], config: RunConfig,
              options: VolleyOptions, only: bool, skip: bool, yes: bool, quiet: bool,
              fixture: FixtureOptions) -> bool:
    """Whether to go on with a volley (see :func:`go_ahead`), unless ``skip``."""
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
    return go_ahead(est, only=only, yes=yes, quiet=quiet, billed=config.provider != "fixture")


def go_ahead(est: Estimate, *, only: bool, yes: bool, quiet: bool = False,
             billed: bool = True) -> bool:
    """Print ``est`` when only it was asked for (then False); else whether to go on: large
    work that is ``billed`` (and not priced at zero) shows ``est`` on stderr (unless
    ``quiet``) and, on a TTY without ``yes``, asks first.

    Declining is no error: one plain line, and nothing is stored or sent.
    """
    if only:
        click.echo("\n".join(est.lines()))
        return False
    if not (est.large and billed and est.cost != 0):
        return True
    if not quiet:
        click.echo("\n".join(est.lines()), err=True)
    if yes or not (sys.stdin.isatty() and sys.stderr.isatty()):
        return True  # without a TTY nobody could answer: never wait for input
    cost = "unpriced" if est.cost is None else f"about ${est.cost:.2f}"
    question = "Continue?" if not quiet else f"Send {est.tasks:,} tasks ({cost})?"
    if click.confirm(question, default=True, err=True):
        return True
    click.echo("Not sent: nothing was stored or sent (-y skips this question).", err=True)
    return False


def check_resume_flags(tasks: tuple[str, ...], task_file: str | None, from_stdin: bool,
                       contexts: tuple[str, ...], context_files: tuple[str, ...]) -> None:
    """--resume runs what the journal holds: flags that would change it are refused."""
    given = click.get_current_context().get_parameter_source
    if given("encoding") is ParameterSource.COMMANDLINE:
        raise UsageError("--resume reads the tasks and context stored in the journal; "
                         "--encoding applies only to files being read: leave it out")
    if tasks or task_file or from_stdin:
        raise UsageError("--resume runs the tasks stored in the journal; give no new tasks")
    if contexts or context_files:
        raise UsageError("--resume uses the shared context stored with the volley; leave out "
                         "--context and --context-file (a new context is a new volley)")
    if given_flag("mode"):
        raise UsageError("--resume keeps the stored volley's kind of task; leave out --rlm "
                         "(a volley of --rlm tasks resumes as one)")


def resumed_line(stored: StoredVolley, skip_failed: bool) -> str:
    """Which volley a resume works on, and what is left of it (said before anything runs)."""
    row = stored.row
    counts = row.counts
    left = counts["open"] + counts["in_progress"] + (0 if skip_failed else counts["failed"])
    created = time.strftime("%Y-%m-%d %H:%M", time.localtime(row.created_at))
    first = next(iter(stored.tasks), None)
    named = "" if first is None else f"; first task: {task_label(first.prompt, 60)}"
    head = f"volley {row.volley_id}: {row.total:,} tasks, created {created}{named}"
    if left:
        return f"resuming {head}; {left:,} left to run"
    failed = f", {counts['failed']:,} failed (kept: --skip-failed)" if counts["failed"] else ""
    return f"{head}; nothing left to run ({counts['done']:,} done{failed}): printing it"


def still_to_run(stored: StoredVolley, skip_failed: bool) -> Iterable[VolleyTask]:
    """The tasks a resume will run: not done, and not failed with --skip-failed (read from
    the journal as they are counted)."""
    standing = ("done", "failed") if skip_failed else ("done",)

    def left(row: TaskRow) -> VolleyTask | None:
        return None if row.status in standing else VolleyTask.from_dict(row.spec)

    return stored.tasks.where(left)
