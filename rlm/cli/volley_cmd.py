"""``rlm volley``: many independent tasks through one gate, as fast as the provider allows.

The command parses, calls the durable volley (:mod:`rlm.volley.journaled`) and prints:
a new volley is recorded in the journal before anything runs, ``--resume`` reads one
back, and either is worked on by this process until no task is left.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, NoReturn

import click
import trio
from rich.console import Console

from rlm._durations import parse_duration
from rlm.cli._flags import usage_message
from rlm.cli._history import RunKeeper, volley_label
from rlm.cli._progress import stderr_console
from rlm.cli._settings_cli import settings_options
from rlm.cli._terminal import echo_exact, raw_option, safe_text
from rlm.cli._volley_input import (
    check_resume_flags,
    confirmed,
    read_volley,
    resumed_line,
    still_to_run,
)
from rlm.cli._volley_run import (
    Plan,
    drive,
    host_tools,
    open_volleys,
    require_key,
    resumed_fixture,
    volley_settings,
)
from rlm.cli._volley_stream import TaskLines, VolleyJSONLines
from rlm.errors import RLMError, UsageError
from rlm.history.record import volley_summary
from rlm.journal.volleys import result_reader
from rlm.providers.fixture import FixtureOptions
from rlm.streaming import StreamMerger
from rlm.volley.journaled import JournaledVolley
from rlm.volley.output import OrderedWriter
from rlm.volley.progress import BatchLines, LiveStatus, ProgressLines
from rlm.volley.records import TaskResult, VolleyResult

if TYPE_CHECKING:
    from rlm._events import Event

__all__ = ["fixture_latency_option", "volley"]


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value, "the value")
    except UsageError as exc:
        raise click.BadParameter(str(exc)) from None


fixture_latency_option = click.option(
    "--fixture-latency", default=None, callback=_duration, metavar="DURATION",
    help="With --provider fixture: how long each task takes.")


@dataclass(frozen=True)
class _Output:
    """How this process shows the volley: stdout's format, stderr's progress."""

    format: str
    quiet: bool
    raw: bool
    show_text: bool
    trace_path: str | None
    console: Console


@click.command()
@click.argument("tasks", nargs=-1, metavar="[TASK]...")
@click.option("-f", "--file", "task_file", metavar="FILE",
              help="Tasks: one per line (a line starting with # is a comment), JSONL (one "
                   "object per line), a JSON list of tasks, or a JSON object {context, "
                   "max_concurrent, tasks}. A task object has a prompt and may set its own "
                   "timeout (e.g. \"5m\"), model and max_tokens.")
@click.option("--stdin", "from_stdin", is_flag=True, help="Read tasks from stdin, one per line.")
@click.option("--context", "contexts", multiple=True, metavar="TEXT",
              help="Shared context sent before every task (repeatable).")
@click.option("--context-file", "context_files", multiple=True, metavar="PATH",
              help="Shared context from a file (repeatable; - reads stdin).")
@click.option("--encoding", default="utf-8", show_default=True,
              help="Encoding of context and task files (and of --stdin).")
@click.option("--tools", multiple=True, metavar="MODULE:FUNCTION",
              help="With --rlm: offer a Python function to every task's code, by name "
              "(repeatable; give it again to --resume and `rlm volley work`). It runs on this "
              "machine with your privileges: host code, not sandboxed.")
@click.option("--estimate", "estimate_only", is_flag=True,
              help="Print the estimate (tokens, cost, time) and exit; nothing is sent.")
@click.option("--no-estimate", is_flag=True, help="Never show the estimate before running.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask before a large volley.")
@click.option("--output-format", type=click.Choice(["text", "json", "jsonl"]), default="text",
              show_default=True, help="stdout: text blocks, one JSON object, or JSON lines.")
@click.option("--trace", "trace_path", metavar="PATH", help="Write every event as JSONL to PATH.")
@fixture_latency_option
@click.option("--stream", "show_text", is_flag=True,
              help="Show every task's text as it arrives on stderr, each line prefixed with its "
              "task; with --output-format jsonl, every event as a JSON line on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@raw_option
@click.option("--history/--no-history", default=True, show_default=True,
              help="Keep this volley's trace and summary in the run history (`rlm runs`).")
@click.option("--resume", metavar="ID|last",
              help="Run the tasks of volley ID (or the latest) not done yet, then print all of it.")
@click.option("--skip-failed", is_flag=True, help="With --resume: keep failed tasks failed.")
@settings_options("volley")
def volley(tasks: tuple[str, ...], task_file: str | None, from_stdin: bool,
           contexts: tuple[str, ...], context_files: tuple[str, ...], encoding: str,
           estimate_only: bool, no_estimate: bool, yes: bool,
           output_format: str, trace_path: str | None, quiet: bool, raw: bool,
           fixture_latency: float | None, show_text: bool, resume: str | None, skip_failed: bool,
           history: bool, tools: tuple[str, ...]) -> None:
    """Run many independent TASKs, optionally over one shared context, as fast as allowed.

    Every request is [system prompt] + [shared context] + [task], the shared
    part byte-identical so providers' prompt caches serve it; with a context
    large enough to cache, the first task runs alone to warm the cache.  All
    requests go through one gate: --max-concurrent, --rpm/--tpm pacing,
    adaptive concurrency, retries with Retry-After, and budget walls.  stdout
    is in task order whatever order tasks finish in; progress goes to stderr.
    The key is read from RLM_API_KEY (or OPENAI_API_KEY / ANTHROPIC_API_KEY).

    \b
    Examples:
      rlm fixture needle --chars 200000 > big.txt
      rlm volley "What is the magic number?" "Summarise it" --context-file big.txt \\
          --provider fixture
      RLM_API_KEY=sk-... rlm volley -f tasks.txt --context-file api.md \\
          --base-url https://api.openai.com/v1 --model gpt-4.1-mini --rpm 500
      rlm volley --rlm -f questions.txt --context-file big.log --provider fixture

    Provider limits (max_concurrent, rpm, tpm, burst) and every other setting
    can come from a config profile: --profile NAME reads [profiles.NAME] of
    rlm.toml or the user config file, as `rlm run` does (flags win); with
    --resume, the profile's settings and the flags given override the stored ones.

    Every volley is recorded in a journal (--journal) before anything runs, and
    each result is committed before it is printed: `--resume ID|last` runs only
    what is not done yet and prints the whole volley.

    \b
    Exit codes: 0 all succeeded · 1 a task failed · 2 usage error ·
    3 a budget or limit stopped it · 4 credentials refused · 130 interrupted.
    """
    out = _Output(output_format, quiet, raw, show_text, trace_path, stderr_console())
    keeper = RunKeeper(keep=history, view=False, trace_path=trace_path, query="")
    ask = partial(confirmed, only=estimate_only, skip=no_estimate, yes=yes, quiet=quiet)
    try:
        record = None
        if resume is not None:
            check_resume_flags(tasks, task_file, from_stdin, contexts, context_files)
        else:
            if skip_failed:
                raise UsageError("--skip-failed goes with --resume: it keeps a resumed "
                                 "volley's failed tasks failed")
            # Read, checked and agreed to before the journal is opened: a refused
            # command leaves no journal file behind.
            record = _created((tasks, task_file, from_stdin, contexts, context_files,
                               encoding), fixture_latency, tools, ask)
            if record is None:  # the estimate was all that was asked for, or declined
                return
        with open_volleys("volley", out.console, existing=resume is not None) as journal:
            if record is not None:
                plan: Plan | None = record(journal)
            else:
                assert resume is not None
                say = (lambda line: None) if quiet else partial(click.echo, err=True)
                plan = _resumed(journal, resume, skip_failed, fixture_latency, tools, ask, say)
            if plan is None:  # the estimate was all that was asked for, or declined
                return
            stdout = _Stdout(journal)
            result, calls = _work(journal, plan, out, keeper, stdout.write)
            running = len(journal.volley.cut_short) if journal.volley is not None else 0
    except RLMError as exc:
        keeper.close(None, str(exc), page=False)
        message = usage_message(exc, volley) if isinstance(exc, UsageError) else str(exc)
        click.echo(f"Error: {message}", err=True)
        sys.exit(exc.exit_code)
    keeper.close(None, summary=volley_summary(result, calls))
    if stdout.closed:
        _closed(result, plan.stored.volley_id)
    _report(result, running, quiet)
    sys.exit(result.exit_code)


def _created(read: tuple[tuple[str, ...], str | None, bool, tuple[str, ...],
                         tuple[str, ...], str],
             fixture_latency: float | None, tools: tuple[str, ...],
             ask: Callable[..., bool]) -> Callable[[JournaledVolley], Plan] | None:
    """A new volley from the flags, read and checked (None: the estimate was all that was
    asked for, or declined); what it returns records it in a journal."""
    task_list, context, config, options = read_volley("volley", *read)
    fixture = FixtureOptions(sub_latency=fixture_latency or 0.0)
    toolbox = host_tools(tools, options)  # a bad --tools before anything is stored
    if not ask(task_list, context, config, options, fixture=fixture):
        return None
    require_key(config, options)  # before the volley is stored: nothing to resume

    def record(journal: JournaledVolley) -> Plan:
        volley_id = journal.create(task_list, context, config, options, fixture=fixture)
        return Plan(journal.load(volley_id), config, options, fixture, toolbox)

    return record


def _resumed(journal: JournaledVolley, ref: str, skip_failed: bool,
             fixture_latency: float | None, tools: tuple[str, ...],
             ask: Callable[..., bool], say: Callable[[str], None]) -> Plan | None:
    """A volley read back from the journal, its failed tasks reopened unless skipped;
    ``say`` is told which volley it is, and when nothing is left to run."""
    stored = journal.load(ref)
    say(resumed_line(stored, skip_failed))
    config, options = volley_settings("volley", stored=stored.settings)
    fixture = resumed_fixture(stored.settings, fixture_latency)
    toolbox = host_tools(tools, options)
    if not ask(still_to_run(stored, skip_failed), stored.context, config, options,
               fixture=fixture or FixtureOptions()):
        return None
    require_key(config, options)
    if not skip_failed:
        stored = journal.reopen_failed(stored)
    return Plan(stored, config, options, fixture, toolbox)


class _Stdout:
    """Where results are written; when its reader goes away (``| head``), the volley
    stops: what it completed is in the journal, and a resume runs the rest."""

    def __init__(self, journal: JournaledVolley) -> None:
        self._journal = journal
        self.closed = False

    def write(self, text: str) -> None:
        if self.closed:
            return
        try:
            echo_exact(text)  # flushed: a closed pipe is met here, not at exit
        except BrokenPipeError:
            self.closed = True
            # Nothing more reaches the reader; the interpreter's last flush must not fail.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            if self._journal.volley is not None:
                self._journal.volley.interrupt()


def _closed(result: VolleyResult, volley_id: str) -> NoReturn:
    """stdout closed before the volley's results were all written: say what is left."""
    s = result.summary
    left = s.total_tasks - s.succeeded - s.failed
    if left:
        click.echo(f"stdout closed: stopped with {left:,} of {s.total_tasks:,} tasks left; "
                   f"`rlm volley --resume {volley_id}` runs them", err=True)
    else:
        click.echo(f"stdout closed before every result was written; `rlm volley show "
                   f"{volley_id}` prints them", err=True)
    sys.exit(130 if left else 1)


