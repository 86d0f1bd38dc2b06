"""``rlm volley list`` and ``rlm volley show``: the journal's volleys, read back.

Reading takes no write lock: both answer at once while workers write to the journal.
"""

from __future__ import annotations

import datetime
import json
import sys
from typing import Any

import click

from rlm.cli._progress import stderr_console
from rlm.cli._settings_cli import settings_options
from rlm.cli._terminal import echo_exact, plural, raw_option, safe_text
from rlm.cli._volley_run import open_volleys, volley_options
from rlm.cli.volley_board import board_text
from rlm.errors import RLMError
from rlm.journal import default_journal_path
from rlm.volley.board import Board, read_board
from rlm.volley.output import OrderedWriter
from rlm.volley.readback import stored_result

__all__ = ["list_cmd", "show_cmd"]


def _fail(exc: RLMError) -> None:
    click.echo(f"Error: {exc}", err=True)
    sys.exit(exc.exit_code)


@click.command("list")
@click.option(
    "--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@settings_options("volley list")
def list_cmd(output_format: str) -> None:
    """List the journal's volleys, newest first: tasks done/failed/open and cost so far."""
    try:
        if volley_options("volley list").journal is None and not default_journal_path().exists():
            rows = []  # nothing has made the default journal yet
        else:
            with open_volleys("volley list", stderr_console(), existing=True) as journal:
                rows = journal.store.volleys()
    except RLMError as exc:
        _fail(exc)
    items: list[dict[str, Any]] = [
        {
            "volley_id": row.volley_id,
            "created": _iso(row.created_at),
            "tasks": row.total,
            "done": row.counts["done"],
            "failed": row.counts["failed"],
            "open": row.counts["open"],
            "in_progress": row.counts["in_progress"],
            "cost": round(row.spent.cost, 8),
            "llm_calls": row.spent.calls,
        }
        for row in rows
    ]
    if output_format == "json":
        click.echo(json.dumps(items, ensure_ascii=False))
        return
    if not items:
        click.echo("no volleys yet", err=True)
    for item in items:
        click.echo(
            f"{item['volley_id']}  {item['created']}  {plural(item['tasks'], 'task')}: "
            f"{item['done']} done, {item['failed']} failed, "
            f"{item['open'] + item['in_progress']} open  ${item['cost']:.4f}"
        )


@click.command("show")
@click.argument("volley_ref", metavar="ID|last")
@click.option(
    "--output-format",
    type=click.Choice(["text", "json", "jsonl"]),
    default="text",
    show_default=True,
)
@click.option("--board", is_flag=True,
              help="Print the pool's board instead of the results: each task in progress "
                   "with its holder and heartbeat, each worker's tasks, tokens, cost and "
                   "share, the pool's efficiency (text or json). `rlm volley watch` "
                   "redraws it.")
@raw_option
@settings_options("volley show")
def show_cmd(volley_ref: str, output_format: str, board: bool, raw: bool) -> None:
    """Print volley ID (or the latest) from the journal, every task in task order."""
    try:
        with open_volleys("volley show", stderr_console(), existing=True) as journal:
            volley_id = journal.resolve(volley_ref)
            if board:
                _print_board(read_board(journal.store, volley_id), output_format)
                return
            result = stored_result(journal.store, volley_id)
    except RLMError as exc:
        _fail(exc)
    writer = OrderedWriter(output_format, len(result.tasks), echo_exact,  # type: ignore[arg-type]
                           clean=str if raw else safe_text)
    writer.finish(result)


def _print_board(board: Board, output_format: str) -> None:
    if output_format == "text":
        click.echo(board_text(board))
    else:
        click.echo(json.dumps(board.to_dict(), ensure_ascii=False))


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="seconds")
