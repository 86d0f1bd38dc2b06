"""``rlm chat``: a session at a prompt — follow-up questions keep the REPL's variables."""

from __future__ import annotations

import json
import os
import signal
import sys
from types import FrameType
from typing import Any, cast

import click

from rlm._api import RLM
from rlm._config import RunConfig, SessionOptions
from rlm._files import ReadLimits
from rlm._run.tools import load_tool
from rlm._session import Session
from rlm._settings import api_key_from_environment, settings_of
from rlm._settings_types import SessionSettings
from rlm._trace import check_trace_path
from rlm.cli._context_input import context_paths, read_context
from rlm.cli._errors import fail
from rlm.cli._flags import model_or_blank, usage_message
from rlm.cli._settings_cli import command_settings, settings_params
from rlm.cli._signals import TERMINATE_SIGNALS, insists, leave_terminal
from rlm.cli._terminal import RAW_HELP, answer_for_stdout, echo_exact, say
from rlm.cli.run_cmd import run
from rlm.errors import RLMError, UsageError
from rlm.providers.keys import missing_key_message

__all__ = ["chat"]

_BANNER = (
    "rlm chat: ask about the context; follow-ups keep the REPL's variables.\n"
    "Ctrl-C cancels the current question; /help lists the commands; Ctrl-D or /quit ends."
)


def _chat(
    context_files: tuple[str, ...],
    more_paths: tuple[str, ...],
    glob_pattern: str,
    encoding: str,
    as_json: bool,
    tools: tuple[str, ...],
    load: str | None,
    save: str | None,
    trace_path: str | None,
    raw: bool,
) -> None:
    """Ask questions about a large context, one after another, in one session.

    The root call stays alive between questions: its sandbox keeps the
    variables earlier answers computed, and the conversation goes on without
    describing the context again.  On a terminal it is a prompt with line
    editing; with --json (or from a pipe) it reads one question per line and
    writes one JSON object per answer.  --tools module:function offers your
    own Python functions to the model's code: they run on this machine with
    your privileges.  Each question is bounded like one rlm run (--max-llm-calls,
    --max-cost); --max-total-llm-calls and --max-total-cost bound the whole chat.

    \b
    Examples:
      rlm fixture needle --chars 2000000 > big.txt
      rlm chat --context-file big.txt --provider fixture
      printf 'What is the magic number?\\nHow many chunks did you search?\\n' | \\
          rlm chat --context-file big.txt --provider fixture --json
    """
    resolved = command_settings(("run", "session"), "chat")
    settings = resolved.scope(settings_of(RunConfig))
    options = cast(SessionSettings, resolved.scope(settings_of(SessionOptions)))
    if resolved.sources["model"] == "default":
        settings["model"] = model_or_blank(settings["provider"], None)
    api_key = api_key_from_environment(settings["provider"])
    interactive = sys.stdin.isatty() and not as_json
    try:
        if save is not None:
            _check_writable(save)
        if trace_path is not None:
            check_trace_path(trace_path)
        functions = [load_tool(spec) for spec in tools]
        # At a prompt, a question's progress shows (a spinner and its steps), as a run's does.
        sinks = [_progress_printer()] if interactive else []
        model = RLM(api_key=api_key, tools=functions, trace_path=trace_path, sinks=sinks,
                    **settings)
        if not api_key:
            problem = missing_key_message(model.config)
            if problem:
                fail(problem, 4, as_json=as_json)
        if model.config.cache_path is not None:
            _check_cache(model.config.cache_path, model.config.cache_mode)
        limits = ReadLimits(settings["max_context_bytes"], settings["timeout"])
        context = read_context(context_paths(context_files, more_paths), encoding, glob_pattern,
                               limits=limits)
        if load is not None:
            session = RLM.load_session(
                load, context, session_options=options, api_key=api_key, tools=functions,
                trace_path=trace_path, sinks=sinks,
            )
        else:
            session = model.session(context, **options)
    except RLMError as exc:
        fail(usage_message(exc, chat), exc.exit_code, as_json=as_json)
    exit_code = 0
    previous = {sig: signal.signal(sig, _terminate) for sig in TERMINATE_SIGNALS}
    try:
        try:
            try:
                if interactive:
                    import readline  # noqa: F401  (line editing and history for input())

                    say(_BANNER)
                exit_code = _loop(session, interactive=interactive, as_json=as_json, raw=raw,
                                  save=save)
            finally:  # a second SIGTERM while saving ends at once; a hang-up never does
                for sig, handler in previous.items():
                    signal.signal(sig, handler if insists(sig) else signal.SIG_IGN)
        except _Terminated:  # as `rlm run` and `rlm volley` end on it; the chat is still saved
            say("Error: terminated")
            exit_code = 130
        if save is not None:
            skipped = session.save(save)
            note = f" (not plain data, left out: {', '.join(skipped)})" if skipped else ""
            say(f"session saved to {save}{note}")
    finally:
        session.close()
    sys.exit(exit_code)


