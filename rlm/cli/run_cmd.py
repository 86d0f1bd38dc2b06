"""``rlm run``: answer a query over a large context with the RLM loop."""

from __future__ import annotations

import functools
import importlib
import json
import sys
from typing import TYPE_CHECKING, Any

import click

from rlm._settings import api_key_from_environment
from rlm.cli._errors import echo_json_error, fail
from rlm.cli._flags import model_or_blank, usage_message
from rlm.cli._settings_cli import command_settings, settings_options
from rlm.cli._terminal import answer_for_stdout, echo_exact, plural, raw_option, say
from rlm.errors import RLMError, UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

    from rlm._api import RLM
    from rlm._events import Event
    from rlm._result import RunResult
    from rlm._run.context import Context
    from rlm._sandbox.early import EarlyZygote

__all__ = ["run"]


class _GlobSpill(click.Argument):
    """The paths a shell glob spreads after ``--context-file`` (``--context-file *.txt``
    arrives as one flagged path and the rest as arguments).  Not in the usage line:
    alone they are refused (rlm.cli._context_input.context_paths)."""

    def get_usage_pieces(self, ctx: click.Context) -> list[str]:
        return []


@click.command()
@click.argument("query")
@click.argument("more_paths", nargs=-1, cls=_GlobSpill)
@click.option(
    "--context",
    "contexts",
    multiple=True,
    metavar="TEXT",
    help="The input as text (repeatable; with --context-file, these documents come first).",
)
@click.option(
    "--context-file",
    "context_files",
    multiple=True,
    metavar="PATH",
    help="The input: a file, a directory (each file a document) or - for stdin. Several "
    "paths (--context-file *.txt, or the flag repeated) make context a list.",
)
@click.option(
    "--glob",
    "glob_pattern",
    default="*",
    show_default=True,
    metavar="PATTERN",
    help="Which files of a --context-file directory to read, e.g. '*.log' or '**/*.md'.",
)
@click.option("--encoding", default="utf-8", show_default=True, help="Encoding of context files.")
@click.option("--trace", "trace_path", metavar="PATH", help="Write every event as JSONL to PATH.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object instead of the answer."
)
@click.option(
    "--output-format",
    type=click.Choice(["text", "json", "jsonl"]),
    help="stdout: the answer (text), one JSON object (json, like --json), or with --stream "
    "every event as one JSON line (jsonl; without --stream, the object on one line).",
)
@click.option(
    "--stream",
    "show_text",
    is_flag=True,
    help="Show the root's reply as it is written (stderr), code running as soon as its "
    "block closes; with --json or --output-format jsonl, every event as one JSON line on "
    "stdout.",
)
@click.option(
    "--history/--no-history",
    default=True,
    show_default=True,
    help="Keep this run's trace and summary in the run history (`rlm runs`; "
    "RLM_HISTORY=off turns it off for good).",
)
@click.option("--view", is_flag=True, help="At the end, write the run's page next to its trace.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@click.option("-v", "--verbose", is_flag=True,
              help="After the run, each lane's traffic: attempts, retries, 429s, the peak in "
              "flight, waits and latency.")
