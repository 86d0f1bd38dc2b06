"""``rlm runs``: the run history — list past runs, show one."""

from __future__ import annotations

import datetime
import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from rlm._symbols import symbol
from rlm.errors import UsageError
from rlm.history import RunHistory

__all__ = ["runs"]


def _fail(exc: UsageError) -> None:
    click.echo(f"Error: {exc}", err=True)
    sys.exit(exc.exit_code)


def _when(started: Any) -> str:
    try:
        moment = datetime.datetime.fromisoformat(str(started))
    except ValueError:
        return "?"
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _money(cost: Any) -> str:
    return f"{symbol('none')}" if cost is None else f"${float(cost):.4f}"


def _seconds(value: Any) -> str:
    return f"{symbol('none')}" if value is None else f"{float(value):.2f}s"


@click.group(invoke_without_command=True)
@click.option("-n", "--limit", type=int, default=20, show_default=True,
              help="How many of the newest runs to list (0: all).")
@click.option("--json", "as_json", is_flag=True, help="One JSON array, newest first.")
@click.pass_context
def runs(ctx: click.Context, limit: int, as_json: bool) -> None:
    """List the runs kept in the run history, newest first.

    Every `rlm run` keeps its trace and summary in the user's state directory
    (unless --no-history, or RLM_HISTORY=off; RLM_HISTORY_MAX_MB caps its size,
    oldest runs go first).

    \b
    Examples:
      rlm runs
      rlm runs show last
      rlm view last --open
    """
    if ctx.invoked_subcommand is not None:
        return
    history = RunHistory()
    entries = history.entries()
    if limit > 0:
        entries = entries[-limit:]
    summaries = [e.summary() for e in reversed(entries)]
    if as_json:
        click.echo(json.dumps(summaries, ensure_ascii=False))
        return
    if not summaries:
        click.echo(f"no runs yet in {history.root}", err=True)
        return
    columns = ("id", "when", "status", "LLM calls", "cost", "duration", "query")
    rows = [_row(s) for s in summaries]
    if not sys.stdout.isatty():  # a script reads it: tab-separated columns, nothing to strip
        for row in (columns, *rows):
            click.echo("\t".join(row))
        return
    table = Table(title=f"runs in {history.root}", title_justify="left")
    for column in columns:
        table.add_column(column, no_wrap=column != "query",
                         justify="right" if column in ("LLM calls", "cost", "duration")
                         else "left")
    for row in rows:
        table.add_row(*row[:-1], row[-1][:80])
    Console(highlight=False).print(table)


def _row(s: dict[str, Any]) -> tuple[str, ...]:
    query = " ".join(str(s.get("query") or "").split())
    if s.get("kind") == "volley":
        query = f"volley: {query}"
    return (s["id"], _when(s.get("started")), str(s.get("status")),
            str(s.get("llm_calls", "-")), _money(s.get("cost")), _seconds(s.get("duration_s")),
            query)


@runs.command("show")
@click.argument("ref", default="last")
@click.option("--json", "as_json", is_flag=True, help="The summary as one JSON object.")
def show(ref: str, as_json: bool) -> None:
    """Print the summary of run REF (an ID or its prefix, `last`, `last~1`, ...)."""
    try:
        summary = RunHistory().find(ref).summary()
    except UsageError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(summary, ensure_ascii=False))
        return
    order = ("id", "started", "status", "query", "answer", "error", "model", "sub_model",
             "provider", "max_depth", "calls", "llm_calls", "input_tokens", "output_tokens",
             "cost", "duration_s", "trace", "user_trace")
    width = max(len(k) for k in order)
    for key in order:
        value = summary.get(key)
        if value is None and key in ("error", "user_trace", "sub_model"):
            continue
        if key == "started":
            value = _when(value)
        click.echo(f"{key:<{width}}  {value if value is not None else symbol('none')}")
