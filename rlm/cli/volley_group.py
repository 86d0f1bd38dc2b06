"""``rlm volley``: run a volley, or manage volleys in the journal.

``rlm volley [TASK ...] [flags]`` runs a volley (create + work + show in one
process).  ``rlm volley create|work|list|show|cancel`` are the journal's
subcommands; any other first argument goes to the plain command, so a task
that is literally one of those words needs ``rlm volley -- list``.
"""

from __future__ import annotations

import inspect

import click

from rlm.cli.volley_board import watch_cmd
from rlm.cli.volley_cancel import cancel_cmd
from rlm.cli.volley_cmd import volley
from rlm.cli.volley_pool import create_cmd, work_cmd
from rlm.cli.volley_show import list_cmd, show_cmd

__all__ = ["DefaultCommandGroup", "volley_group"]

_SUBCOMMANDS = """
\b
Subcommands (the journal):
  rlm volley create ...        record a volley, print its id; nothing is sent
  rlm volley work ID [--pool N] run workers on it (any number, any machine)
  rlm volley list              the journal's volleys: done/failed/open, cost
  rlm volley show ID|last      a volley's results in task order (--board: its pool)
  rlm volley watch ID|last     a live board of the pool while workers run
  rlm volley cancel ID|last    cancel its provider batches (--batch-api)
"""


class _DefaultContext(click.Context):
    """The default command's context: its usage line names ``rlm volley`` (``rlm eval``), not
    ``rlm volley run``.

    ``run`` is only how the group dispatches; nobody types it.
    """

    @property
    def command_path(self) -> str:
        return self.parent.command_path if self.parent is not None else super().command_path


class DefaultCommandGroup(click.Group):
    """A group whose first argument, unless it names a subcommand, belongs to ``default``
    (``rlm volley``, ``rlm eval``); ``listing`` names the subcommands in its help."""

    def __init__(self, default: click.Command, *, name: str = "volley",
                 listing: str = _SUBCOMMANDS) -> None:
        # A docstring's indentation, cleaned before the flush-left subcommands are added.
        help_text = inspect.cleandoc(default.help or "") + "\n" + listing
        super().__init__(
            name,
            help=help_text,
            short_help=default.short_help or "Run many independent tasks through one gate.",
            context_settings={"ignore_unknown_options": True},
        )
        self.default = default
        default.context_class = _DefaultContext
        # `rlm volley --help` is the default command's help (its options are the ones
        # people type): it lists the subcommands too, or nobody would find them.
        default.help = help_text
        self.add_command(default, "run")

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or args[0] not in self.commands or args[0] == "run":
            args = ["run", *args]
        return super().parse_args(ctx, args)


volley_group = DefaultCommandGroup(volley)
for _command in (create_cmd, work_cmd, list_cmd, show_cmd, cancel_cmd, watch_cmd):
    volley_group.add_command(_command)