@raw_option
@click.option(
    "--tools",
    multiple=True,
    metavar="MODULE:FUNCTION",
    help="Offer a Python function to the model's code, by name (repeatable). It runs on "
    "this machine with your privileges: host code, not sandboxed.",
)
@settings_options("run")
def run(
    query: str,
    more_paths: tuple[str, ...],
    contexts: tuple[str, ...],
    context_files: tuple[str, ...],
    glob_pattern: str,
    encoding: str,
    as_json: bool,
    output_format: str | None,
    quiet: bool,
    verbose: bool,
    raw: bool,
    trace_path: str | None,
    show_text: bool,
    history: bool,
    view: bool,
    tools: tuple[str, ...],
) -> None:
    """Answer QUERY over a large context with a recursive language model.

    The context is never shown to the root model: it lives as `context` in a
    sandboxed Python REPL, and the model writes code to search it and to call
    sub-models on the pieces.  stdout carries only the answer (or, with
    --json, one object); progress and diagnostics go to stderr.  The API key
    is read from RLM_API_KEY (or OPENAI_API_KEY / ANTHROPIC_API_KEY), never
    from the command line.

    \b
    Examples:
      rlm fixture needle --chars 2000000 | rlm run "What is the magic number?" \\
          --context-file - --provider fixture
      RLM_API_KEY=sk-... rlm run "Which service fails most?" --context-file app.log \\
          --model gpt-4.1 --sub-model gpt-4.1-mini
      rlm run "Which file mentions the outage?" --context-file notes/ --glob '*.md' \\
          --profile fast-local

    \b
    Streaming:
      rlm run "What is the magic number?" --context-file big.txt --provider fixture --stream
      ... --stream --output-format jsonl \\
          | jq -j 'select(.event=="text_delta" and .lane=="root") | .text'

    \b
    Exit codes: 0 answered · 1 runtime failure · 2 usage error ·
    3 a limit or budget ended the run · 4 credentials refused · 130 interrupted.
    """
    early_zygote = _early_zygote(click.get_current_context())
    # Imported here, not at the top: `rlm --help` lists this command without loading the runtime.
    from rlm._result import STATUS_EXIT_CODES
    from rlm.cli._history import RunKeeper
    from rlm.cli._signals import run_with_signals

    fmt, events_out, object_out = _formats(as_json, output_format, show_text)
    settings = _settings()
    printer = None if quiet or show_text else _progress_printer()
    keeper = RunKeeper(keep=history, view=view, trace_path=trace_path, query=query)
    try:
        model = _model(settings, trace_path, [] if printer is None else [printer], tools,
                       early_zygote, as_json=fmt != "text")
        context = _context(contexts, context_files, more_paths, encoding, glob_pattern,
                           settings)
        on_event = _live_output(events_out) if show_text else None
        keeper.attach(model)
        result = run_with_signals(model, query, context, on_event)
    except UsageError as exc:
        keeper.close(getattr(exc, "result", None), str(exc), page=False)
        fail(usage_message(exc, run), exc.exit_code, as_json=object_out)
    except RLMError as exc:
        partial: RunResult | None = getattr(exc, "result", None)
        keeper.close(partial, str(exc))
        if object_out and partial is not None:
            click.echo(json.dumps(partial.to_dict(), ensure_ascii=False))
            object_out = False  # the object on stdout already holds the error
        fail(str(exc), exc.exit_code, as_json=object_out)
    except KeyboardInterrupt:
        keeper.close(None, "interrupted")
        if object_out:
            echo_json_error("interrupted", 130)
        say("interrupted")
        sys.exit(130)
    finally:
        if printer is not None:
            printer.close()
    keeper.close(result)
    _report(result, as_json=object_out, quiet=quiet, events=events_out, raw=raw,
            verbose=verbose)
    sys.exit(STATUS_EXIT_CODES.get(result.status, 1))


def _early_zygote(ctx: click.Context) -> EarlyZygote:
    """The sandbox zygote, booting while the runtime is imported and the context read; the
    run adopts it.  The `rlm` executable started it before parsing the command line
    (rlm.cli._console); otherwise it starts now.  Closed on every exit path."""
    from rlm._sandbox.early import EarlyZygote

    started = ctx.find_root().obj
    early = started if isinstance(started, EarlyZygote) else EarlyZygote.begin(reap_at_close=True)
    ctx.call_on_close(early.close)
    return early


def _formats(as_json: bool, output_format: str | None, show_text: bool) -> tuple[str, bool, bool]:
    """stdout's format, whether it carries every event, whether it carries one object."""
    if as_json and output_format not in (None, "json"):
        raise click.UsageError(
            f"--json is --output-format json; give --output-format {output_format} alone"
        )
    # --json with --stream has always meant the events, one per line (jsonl).
    fmt = output_format or ("jsonl" if as_json and show_text else "json" if as_json else "text")
    events_out = show_text and fmt == "jsonl"  # stdout carries every event, one JSON line each
    return fmt, events_out, fmt != "text" and not events_out


def _settings() -> dict[str, Any]:
    """The run's settings, as flags, environment, profile and config files give them."""
    resolved = command_settings(("run",), "run")
    settings = resolved.values
    if settings["cache_path"] is None and resolved.sources["cache_mode"] != "default":
        raise click.UsageError("--cache-mode needs --cache PATH: the journal to replay from")
    if resolved.sources["model"] == "default":
        settings["model"] = model_or_blank(settings["provider"], None)
    if settings["provider"] != "fixture" or settings["sub_base_url"]:
        # httpx loads now, before the run's clock starts
        importlib.import_module("rlm.providers._http").load_http_transport()
    return settings


