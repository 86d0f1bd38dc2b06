"""``rlm volley``: many independent tasks through one gate, as fast as the provider allows."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import click
import trio
from rich.console import Console

from rlm._config import RunConfig, VolleyOptions
from rlm._durations import parse_duration
from rlm._events import Event
from rlm._run.assembly import load_prices
from rlm.cli._context_input import ReadLimits, read_context, read_text
from rlm.cli._flags import usage_message
from rlm.cli._history import RunKeeper
from rlm.cli._progress import stderr_console
from rlm.cli._settings_cli import command_settings, given_flag, settings_options
from rlm.cli._terminal import raw_option, safe_text
from rlm.cli._volley_stream import TaskLines, VolleyJSONLines
from rlm.cli.volley_journal import (
    JournalSession,
    fixture_providers,
    journal_flags,
    require_key,
    resumed_fixture,
    volley_settings,
    with_other_workers,
)
from rlm.errors import RLMError, UsageError
from rlm.history.record import volley_summary
from rlm.journal import Spend
from rlm.journal.volleys import StoredVolley, reopen_failed
from rlm.providers.fixture import FixtureOptions
from rlm.providers.open import bills_cache_writes
from rlm.streaming import StreamMerger, drain
from rlm.volley.engine import Volley
from rlm.volley.estimate import estimate
from rlm.volley.layout import RequestLayout
from rlm.volley.output import OrderedWriter
from rlm.volley.progress import ProgressLines, live_status
from rlm.volley.records import TaskResult, VolleyResult, VolleyTask, new_volley_id
from rlm.volley.tasks import TaskFile, number_tasks, parse_lines, parse_task_file

if TYPE_CHECKING:
    from rlm._run.tools import ToolBox

__all__ = ["volley"]

DEFAULT_CONCURRENCY = 16


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value, "the value")
    except UsageError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.argument("tasks", nargs=-1, metavar="[TASK]...")
@click.option("-f", "--file", "task_file", metavar="FILE",
              help="Tasks: one per line, a JSON object {context, max_concurrent, tasks}, a "
                   "JSON list of tasks, or JSONL.")
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
@click.option("--fixture-latency", default=None, callback=_duration, metavar="DURATION",
              help="With --provider fixture: how long each task takes.")
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
    err = stderr_console()  # no hard wrap when redirected, NO_COLOR
    keeper = RunKeeper(keep=history, view=False, trace_path=trace_path, query="")
    try:
        if resume is not None:
            _check_resume_flags(tasks, task_file, from_stdin, contexts, context_files)
        flags = journal_flags("volley", resume, skip_failed)
        with JournalSession(flags, err, existing=resume is not None) as session:
            if resume is not None:
                stored = session.load(resume, rerun_failed=False)
                task_list, context = stored.tasks, stored.context
                config, options = volley_settings("volley", stored=stored.settings)
                fixture = resumed_fixture(stored.settings, fixture_latency)
                toolbox = host_tools(tools, options)
                if not _confirmed(_to_run(stored, skip_failed), context, config, options,
                                  estimate_only, no_estimate, yes,
                                  fixture or FixtureOptions()):
                    return
                require_key(config)
                if not skip_failed:
                    stored = reopen_failed(session.store, stored)
                volley_id, earlier, spent = stored.volley_id, stored.earlier, stored.spent
            else:
                task_list, context, config, options = read_volley(
                    "volley", tasks, task_file, from_stdin, contexts, context_files, encoding)
                fixture = FixtureOptions(sub_latency=fixture_latency or 0.0)
                toolbox = host_tools(tools, options)  # a bad --tools before anything is stored
                if not _confirmed(task_list, context, config, options, estimate_only,
                                  no_estimate, yes, fixture):
                    return
                require_key(config)  # before the volley is stored: nothing to resume
                volley_id, earlier, spent = new_volley_id(), [], Spend()
                session.create(volley_id, config, options, task_list, context, fixture)
            events_out = show_text and output_format == "jsonl"  # stdout carries the events
            write = (lambda line: None) if events_out else click.echo
            writer = OrderedWriter(output_format, len(task_list), write,  # type: ignore[arg-type]
                                   clean=str if raw else safe_text)
            for done in earlier:
                writer.add(done)
            prompts = {t.index: t.prompt for t in task_list}
            quiet_progress = quiet or show_text
            sinks = ([] if quiet_progress
                     else [ProgressLines(len(task_list), prompts.__getitem__, err,
                                         done=len(earlier))])
            merger = StreamMerger() if show_text else None
            worker = session.worker(volley_id)
            trace_path = keeper.open(config, kind="volley", query=" · ".join(
                t.prompt for t in task_list[:3]) + (" · …" if len(task_list) > 3 else ""))
            on_event = (VolleyJSONLines() if events_out else TaskLines(
                len(task_list), titles={t.index: t.title for t in task_list}))
            on_result = writer.add if merger is None else partial(
                _after_streamed, merger, on_event, writer.add)
            run = Volley(config, task_list, context=context, options=options, sinks=sinks,
                         trace_path=trace_path, on_result=on_result, stream=merger,
                         volley_id=volley_id, source=worker, sink=worker, earlier=earlier,
                         providers=fixture_providers(config, fixture), tools=toolbox,
                         before_send=worker.before_send)
            live = not quiet_progress and err.is_terminal
            main = partial(_main, console=err, live=live, merger=merger, on_event=on_event)
            result = with_other_workers(session.store,
                                        trio.run(session.work, run, worker, main, spent))
    except RLMError as exc:
        keeper.close(None, str(exc), page=False)
        message = usage_message(exc, volley) if isinstance(exc, UsageError) else str(exc)
        click.echo(f"Error: {message}", err=True)
        sys.exit(exc.exit_code)
    keeper.close(None, summary=volley_summary(result, run.ledger.spent.calls))
    writer.finish(result)
    _report(result, quiet)
    sys.exit(result.exit_code)


def _check_resume_flags(tasks: tuple[str, ...], task_file: str | None, from_stdin: bool,
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


def _to_run(stored: StoredVolley, skip_failed: bool) -> list[VolleyTask]:
    """The tasks a resume will run: not done, and not failed with --skip-failed."""
    standing = {r.index for r in stored.earlier if skip_failed or r.status == "succeeded"}
    return [t for t in stored.tasks if t.index not in standing]


def host_tools(specs: tuple[str, ...], options: VolleyOptions) -> ToolBox | None:
    """The ``--tools`` functions for a volley's ``--rlm`` tasks (None without any).

    Not kept in the journal (a function is not data): a resumed volley or another
    worker is given them again.
    """
    if not specs:
        return None
    if options.mode != "rlm":
        raise UsageError(
            "--tools needs --rlm: only a task that is a whole RLM call runs code that can "
            "call a tool"
        )
    from rlm._run.tools import ToolBox, load_tool

    return ToolBox(load_tool(spec) for spec in specs)


def read_volley(
    command: str, tasks: tuple[str, ...], task_file: str | None, from_stdin: bool,
    contexts: tuple[str, ...], context_files: tuple[str, ...], encoding: str,
) -> tuple[list[VolleyTask], list[str], RunConfig, VolleyOptions]:
    """Tasks, shared context, run settings and volley options from the flags."""
    read = command_settings(("run",), command).values  # what reading may take
    limits = ReadLimits(read["max_context_bytes"], read["timeout"])
    parsed = _read_tasks(tasks, task_file, from_stdin, context_files, encoding, limits)
    context = [*parsed.context, *contexts, *_context_list(context_files, encoding, limits)]
    task_list = number_tasks(parsed.tasks)
    config, options = volley_settings(command, file_cap=parsed.max_concurrent)
    return task_list, context, config, options


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
        if not parsed.tasks and not items and not from_stdin:
            raise UsageError(f"task file {name} holds no tasks (blank lines are skipped): "
                             "one task per line, JSON or JSONL")
    stdin_tasks = (parse_lines(read_text("-", encoding, "task file", limits=limits))
                   if from_stdin else [])
    return TaskFile([*items, *parsed.tasks, *stdin_tasks], parsed.context, parsed.max_concurrent)


def _context_list(paths: tuple[str, ...], encoding: str, limits: ReadLimits) -> list[str]:
    context = read_context(paths, encoding, limits=limits)
    if isinstance(context, str):
        return [context] if paths else []
    return context


def _confirmed(tasks: list[VolleyTask], context: list[str], config: RunConfig,
               options: VolleyOptions, only: bool, skip: bool, yes: bool,
               fixture: FixtureOptions) -> bool:
    """Show the estimate when asked or when the volley is large; ask on a TTY only."""
    if skip and not only:
        return True
    layout = RequestLayout(context, model=config.model, max_tokens=config.max_tokens)
    latency = fixture.sub_latency if config.provider == "fixture" else 2.0
    warm = options.cache_warm and options.mode == "completion"
    est = estimate(tasks, layout, config, load_prices(config), cache_warm=warm,
                   rlm=options.mode == "rlm", latency=latency,
                   bills_cache_writes=bills_cache_writes(config))
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


async def _main(run: Volley, console: Console, live: bool, merger: StreamMerger | None,
                on_event: Callable[[Event], None]) -> VolleyResult:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_signals, run)
        if live:
            nursery.start_soon(live_status, run, console)
        try:
            if merger is None:
                return await run.run()
            async with trio.open_nursery() as consumer:  # --stream: drain every event
                consumer.start_soon(drain, merger, on_event)
                try:
                    return await run.run()
                finally:
                    merger.close()
        finally:
            nursery.cancel_scope.cancel()


async def _watch_signals(run: Volley) -> None:
    """First Ctrl-C/SIGTERM: stop and print what completed; a second one exits at once."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        count = 0
        async for _ in signals:
            count += 1
            if count > 1:
                run.kill_sandboxes()  # --rlm tasks: no sandbox outlives the process
                os._exit(130)
            run.interrupt()


def _report(result: VolleyResult, quiet: bool) -> None:
    s = result.summary
    if result.status == "interrupted":
        running = sum(1 for t in result.tasks if t.error == "cancelled while running")
        click.echo(
            f"Error: interrupted: {s.succeeded + s.failed} completed, {running} in progress "
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
