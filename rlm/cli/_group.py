"""The top-level click group, whose commands are imported only when used.

``rlm run`` imports the run command and the runtime, not the benchmark or the
fixture server; ``rlm --version`` imports nothing but click.  ``rlm --help``
imports every command module for its one-line help, so command modules keep
their heavy imports (trio, httpx, rich, the runtime) inside the functions that
need them.  A new command goes into ``COMMANDS``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click

from rlm.cli._errors import RLMGroup
from rlm.cli._terminal import survive_hangups

__all__ = ["COMMANDS", "LazyGroup", "main"]

# Command name → "module:attribute" of its click command.
COMMANDS: Mapping[str, str] = {
    "bench": "rlm.cli.bench_cmd:bench",
    "chat": "rlm.cli.chat_cmd:chat",
    "config": "rlm.cli.config_cmd:config_group",
    "doctor": "rlm.cli.doctor_cmd:doctor",
    "eval": "rlm.cli.eval_cmd:eval_group",
    "fixture": "rlm.cli.fixture_generators:fixture_group",
    "fixture-server": "rlm.cli.fixture_cmds:fixture_server",
    "mcp": "rlm.cli.mcp_cmd:mcp",
    "run": "rlm.cli.run_cmd:run",
    "runs": "rlm.cli.runs_cmd:runs",
    "view": "rlm.cli.view_cmd:view",
    "volley": "rlm.cli.volley_group:volley_group",
}


class LazyGroup(RLMGroup):
    """The ``rlm`` group, importing a command's module the first time it is looked up.

    Commands added with ``add_command`` work as usual, next to the lazy ones.
    """

    def __init__(self, *args: Any, lazy: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """A mistyped command name gets a "did you mean" (``rlm volly``: ``volley``)."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            import difflib  # only for a mistake: not loaded on every start

            name = args[0] if args else ""
            close = difflib.get_close_matches(name, self.list_commands(ctx), n=1)
            if close and not name.startswith("-"):
                raise click.UsageError(
                    f"{exc.format_message()} Did you mean {close[0]!r}?", ctx=exc.ctx
                ) from None
            raise

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in self._lazy:
            return command
        module_name, _, attribute = self._lazy[cmd_name].partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self._lazy[cmd_name]} is not a click command")
        self.add_command(command, cmd_name)
        return command


@click.group(
    cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(None, "-V", "--version", package_name="rlm")
@click.option(
    "--debug",
    is_flag=True,
    expose_value=False,
    help="Show the traceback when a command fails (or set RLM_DEBUG=1).",
)
def main() -> None:
    """rlm: run recursive language models fast, bounded and sandboxed.

    The root model never reads a huge input directly: the input sits as
    `context` in a sandboxed Python REPL, the model writes code that slices and
    searches it, and calls sub-models on the pieces with llm_query /
    llm_query_batched.

    \b
    Examples:
      rlm fixture needle --chars 2000000 > big.txt
      rlm run "What is the magic number?" --context-file big.txt --provider fixture
      RLM_API_KEY=... rlm run "Summarise the errors" --context-file app.log \\
          --base-url https://api.openai.com/v1 --model gpt-4.1-mini

    The built-in fixture model (--provider fixture, rlm fixture-server) is a
    scripted stand-in for demos, tests and benchmarks: it is not a language
    model, and its answers say so in their metadata.
    """
    survive_hangups()