def _work(journal: JournaledVolley, plan: Plan, out: _Output, keeper: RunKeeper,
          write_out: Callable[[str], None]) -> tuple[VolleyResult, int]:
    """Work on the volley here until no task is left; the result and the requests sent."""
    stored = plan.stored
    total = len(stored.tasks)
    events_out = out.show_text and out.format == "jsonl"  # stdout carries the events
    quiet_progress = out.quiet or out.show_text
    status = (LiveStatus(out.console) if not (quiet_progress or plan.options.batch_api)
              and out.console.is_terminal else None)
    write = (lambda line: None) if events_out else write_out
    if status is not None:
        write = status.above(write)
    # Nothing here holds every task or result: the writer reads back from the journal
    # what it does not hold, and the volley counts its verdicts.
    cut_short: set[int] = set()
    writer = OrderedWriter(out.format, total, write,  # type: ignore[arg-type]
                           clean=str if out.raw else safe_text,
                           reader=result_reader(journal.store, stored.volley_id,
                                                cut_short=cut_short))
    for done in stored.earlier:
        writer.add(done)
    batch = plan.options.batch_api
    sinks = ([] if quiet_progress else [BatchLines(out.console)] if batch else
             [ProgressLines(total, out.console, done=len(stored.earlier))])
    merger = StreamMerger() if out.show_text else None
    shown = volley_label(t.prompt for t in stored.tasks)
    trace_path = keeper.open(plan.config, kind="volley", query=shown)
    on_event = (VolleyJSONLines() if events_out
                else TaskLines(total, title_of=partial(_running_title, journal)))
    on_result = writer.add if merger is None else partial(
        _after_streamed, merger, on_event, writer.add)
    main = partial(drive, merger=merger, on_event=on_event, status=status)
    result = trio.run(partial(
        journal.work, stored, plan.config, plan.options, main=main, sinks=sinks,
        trace_path=trace_path, on_result=on_result, stream=merger, keep_results=False,
        **plan.engine(),
    ))
    worked = journal.volley or journal.batch  # the live part, when a batch volley had one
    assert worked is not None
    if journal.volley is not None:
        cut_short.update(journal.volley.cut_short)
    writer.finish(result)  # the rest of the volley, read back from its journal
    return result, worked.ledger.spent.calls


