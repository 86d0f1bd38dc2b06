"""Volley progress on stderr: one line per event worth knowing, plus a live bar on a TTY.

Lines come from events (``task_finished`` after the sink accepted the result,
``llm_retry``, ``capacity_changed``), e.g.::

    [3/5] ✓ api.go (16.2s, 3.9k tokens, $0.01)
    [3/5] ⚠ main.go: timed out after 600s (--request-timeout), retrying in 0.92s

On a TTY a status bar under them is redrawn a few times a second: counters,
in flight, current concurrency, retries, 429s, tokens, cost so far, ETA.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import trio
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.text import Text

from rlm._durations import format_duration, format_wait
from rlm._events import CapacityChanged, Event, LLMRetry
from rlm._sizes import format_count
from rlm._symbols import symbol
from rlm.volley.engine import Volley, VolleyProgress
from rlm.volley.events import BatchStatus, BatchSubmitted, TaskFinished
from rlm.volley.output import task_label

__all__ = ["BatchLines", "LiveStatus", "ProgressLines", "status_line"]


class ProgressLines:
    """An event sink printing the volley's progress lines to ``console``.

    ``done`` counts tasks that ended before this run (a resumed volley's), so the
    counter goes on from them instead of starting again at 1.  A finished task is
    labelled with its title, which its ``task_finished`` event carries.
    """

    def __init__(self, total: int, console: Console, *, done: int = 0) -> None:
        self.total = total
        self.done = done
        self.console = console

    def __call__(self, event: Event) -> None:
        line = self._line(event)
        if line is not None:
            self.console.print(line, highlight=False)

    def _line(self, event: Event) -> str | None:
        if isinstance(event, TaskFinished):
            self.done += 1
            where = f"[{self.done}/{self.total}]"
            label = escape(task_label(event.title, 50))
            tokens = format_count(event.input_tokens + event.output_tokens)
            cost = "" if event.cost is None else f", ${event.cost:.2f}"
            if event.status == "succeeded":
                took = f"{event.duration_s:.1f}s, {tokens} tokens{cost}"
                return f"{where} [green]{symbol('ok')}[/green] {label} ({took})"
            why = escape((event.error or "")[:200])
            return f"{where} [red]{symbol('failed')}[/red] {label}: {why}"
        if isinstance(event, LLMRetry):
            why = escape(event.brief or event.reason.split(":", 1)[0])
            return (
                f"[{self.done}/{self.total}] [yellow]{symbol('warn')}[/yellow] "
                f"{escape(_retried_task(event))}: {why}, retrying in {format_wait(event.delay_s)}"
            )
        if isinstance(event, CapacityChanged) and event.reason == "overload":
            return (
                f"[{self.done}/{self.total}] [yellow]{symbol('warn')}[/yellow] "
                "provider pushed back: "
                f"concurrency {event.old} {symbol('to')} {event.new}"
            )
        return None


class BatchLines:
    """An event sink printing a volley sent as provider batches (``--batch-api``): a line
    when a batch is sent, one each time what the provider says of it changes, and one
    per failed task (the first ``shown_failures``; a result that succeeded adds none: a
    batch brings thousands at once)."""

    def __init__(self, console: Console, *, shown_failures: int = 20) -> None:
        self.console = console
        self._shown = shown_failures
        self._failures = 0

    def __call__(self, event: Event) -> None:
        line = self._line(event)
        if line is not None:
            self.console.print(line, highlight=False)

    def _line(self, event: Event) -> str | None:
        if isinstance(event, BatchSubmitted):
            how = "found at the provider (sent before a stop)" if event.found else "sent"
            return (f"batch {event.number}: {how}: {event.tasks:,} tasks as {event.provider} "
                    f"batch {escape(event.batch_id)}")
        if isinstance(event, BatchStatus):
            return (f"batch {event.number} {escape(event.batch_id)}: {escape(event.status)}, "
                    f"{event.succeeded:,} succeeded, {event.failed:,} failed of "
                    f"{event.total:,}")
        if isinstance(event, TaskFinished) and event.status == "failed":
            self._failures += 1
            if self._failures <= self._shown:
                return (f"{escape(f'[task {event.index}]')} [red]✗[/red] "
                        f"{escape((event.error or '')[:200])}")
            if self._failures == self._shown + 1:
                return "[red]✗[/red] more tasks failed: `rlm volley show ID` lists them all"
        return None


def _retried_task(event: LLMRetry) -> str:
    """The label of the task a retried request belongs to: its title, else ``task N``
    from its call id (``t3``, or ``t3.1`` for a child call of an ``--rlm`` task)."""
    if event.task_title:
        return task_label(event.task_title, 50)
    number = event.call_id[1:].partition(".")[0]
    return f"task {number}" if event.call_id.startswith("t") and number.isdigit() else "a task"


def status_line(p: VolleyProgress) -> str:
    """The live bar's text."""
    done = p.succeeded + p.failed
    sep = f" {symbol('sep')} "
    parts = [
        f"{done}/{p.total} done" + (f", {p.failed} failed" if p.failed else ""),
        f"{p.running} running", f"concurrency {p.concurrency}", f"{p.retries} retries",
        f"{p.rate_limited} {symbol('times')} 429", f"{format_count(p.tokens)} tokens",
        f"${p.cost:.4f}", format_duration(max(p.elapsed, 0.001)),
    ]
    if 0 < done < p.total and p.elapsed > 0:
        parts.append(f"ETA {format_duration(p.elapsed / done * (p.total - done))}")
    return sep.join(parts)


class LiveStatus:
    """The status bar under the progress lines on a terminal, redrawn a few times a second
    and whenever a progress line is printed above it (with the figures of that moment).

    Results go to stdout; when stdout is the same terminal, :meth:`above` clears the bar
    before a result is written, so a result never starts on the bar's line.
    """

    def __init__(self, console: Console) -> None:
        self._volley: Volley | None = None
        self._console = console
        self._live: Live | None = None
        self._hidden = False

    def _render(self) -> Text:
        if self._hidden or self._volley is None:
            return Text("")
        return Text(status_line(self._volley.progress()))

    async def run(self, volley: Volley, *, period: float = 0.25) -> None:
        """Show ``volley``'s figures until cancelled (then the bar vanishes)."""
        self._volley = volley
        with Live(get_renderable=self._render, console=self._console, transient=True,
                  auto_refresh=False, redirect_stdout=False) as live:
            self._live = live
            try:
                while True:
                    live.refresh()
                    await trio.sleep(period)
            finally:
                self._live = None

    def above(self, write: Callable[[str], None]) -> Callable[[str], None]:
        """``write`` (to stdout) clearing the bar first when stdout shares its terminal."""
        if not sys.stdout.isatty():
            return write

        def cleared(text: str) -> None:
            if self._live is not None:
                self._hidden = True
                try:
                    self._live.refresh()  # the bar's line is now empty, the cursor at its start
                finally:
                    self._hidden = False
            write(text)

        return cleared
