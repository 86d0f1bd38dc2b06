"""``rlm view``: turn a trace into one self-contained HTML page."""

from __future__ import annotations

import glob
import sys
import webbrowser
from pathlib import Path

import click

from rlm._symbols import symbol
from rlm._trace import half_written
from rlm.errors import UsageError

__all__ = ["view"]


@click.command()
@click.argument("trace", metavar="TRACE|last|ID")
@click.option("-o", "--output", "output", metavar="PATH",
              help="Where to write the page (default: the trace's path with .html).")
@click.option("--open", "open_page", is_flag=True, help="Open the page in your browser.")
def view(trace: str, output: str | None, open_page: bool) -> None:
    """Write a page that shows a run: a `--trace` JSONL file, or a run from the history.

    `last` is the newest run in the history (`last~1` the one before), an ID or
    the start of one names any run `rlm runs` lists; its page is written next
    to its trace in the history unless -o says where.

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
      rlm view last --open
    """
    from rlm.view import load_trace, write_page  # the page assets load only for this command

    try:
        source = _resolve(trace)
        if not source.exists() and (found := half_written(source)) is not None:
            click.echo(f"note: {source} was never written in full; reading the unfinished "
                       f"{found}", err=True)
            source = found
        if not source.exists() and (numbered := _per_question(source)):
            more = f", {symbol('more')}" if len(numbered) > 3 else ""
            listed = ", ".join(p.name for p in numbered[:3]) + more
            raise UsageError(f"no trace file at {source}: a chat given --trace {source.name} "
                             f"writes one per question ({listed}); view one of those, e.g. "
                             f"`rlm view {numbered[0]}`")
        loaded = load_trace(source)
        target = Path(output) if output else _page_beside(source)
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


def _resolve(ref: str) -> Path:
    """A trace file's path: ``ref`` itself, or the trace of the history's run ``ref`` names."""
    path = Path(ref)
    if path.exists() or path.suffix or "/" in ref:
        return path
    from rlm.history import RunHistory

    entry = RunHistory().find(ref)
    trace = entry.trace_file()
    if trace is None:
        raise UsageError(f"run {entry.id} has no trace (it was killed before writing one)")
    return trace


def _per_question(trace: Path) -> list[Path]:
    """``chat.1.jsonl``, ``chat.2.jsonl`` … beside ``chat.jsonl`` (a session's traces), in order."""
    pattern = f"{glob.escape(trace.stem)}.*{glob.escape(trace.suffix)}"
    found: dict[int, Path] = {}
    for path in trace.parent.glob(pattern):
        number = path.name[len(trace.stem) + 1:len(path.name) - len(trace.suffix)]
        if number.isdigit():
            found[int(number)] = path
    return [found[n] for n in sorted(found)]


def _page_beside(trace: Path) -> Path:
    """``run.jsonl`` → ``run.html``; a killed run's ``.run.jsonl.PID.part`` → ``run.html``."""
    stem, pid, part = trace.name.rsplit(".", 2) if trace.name.count(".") >= 3 else ("", "", "")
    if trace.name.startswith(".") and part == "part" and pid.isdigit():
        return trace.with_name(stem[1:]).with_suffix(".html")
    return trace.with_suffix(".html")
