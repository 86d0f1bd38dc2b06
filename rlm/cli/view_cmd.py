"""``rlm view``: turn a trace into one self-contained HTML page."""

from __future__ import annotations

import sys
import webbrowser
from pathlib import Path

import click

from rlm.errors import UsageError

__all__ = ["view"]


@click.command()
@click.argument("trace", metavar="TRACE")
@click.option("-o", "--output", "output", metavar="PATH",
              help="Where to write the page (default: the trace's path with .html).")
@click.option("--open", "open_page", is_flag=True, help="Open the page in your browser.")
def view(trace: str, output: str | None, open_page: bool) -> None:
    """Write a page that shows the run recorded in TRACE (a `--trace` JSONL file).

    The page is one HTML file with everything inline (no network, no server):
    the overview (query, answer, usage, cost, settings, isolation), the call
    tree with every step's reply, code, output and sub-queries, a timeline of
    every LLM attempt, code execution and sandbox start, and where the time
    went.  A trace cut short by a killed run shows what it has.

    \b
    Examples:
      rlm run "What is the magic number?" --context-file big.txt --provider fixture \\
          --trace run.jsonl && rlm view run.jsonl --open
      rlm view run.jsonl -o /tmp/run.html
    """
    from rlm.view import load_trace, write_page  # the page assets load only for this command

    try:
        source = Path(trace)
        loaded = load_trace(source)
        target = Path(output) if output else source.with_suffix(".html")
        if target.resolve() == source.resolve():
            raise UsageError(f"the page would overwrite the trace {source}: pass -o PATH")
        page = write_page(loaded, target)
    except UsageError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(exc.exit_code)
    for note in loaded.notices():
        click.echo(f"note: {note}", err=True)
    click.echo(str(page))
    if open_page and not webbrowser.open(page.resolve().as_uri()):
        click.echo(f"note: no browser could be opened; open {page} yourself", err=True)
