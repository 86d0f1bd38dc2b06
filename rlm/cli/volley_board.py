"""A volley's board on the command line: ``rlm volley show ID --board`` prints it once,
``rlm volley watch ID`` redraws it while workers run (:mod:`rlm.volley.board`).

Both only read the journal: no write lock, so they never slow or stop a worker, and
any number of them may watch one volley from any machine that reaches its journal.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

import click

from rlm._durations import format_duration, parse_duration
from rlm._sizes import format_count
from rlm.cli._progress import stderr_console
from rlm.cli._settings_cli import settings_options
from rlm.cli._terminal import plural, safe_text
from rlm.cli._volley_run import open_volleys
from rlm.errors import RLMError
from rlm.volley.board import Board, Holding, WorkerLine, read_board
from rlm.volley.output import heartbeat_age

__all__ = ["board_text", "watch_cmd"]

#: Tasks in progress listed by name; past it, a count.
SHOWN_HOLDINGS = 20


def board_text(board: Board, *, shown: int = SHOWN_HOLDINGS) -> str:
    """The board as plain text lines (model text in prompts made safe to show)."""
    lines = [_headline(board), _pool_line(board)]
    if board.holdings:
        lines += ["", f"in progress ({board.in_progress}):",
                  "  task    holder                                claimed   held for  heartbeat"]
        lines += [_holding_line(h) for h in board.holdings[:shown]]
        if len(board.holdings) > shown:
            lines.append(f"  … and {len(board.holdings) - shown} more")
    if board.workers:
        lines += ["", "workers:",
                  "  holder                                 done  failed  running  tokens"
                  "  cost       busy     share"]
        lines += [_worker_line(w) for w in board.workers]
    return "\n".join(lines)


def _headline(board: Board) -> str:
    state = "finished" if board.finished else "running" if board.in_progress else "waiting"
    return (f"volley {board.volley_id} ({state}): {plural(board.total, 'task')}: "
            f"{board.done} done, {board.failed} failed, {board.in_progress} in progress, "
            f"{board.open} open  ${board.cost:.4f}")


def _pool_line(board: Board) -> str:
    workers = plural(len(board.workers), "worker")
    if board.parallelism is None:
        return f"pool: {workers}; no task has finished yet"
    slots = "" if board.max_concurrent is None else f" of {board.max_concurrent} slots"
    efficiency = "" if board.efficiency is None else f", efficiency {board.efficiency:.2f}"
    return (f"pool: {workers}, {board.parallelism:.1f} requests at once{slots}{efficiency} "
            f"({format_duration(board.busy_s)} at the provider in "
            f"{format_duration(board.span_s)})")


def _holding_line(h: Holding) -> str:
    holder = "-" if h.holder is None else str(h.holder)
    claimed = "-" if h.claimed_at is None else time.strftime("%H:%M:%S",
                                                              time.localtime(h.claimed_at))
    running = "-" if h.in_progress_s is None else heartbeat_age(h.in_progress_s)
    beat = "-" if h.heartbeat_age_s is None else heartbeat_age(h.heartbeat_age_s)
    mark = "" if h.state == "ok" else f"  {h.state.upper()} (stale at " \
        f"{format_duration(h.stale_timeout)})"
    prompt = safe_text(h.prompt.replace("\n", " "))
    prompt = prompt if len(prompt) <= 40 else prompt[:39] + "…"
    return (f"  {h.index:<7} {holder[:37]:<37} {claimed:<9} {running:<9} {beat:<9}{mark}"
            f"  {prompt}")


def _worker_line(w: WorkerLine) -> str:
    t = w.tally
    share = "-" if w.share is None else f"{w.share:.2f}"
    return (f"  {str(t.holder)[:38]:<38} {t.done:>5} {t.failed:>7} {t.in_progress:>8} "
            f"{format_count(t.tokens):>7}  ${t.cost:<9.4f} {format_duration(t.busy_s):<8} "
            f"{share}")


@click.command("watch")
@click.argument("volley_ref", metavar="ID|last")
@click.option("--interval", default="1s", show_default=True, metavar="DURATION",
              help="How often the board is read again.")
@click.option("--output-format", type=click.Choice(["text", "jsonl"]), default="text",
              show_default=True,
              help="text: a live panel on a terminal (on a pipe, the board each time it "
                   "changes); jsonl: one board per read, as JSON.")
@settings_options("volley watch")
def watch_cmd(volley_ref: str, interval: str, output_format: str) -> None:
    """Watch volley ID (or the latest) while workers run: each task in progress with its
    holder and heartbeat, each worker's tasks, tokens, cost and share, and the pool's
    efficiency. Read-only: it takes no lock a worker waits for. Ends when no task is
    left to run, or at Ctrl-C.

    \b
    Examples:
      rlm volley work 3f2a9c1d --pool 4 &
      rlm volley watch 3f2a9c1d
      rlm volley watch last --output-format jsonl --interval 5s > board.jsonl
    """
    try:
        every = parse_duration(interval, "--interval")
        with open_volleys("volley watch", stderr_console(), existing=True) as journal:
            volley_id = journal.resolve(volley_ref)

            def read() -> Board:
                return read_board(journal.store, volley_id)

            if output_format == "jsonl":
                _follow(read, every, lambda b: json.dumps(b.to_dict(), ensure_ascii=False))
            elif sys.stdout.isatty():
                _live(read, every)
            else:
                _follow(read, every, lambda b: board_text(b) + "\n", _what_changed)
    except KeyboardInterrupt:
        return  # leaving a watch is its normal end
    except RLMError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(exc.exit_code)


def _what_changed(board: Board) -> object:
    """What a printed board is printed again for: its counts and holders (its ages move
    every second)."""
    return (board.done, board.failed, board.open, tuple(h.index for h in board.holdings),
            tuple((w.tally.holder, w.tally.done, w.tally.failed) for w in board.workers))


def _follow(read: Callable[[], Board], every: float, render: Callable[[Board], str],
            changed: Callable[[Board], object] | None = None) -> None:
    """Print the board at each read (or, with ``changed``, when that reads differently)
    until the volley has nothing left to run."""
    last: object = None
    while True:
        board = read()
        key = None if changed is None else changed(board)
        if changed is None or key != last:
            click.echo(render(board))
            last = key
        if board.finished:
            return
        time.sleep(every)


def _live(read: Callable[[], Board], every: float) -> None:
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = Console()
    with Live(console=console, auto_refresh=False) as live:
        while True:
            board = read()
            live.update(Text(board_text(board, shown=max(3, console.height - 12))),
                        refresh=True)
            if board.finished:
                return
            time.sleep(every)