def _running_title(journal: JournaledVolley, index: int) -> str | None:
    return journal.volley.running_title(index) if journal.volley is not None else None


def _after_streamed(merger: StreamMerger, on_event: Callable[[Event], None],
                    write: Callable[[TaskResult], None], result: TaskResult) -> None:
    """Write a task's final output after its streamed lines, not before them.

    The task's ``task_finished`` (which ends its last streamed line) is already
    buffered in the merger; the events before it are handed on first, so on a
    terminal showing both stdout and stderr the final block comes last.
    """
    for event in merger.take_nowait():
        on_event(event)
    write(result)


def _report(result: VolleyResult, running: int, quiet: bool) -> None:
    """What stderr says at the end; ``running``: tasks cancelled after they sent something."""
    s = result.summary
    if result.status == "interrupted" and result.batches and result.error:  # left running
        click.echo(f"Error: {result.error}", err=True)
    elif result.status == "interrupted":
        click.echo(
            f"interrupted: {s.succeeded + s.failed} completed, {running} in progress "
            f"(cancelled), {s.cancelled - running} not started",
            err=True,
        )
    elif result.error:
        click.echo(f"Error: {result.error}", err=True)
    elif s.failed and not quiet:
        click.echo(f"Error: {s.failed} of {s.total_tasks} tasks failed", err=True)
    if "fixture" in result.answered_by and not quiet:
        click.echo(
            "note: answered by the built-in fixture model (scripted, not a language model)",
            err=True,
        )
