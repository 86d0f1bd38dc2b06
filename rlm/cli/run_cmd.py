"""``rlm run``: answer a query over a large context with the RLM loop."""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
from typing import TYPE_CHECKING, Any, get_args

import click
from click.core import ParameterSource

from rlm._config import DEFAULTS, PROVIDERS, TraceContent
from rlm._sizes import format_size
from rlm.cli._errors import fail
from rlm.cli._flags import model_or_blank, usage_message
from rlm.cli._limits import memory_size, optional_count, optional_duration
from rlm.cli._profile_option import profile_only_settings, profile_option
from rlm.cli._terminal import answer_for_stdout, plural, say
from rlm.errors import RLMError, UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

    from rlm._events import Event
    from rlm._result import RunResult

__all__ = ["run"]


@click.command()
@click.argument("query")
@click.argument("more_paths", nargs=-1, metavar="[PATH]...")
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
@click.option(
    "--base-url",
    envvar="RLM_BASE_URL",
    help="Endpoint (default: OpenAI's or Anthropic's, by --provider) [env: RLM_BASE_URL].",
)
@click.option("--model", envvar="RLM_MODEL", help="Root model [env: RLM_MODEL].")
@click.option("--sub-model", help="Model for sub-queries and child calls (default: --model).")
@click.option("--sub-base-url", help="Endpoint for sub-queries (default: --base-url).")
@click.option(
    "--provider",
    type=click.Choice(PROVIDERS),
    default=DEFAULTS.provider,
    show_default=True,
    envvar="RLM_PROVIDER",
    help="openai: any OpenAI-compatible endpoint; anthropic: the Messages API; fixture: "
    "the built-in scripted model, no key needed [env: RLM_PROVIDER].",
)
@click.option(
    "--max-depth",
    type=int,
    default=DEFAULTS.max_depth,
    show_default=True,
    help="Depth of the call tree: 1 makes every llm_query a one-shot sub-query.",
)
@click.option(
    "--max-iterations",
    type=int,
    default=DEFAULTS.max_iterations,
    show_default=True,
    help="Steps per call before it is asked for its final answer.",
)
@click.option(
    "--max-concurrent",
    type=int,
    default=DEFAULTS.max_concurrent,
    show_default=True,
    help="LLM requests in flight at once, all lanes together.",
)
@click.option(
    "--root-permits",
    type=int,
    default=DEFAULTS.root_permits,
    show_default=True,
    help="Permits reserved for root steps, so sub-queries never stall them.",
)
@click.option(
    "--max-llm-calls",
    type=str,
    default=DEFAULTS.max_llm_calls,
    callback=optional_count,
    metavar="N|none",
    show_default=True,
    help="Requests sent to providers, retries included: a ceiling a normal analysis never "
    "reaches but a runaway loop does; 'none' lifts it.",
)
@click.option("--max-input-tokens", type=int, help="Input tokens for the whole run.")
@click.option("--max-output-tokens", type=int, help="Output tokens for the whole run.")
@click.option("--max-total-tokens", type=int, help="Input + output tokens for the whole run.")
@click.option("--max-cost", type=float, help="USD for the whole run (see --prices).")
@click.option(
    "--prices",
    "prices_path",
    metavar="PATH",
    help="JSON price table (model → input/output/cached_input USD per token) on top of ours.",
)
@click.option("--max-tokens", type=int, help="Output tokens per request (sent to the provider).")
@click.option("--rpm", type=float, help="Requests per minute the provider allows (paced evenly).")
@click.option("--tpm", type=float, help="Tokens per minute the provider allows.")
@click.option(
    "--burst",
    type=int,
    default=DEFAULTS.burst,
    show_default=True,
    help="Requests that may go back to back before --rpm spacing applies.",
)
@click.option(
    "--max-retries",
    type=int,
    default=DEFAULTS.max_retries,
    show_default=True,
    help="Retries per request (429, 5xx, network); Retry-After is honoured.",
)
@click.option(
    "--adapt/--no-adapt",
    "adaptive",
    default=DEFAULTS.adaptive,
    show_default=True,
    help="Shrink sub-query concurrency when the provider pushes back; grow it back after.",
)
@click.option(
    "--timeout",
    type=str,
    default=DEFAULTS.timeout,
    callback=optional_duration,
    metavar="SECONDS|none",
    show_default=True,
    help="Wall-clock limit for the whole run (s); 'none' lifts it.",
)
@click.option(
    "--exec-timeout",
    type=float,
    default=DEFAULTS.exec_timeout,
    show_default=True,
    help="Limit for one code execution in the sandbox (s); waiting for served llm_query "
    "answers does not count, calls the budget refused do.",
)
@click.option(
    "--sandbox-memory",
    type=str,
    default=DEFAULTS.sandbox_memory,
    callback=memory_size,
    show_default=format_size(DEFAULTS.sandbox_memory),
    metavar="SIZE",
    help="Memory of one sandbox (e.g. 1GiB, 512MiB); a run's sandboxes together hold at "
    "most half this machine's memory.",
)
@click.option(
    "--max-output-chars",
    type=int,
    default=DEFAULTS.max_output_chars,
    show_default=True,
    help="Printed output shown to the model per code block.",
)
@click.option(
    "--require-isolation",
    default="",
    metavar="LAYER,...",
    callback=lambda ctx, param, value: _isolation_option(value),
    help="Refuse to run unless these sandbox layers are active ('all'; see `rlm doctor`).",
)
@click.option(
    "--cache",
    "cache_path",
    metavar="PATH",
    help="Replay answers to identical requests from this journal (a file, or a postgresql:// "
    "URL) and store new ones: a re-run sends nothing, an interrupted run resumes.",
)
@click.option(
    "--cache-mode",
    type=click.Choice(["read-write", "read-only", "refresh"]),
    default=DEFAULTS.cache_mode,
    show_default=True,
    help="read-only: replay, never store; refresh: never replay, store what is sent.",
)
@click.option("--trace", "trace_path", metavar="PATH", help="Write every event as JSONL to PATH.")
@click.option(
    "--trace-content",
    type=click.Choice(get_args(TraceContent)),
    default=DEFAULTS.trace_content,
    show_default=True,
    help="full: the trace keeps prompts, replies, code and outputs (`rlm view` shows them); "
    "meta: sizes and timings only, for sensitive inputs.",
)
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
    is_flag=True,
    help="Show the root's reply as it is written (stderr), code running as soon as its "
    "block closes; with --json or --output-format jsonl, every event as one JSON line on "
    "stdout.",
)
@click.option(
    "--stream-idle-timeout",
    type=float,
    default=DEFAULTS.stream_idle_timeout,
    show_default=True,
    help="A streamed reply with no bytes for this long fails its attempt (s).",
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
@click.option(
    "--tools",
    multiple=True,
    metavar="MODULE:FUNCTION",
    help="Offer a Python function to the model's code, by name (repeatable). It runs on "
    "this machine with your privileges: host code, not sandboxed.",
)
@profile_option
def run(
    query: str,
    more_paths: tuple[str, ...],
    context_files: tuple[str, ...],
    glob_pattern: str,
    encoding: str,
    as_json: bool,
    output_format: str | None,
    quiet: bool,
    trace_path: str | None,
    stream: bool,
    history: bool,
    view: bool,
    tools: tuple[str, ...],
    **settings: Any,
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
    # The sandbox zygote boots while the runtime is imported and the context read; the run
    # adopts it.  The `rlm` executable started it before parsing the command line
    # (rlm.cli._console); otherwise it starts now.  Closed on every exit path.
    from rlm._sandbox.early import EarlyZygote

    ctx = click.get_current_context()
    started = ctx.find_root().obj
    early_zygote = (
        started if isinstance(started, EarlyZygote) else EarlyZygote.begin(reap_at_close=True)
    )
    ctx.call_on_close(early_zygote.close)
    # Imported here, not at the top: `rlm --help` lists this command without loading the runtime.
    from rlm._api import RLM
    from rlm._result import STATUS_EXIT_CODES
    from rlm._run.runtime import default_launcher
    from rlm._run.tools import load_tool
    from rlm._trace import check_trace_path
    from rlm.cli._context_input import context_paths, read_context, warn_if_empty
    from rlm.cli._history import RunKeeper
    from rlm.cli._signals import run_with_signals

    if as_json and output_format not in (None, "json"):
        raise click.UsageError(
            f"--json is --output-format json; give --output-format {output_format} alone"
        )
    # --json with --stream has always meant the events, one per line (jsonl).
    fmt = output_format or ("jsonl" if as_json and stream else "json" if as_json else "text")
    events_out = stream and fmt == "jsonl"  # stdout carries every event, one JSON line each
    object_out = fmt != "text" and not events_out  # stdout carries one JSON object
    settings.update(profile_only_settings())
    if settings["cache_path"] is None and ctx.get_parameter_source("cache_mode") in (
        ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT
    ):
        raise click.UsageError("--cache-mode needs --cache PATH: the journal to replay from")
    settings["model"] = model_or_blank(settings["provider"], settings["model"])
    if settings["provider"] != "fixture":  # httpx loads now, before the run's clock starts
        importlib.import_module("rlm.providers._http").load_http_transport()
    vendor_key = "ANTHROPIC_API_KEY" if settings["provider"] == "anthropic" else "OPENAI_API_KEY"
    api_key = os.environ.get("RLM_API_KEY") or os.environ.get(vendor_key)
    printer = None if quiet or stream else _progress_printer()
    keeper = RunKeeper(keep=history, view=view, trace_path=trace_path, query=query)
    try:
        if trace_path is not None:
            check_trace_path(trace_path)
        sinks = [] if printer is None else [printer]
        functions = [load_tool(spec) for spec in tools]
        launcher = functools.partial(default_launcher, early_zygote=early_zygote)
        model = RLM(
            trace_path=trace_path, sinks=sinks, api_key=api_key, sandboxes=launcher,
            tools=functions, **settings
        )
        if not api_key and settings["provider"] != "fixture":
            from rlm.providers.keys import missing_key_message  # httpx: not for fixture runs

            problem = missing_key_message(model.config)
            if problem:
                fail(problem, 4, as_json=fmt != "text")
        if settings["require_isolation"]:
            from rlm.cli.doctor_cmd import require_isolation  # only when asked for

            require_isolation(settings["require_isolation"])
        paths = context_paths(context_files, more_paths)
        context = read_context(paths, encoding, glob_pattern)
        warn_if_empty(paths, context)
        on_event = _live_output(events_out) if stream else None
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
        fail("interrupted", 130, as_json=object_out)
    finally:
        if printer is not None:
            printer.close()
    keeper.close(result)
    _report(result, as_json=object_out, quiet=quiet, events=events_out)
    sys.exit(STATUS_EXIT_CODES.get(result.status, 1))


def _live_output(events_out: bool) -> Callable[[Event], None]:
    from rlm.cli._live import JSONLines, LiveDisplay  # --stream only

    return JSONLines() if events_out else LiveDisplay()


def _progress_printer() -> Any:
    from rlm.cli._progress import ProgressPrinter  # rich: only when progress is shown

    return ProgressPrinter()


def _report(result: RunResult, *, as_json: bool, quiet: bool, events: bool = False) -> None:
    if as_json:
        click.echo(json.dumps(result.to_dict(), ensure_ascii=False))
    elif events:
        pass  # stdout carried the events; run_finished holds the answer
    elif result.answer is not None:
        click.echo(answer_for_stdout(result.answer))
    if not quiet and result.traffic:
        from rlm.cli._progress import format_traffic

        summary = format_traffic(result.traffic)
        if summary:
            say(summary)
    if result.fixture and not quiet:
        who = "answered by" if result.answer is not None else "run on"
        say(f"note: {who} the built-in fixture model (scripted, not a language model)")
    if result.status != "answered":
        reason = result.error or {
            "iterations": "the root call gave no final answer within --max-iterations",
        }.get(result.status, result.status)
        say(f"Error: {reason}{_NEXT_STEP.get(result.status, '')}")
        from rlm.cli._progress import format_cost

        usage = result.usage
        partial = "a partial answer is on stdout" if result.answer else "no answer candidate"
        say(
            f"run {result.status} after {result.duration_s:.2f}s: {partial}; "
            f"{plural(usage.llm_calls, 'LLM call')}, {usage.input_tokens:,} in / "
            f"{usage.output_tokens:,} out tokens, "
            f"{format_cost(result.usage_detail, usage.llm_calls)}"
        )


# What a person can do about a run that a limit ended (a budget's own message says
# which limit to raise).
_NEXT_STEP = {
    "iterations": " (raise --max-iterations, or ask a narrower question)",
}


def _isolation_option(value: str) -> tuple[str, ...]:
    from rlm._sandbox.isolation import parse_layers

    try:
        return parse_layers(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