def _model(settings: dict[str, Any], trace_path: str | None, sinks: list[Any],
           tools: tuple[str, ...], early_zygote: EarlyZygote, *, as_json: bool) -> RLM:
    """The configured model; a hosted API without a key, or a missing isolation layer,
    stops here, before anything is read or sent."""
    from rlm._api import RLM
    from rlm._run.assembly import default_launcher
    from rlm._run.tools import load_tool
    from rlm._trace import check_trace_path

    if trace_path is not None:
        check_trace_path(trace_path)
    api_key = api_key_from_environment(settings["provider"])
    model = RLM(
        trace_path=trace_path, sinks=sinks, api_key=api_key, tools=[load_tool(t) for t in tools],
        sandboxes=functools.partial(default_launcher, early_zygote=early_zygote), **settings,
    )
    if not api_key and model.config.over_http:
        from rlm.providers.keys import missing_key_message  # httpx: not for fixture runs

        problem = missing_key_message(model.config)
        if problem:
            fail(problem, 4, as_json=as_json)
    if settings["require_isolation"]:
        from rlm.cli.doctor_cmd import require_isolation  # only when asked for

        require_isolation(settings["require_isolation"])
    return model


def _context(texts: tuple[str, ...], context_files: tuple[str, ...],
             more_paths: tuple[str, ...], encoding: str, glob_pattern: str,
             settings: dict[str, Any]) -> Context:
    """The run's context: ``--context`` texts, then what the paths hold."""
    from rlm._files import ReadLimits
    from rlm.cli._context_input import context_paths, read_context, warn_if_empty

    paths = context_paths(context_files, more_paths)
    limits = ReadLimits(settings["max_context_bytes"], settings["timeout"])
    for text in texts:
        limits.take(len(text.encode()), "--context")
    context = read_context(paths, encoding, glob_pattern, limits=limits) if paths else ""
    if texts:
        documents = [context] if isinstance(context, str) and paths else (
            [] if isinstance(context, str) else context)
        combined = [*texts, *documents]
        return combined[0] if len(combined) == 1 else combined
    warn_if_empty(paths, context)
    return context


def _live_output(events_out: bool) -> Callable[[Event], None]:
    from rlm.cli._live import JSONLines, LiveDisplay  # --stream only

    return JSONLines() if events_out else LiveDisplay()


def _progress_printer() -> Any:
    from rlm.cli._progress import ProgressPrinter  # rich: only when progress is shown

    return ProgressPrinter()


def _report(
    result: RunResult, *, as_json: bool, quiet: bool, events: bool = False, raw: bool = False,
    verbose: bool = False,
) -> None:
    if as_json:
        click.echo(json.dumps(result.to_dict(), ensure_ascii=False))
    elif events:
        pass  # stdout carried the events; run_finished holds the answer
    elif result.answer is not None:
        echo_exact(answer_for_stdout(result.answer, raw))
    if verbose and result.traffic:  # each lane's traffic: for tuning, not for every run
        from rlm.cli._progress import format_traffic

        summary = format_traffic(result.traffic)
        if summary:
            say(summary)
    if "fixture" in result.answered_by and not quiet:
        others = ", ".join(who for who in result.answered_by if who != "fixture")
        if others:  # --provider fixture with a real --sub-base-url
            say("note: the built-in fixture model (scripted, not a language model) wrote the "
                f"root's steps; {others} answered the sub-queries")
        else:
            who = "answered by" if result.answer is not None else "run on"
            say(f"note: {who} the built-in fixture model (scripted, not a language model)")
    if result.status != "answered":
        if result.status == "interrupted":  # what the person did, not an error
            say("interrupted")
        else:
            reason = result.error or {
                "iterations": "the root call gave no final answer within --max-iterations",
            }.get(result.status, result.status)
            say(f"Error: {reason}{_NEXT_STEP.get(result.status, '')}")
        from rlm.cli._progress import estimated_note, format_cost

        usage = result.usage
        partial = "a partial answer is on stdout" if result.answer else "no answer candidate"
        tokens = f"{usage.input_tokens:,} in / {usage.output_tokens:,} out tokens"
        if estimated := int(result.usage_detail.get("estimated_calls") or 0):
            tokens = f"~{tokens} ({estimated_note(estimated, usage.llm_calls)})"
        # Facts only: the line above says what stopped the run (a status word here, as
        # "timeout after 0.05s", contradicted a run that stopped before its --timeout).
        say(
            f"stopped after {result.duration_s:.2f}s: {partial}; "
            f"{plural(usage.llm_calls, 'LLM call')}, {tokens}, "
            f"{format_cost(result.usage_detail, usage.llm_calls)}"
        )


# What a person can do about a run that a limit ended (a budget's own message says
# which limit to raise).
_NEXT_STEP = {
    "iterations": " (raise --max-iterations, or ask a narrower question)",
}

