"""``rlm volley cancel ID``: cancel a volley's provider batches (``--batch-api``).

The command parses, calls :meth:`rlm.volley.journaled.JournaledVolley.cancel` and
prints: one line per batch as the provider answers, then the volley's summary.
"""

from __future__ import annotations

import sys
from functools import partial

import click
import trio

from rlm.cli._flags import usage_message
from rlm.cli._progress import stderr_console
from rlm.cli._settings_cli import settings_options
from rlm.cli._volley_run import drive, open_volleys, require_key, volley_settings
from rlm.errors import RLMError
from rlm.volley.output import format_summary
from rlm.volley.progress import BatchLines

__all__ = ["cancel_cmd"]


@click.command("cancel")
@click.argument("volley_ref", metavar="ID|last")
@settings_options("volley cancel")
def cancel_cmd(volley_ref: str) -> None:
    """Cancel volley ID's batches at the provider (a volley sent with --batch-api).

    Each batch the provider still runs is cancelled there; what it answered
    before the cancel took effect is kept (it is paid for), and every task still
    without a verdict fails as cancelled.  `rlm volley --resume ID` runs those
    again; with --skip-failed nothing more is sent.  The key is read from
    RLM_API_KEY (or OPENAI_API_KEY / ANTHROPIC_API_KEY), as for the volley.

    \b
    Exit codes: 0 cancelled · 1 the provider or the journal failed · 2 usage
    error · 4 credentials refused · 130 interrupted (`rlm volley cancel ID`
    again finishes it).
    """
    err = stderr_console()
    try:
        with open_volleys("volley cancel", err, existing=True) as journal:
            stored = journal.load(volley_ref)
            config, options = volley_settings("volley cancel", stored=stored.settings)
            require_key(config, options if options.batch_api else None)
            result = trio.run(partial(
                journal.cancel, stored, config, options,
                main=drive, sinks=[BatchLines(err)],
            ))
    except RLMError as exc:
        click.echo(f"Error: {usage_message(exc, cancel_cmd)}", err=True)
        sys.exit(exc.exit_code)
    click.echo(format_summary(result))
    if result.status == "interrupted":
        click.echo(f"Error: interrupted; `rlm volley cancel {result.volley_id}` again "
                   "finishes cancelling", err=True)
        sys.exit(130)