def _check_cache(path: str, mode: str) -> None:
    """Open the --cache journal once before the chat starts: a bad path is one error, not
    the same error for every question (with exit code 0)."""
    from rlm.journal import parse_cache_mode  # only chats that cache
    from rlm.journal.cache import open_cache_store

    open_cache_store(path, parse_cache_mode(mode)).close()


def _check_writable(path: str) -> None:
    """Refuse a --save path that cannot be written before the chat starts, not after it."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"--save {path}: the folder {folder} does not exist; create it first")
    if not os.access(folder, os.W_OK) or os.path.isdir(path):
        raise UsageError(f"--save {path}: cannot write there; pick a file in a writable folder")


#: Words at the prompt that are the chat's own, not questions (and so are /help, /save…).
_WORDS = {"help": "/help", "exit": "/quit", "quit": "/quit"}
_HELP = """Commands:
  /help          this list (or: help)
  /save [PATH]   save the conversation and variables now (PATH: --save's, if given)
  /quit          end the chat (or: exit, quit, Ctrl-D)
Anything else is a question about the context. Ctrl-C cancels the question in progress."""


def _command(session: Session, line: str, save: str | None) -> bool:
    """Do chat command ``line``; True when it ends the chat."""
    name, _, argument = _WORDS.get(line, line).partition(" ")
    if name == "/quit":
        return True
    if name == "/help":
        say(_HELP)
    elif name == "/save" and (argument.strip() or save):
        target = argument.strip() or str(save)
        try:
            _check_writable(target)
            skipped = session.save(target)
        except RLMError as exc:
            say(f"Error: {exc}")
            return False
        note = f" (not plain data, left out: {', '.join(skipped)})" if skipped else ""
        say(f"session saved to {target}{note}")
    elif name == "/save":
        say("Error: /save needs a path (/save session.json), or start the chat with --save")
    else:
        say(f"Error: unknown command {name} (/help lists them)")
    return False


def _progress_printer() -> Any:
    from rlm.cli._progress import ProgressPrinter  # rich: only at a prompt

    return ProgressPrinter()


class _Terminated(Exception):
    """SIGTERM or SIGHUP: end the chat as end of input does (the session is saved), exit 130."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    leave_terminal(signum)
    raise _Terminated


def _loop(session: Session, *, interactive: bool, as_json: bool, raw: bool = False,
          save: str | None = None) -> int:
    """Answer questions until end of input; the exit code (4 when credentials were refused).
    SIGTERM or SIGHUP raises _Terminated out of it, the question in progress cancelled."""
    while True:
        try:
            line = input("rlm> " if interactive else "")
        except EOFError:
            if interactive:
                click.echo("", err=True)
            return 0
        except KeyboardInterrupt:
            click.echo("", err=True)
            continue
        query = line.strip()
        if not query:
            continue
        if interactive and (query in _WORDS or query.startswith("/")):
            if _command(session, query, save):
                return 0
            continue
        try:
            result = session.completion(query)
        except KeyboardInterrupt:
            session.interrupt()
            say("(cancelled)")
            continue
        except _Terminated:
            session.interrupt()
            say("(cancelled)")
            raise
        except RLMError as exc:
            if as_json:
                click.echo(json.dumps({"query": query, "status": "error", "error": str(exc)}))
            else:
                say(f"Error: {exc}")
            if exc.exit_code == 4:
                return 4
            continue
        if as_json:
            shown = {"query": query, **result.to_dict()}
            click.echo(json.dumps(shown, ensure_ascii=False))
        else:
            shown_answer = result.answer if result.answer is not None else f"({result.status})"
            echo_exact(answer_for_stdout(shown_answer, raw))
            if result.status != "answered":  # the reason says which limit, and how to lift it
                reason = f": {result.error}" if result.error else ""
                say(f"the question ended with status {result.status}{reason}")


#: ``rlm run``'s options that a chat shares: its input and its host tools.
_SHARED = {"more_paths", "context_files", "glob_pattern", "encoding", "tools"}

chat = click.Command(
    "chat",
    callback=_chat,
    help=_chat.__doc__,
    params=[
        *(param for param in run.params if param.name in _SHARED),
        click.Option(
            ["--json", "as_json"],
            is_flag=True,
            help="Read one question per line; write one JSON object per answer.",
        ),
        click.Option(
            ["--trace", "trace_path"],
            metavar="PATH",
            help="Write each question's events as JSONL: question n to PATH.n.jsonl "
            "(chat.jsonl → chat.1.jsonl, chat.2.jsonl …; open one with `rlm view`).",
        ),
        click.Option(["--load"], metavar="PATH", help="Resume a session saved with --save."),
        click.Option(["--raw"], is_flag=True, help=RAW_HELP),
        click.Option(
            ["--save"], metavar="PATH", help="At the end, save the conversation and variables."
        ),
        *settings_params("chat"),
    ],
)
