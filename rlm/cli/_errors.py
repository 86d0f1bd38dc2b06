"""How every ``rlm`` command ends when something goes wrong: one ``Error:`` line, no traceback.

A traceback is for developers; a person who typed a command gets what
happened and what to do.  ``--debug`` (or ``RLM_DEBUG=1``) shows the
traceback when it is wanted.  Exception groups from trio nurseries are
unwrapped to the error inside them, so an environment problem found deep in
a nursery reads the same as one found on the surface.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from rlm._spelling import settings_spelled_as
from rlm.cli._console import caused_by_interrupt
from rlm.cli._flags import cli_setting
from rlm.cli._terminal import say, silence
from rlm.errors import RLMError

__all__ = ["RLMGroup", "debug_wanted", "echo_json_error", "fail", "leaf_error"]

DEBUG_HINT = "run again with --debug (or RLM_DEBUG=1) to see the traceback"


def debug_wanted(args: Sequence[str] = ()) -> bool:
    """Whether the person asked for tracebacks (``--debug`` before ``--``, or RLM_DEBUG)."""
    if os.environ.get("RLM_DEBUG", "").strip().lower() not in ("", "0", "false", "no"):
        return True
    options = list(args)[: list(args).index("--")] if "--" in args else list(args)
    return "--debug" in options


def leaf_error(exc: BaseException) -> BaseException:
    """The error inside (nested) exception groups: the first RLMError, else the first leaf."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    leaves = [leaf_error(inner) for inner in exc.exceptions]
    return next((leaf for leaf in leaves if isinstance(leaf, RLMError)), leaves[0])


def fail(message: str, code: int, *, as_json: bool = False) -> NoReturn:
    """Print ``Error: message`` on stderr (and a JSON error object on stdout with --json)."""
    if as_json:
        echo_json_error(message, code)
    say(f"Error: {message}")
    sys.exit(code)


def echo_json_error(message: str, code: int) -> None:
    """The ``--json`` shape of a run that never started: no answer, a status, the error."""
    status = "usage_error" if code == 2 else "error"
    click.echo(json.dumps({"answer": None, "status": status, "error": message, "exit_code": code}))


class RLMGroup(click.Group):
    """The ``rlm`` group: bare ``rlm`` prints help, errors never print a traceback."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Shell completion parses `rlm <TAB>` with no arguments too (resiliently): it wants
        # the command names, not the help text.
        if not args and not ctx.resilient_parsing:
            click.echo(ctx.get_help())
            ctx.exit(0)
        return super().parse_args(ctx, args)

    def main(self, args: Sequence[str] | None = None, *extra: Any, **kwargs: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        if debug_wanted(argv):  # --debug is understood anywhere, as `rlm doctor --debug` reads
            os.environ["RLM_DEBUG"] = "1"
            end = argv.index("--") if "--" in argv else len(argv)
            argv = [a for a in argv[:end] if a != "--debug"] + argv[end:]
        kwargs["standalone_mode"] = False
        try:
            with settings_spelled_as(cli_setting):  # a limit's message names its flag
                code = super().main(argv, *extra, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:  # `rlm config` alone: help, not a mistake
            click.echo(exc.format_message())  # on stdout, like bare `rlm` (it can be paged)
            sys.exit(0)
        except click.UsageError as exc:
            if "--json" in argv:
                echo_json_error(exc.format_message(), exc.exit_code)
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort as exc:
            if isinstance(exc.__context__, KeyboardInterrupt):  # click's own Ctrl-C handling
                say("interrupted")
                sys.exit(130)
            say("Aborted!")
            sys.exit(1)
        except (KeyboardInterrupt, EOFError):
            say("interrupted")
            sys.exit(130)
        except BaseExceptionGroup as group:  # from inside trio nurseries (`rlm bench`, a stream)
            self._grouped(group, argv)
        except OSError as exc:
            if isinstance(exc, BrokenPipeError):  # stdout's reader went away: nothing to tell
                silence(1)
                sys.exit(1)
            self._unexpected(exc, argv)
        except Exception as exc:
            self._unexpected(exc, argv)
        sys.exit(code if isinstance(code, int) else 0)

    @classmethod
    def _grouped(cls, group: BaseExceptionGroup[BaseException], argv: list[str]) -> NoReturn:
        """A nursery's errors: Ctrl-C and a vanished reader read as they do on their own."""
        if group.subgroup(KeyboardInterrupt) is not None:  # Ctrl-C landed inside a nursery
            say("interrupted")
            sys.exit(130)
        if isinstance(leaf_error(group), BrokenPipeError):  # `rlm ... | head`: nothing to tell
            silence(1)
            sys.exit(1)
        if not isinstance(group, Exception):  # SystemExit, GeneratorExit: not ours to report
            raise group
        cls._unexpected(group, argv)

    @staticmethod
    def _unexpected(exc: Exception, argv: list[str]) -> NoReturn:
        if caused_by_interrupt(exc):  # a Ctrl-C that Python or a library wrapped
            say("interrupted")
            sys.exit(130)
        if debug_wanted(argv):
            traceback.print_exception(exc)
        inner = leaf_error(exc)
        if isinstance(inner, RLMError):
            say(f"Error: {inner}")
            sys.exit(inner.exit_code)
        detail = str(inner) or type(inner).__name__
        hint = "" if debug_wanted(argv) else f" ({DEBUG_HINT})"
        say(f"Error: {type(inner).__name__}: {detail}{hint}")
        sys.exit(1)
