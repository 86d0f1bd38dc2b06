"""Progress on stderr: one line per thing worth knowing, never on stdout.

Lines are never hard-wrapped (a redirected stderr is read by programs and
grep), colour follows ``NO_COLOR``, and every piece of text that came from a
model or from model code passes :func:`safe_text` first.  On a terminal an
elapsed-time spinner says what the run is waiting for, so a slow first step
is not mistaken for a hang.  A closed or broken stderr silences the printer;
it never costs the run.
"""

from __future__ import annotations

import os
import time
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.markup import escape
from rich.spinner import Spinner
from rich.text import Text

from rlm._events import (
    BridgeCallFinished,
    BridgeCallStarted,
    BudgetRefused,
    CallFinished,
    CallStarted,
    CodeExecuted,
    Event,
    RunFinished,
    RunStarted,
    StepCompleted,
)
from rlm.cli._terminal import plural, safe_text, silence

__all__ = ["ProgressPrinter", "format_cost", "format_traffic", "stderr_console"]


class _StderrConsole(Console):
    """A console whose broken pipe silences it, and only it.

    Rich's default answers a broken pipe by pointing *stdout* at /dev/null and
    raising SystemExit: that would cost the run its answer.
    """

    def on_broken_pipe(self) -> None:
        self.quiet = True
        silence()


def stderr_console() -> Console:
    """The console progress goes to: stderr, no wrapping, no colour under NO_COLOR."""
    no_color = bool(os.environ.get("NO_COLOR"))
    return _StderrConsole(
        stderr=True,
        highlight=False,
        soft_wrap=True,
        color_system=None if no_color else "auto",
        no_color=no_color,
    )


class _Elapsed:
    """The spinner line: what the run waits for and for how long."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.doing = "starting"
        self._spinner = Spinner("dots")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        self._spinner.update(
            text=Text(f"{self.doing} · {time.monotonic() - self.started:.1f}s", style="dim")
        )
        yield self._spinner


class ProgressPrinter:
    """An event sink that prints a short line for steps, code, fan-outs and calls."""

    def __init__(self, console: Console | None = None, *, spinner: bool | None = None) -> None:
        self.console = console or stderr_console()
        self._broken = False
        self._refused: set[str] = set()  # call ids whose current batch the budget refused
        want_spinner = self.console.is_terminal if spinner is None else spinner
        self._elapsed = _Elapsed() if want_spinner else None
        self._live: Live | None = None

    def __call__(self, event: Event) -> None:
        if self._broken:
            return
        try:
            self._follow(event)
            line = self._line(event)
            if line:
                indent = "  " * event.depth
                self.console.print(f"[dim]{event.t:7.2f}s[/dim] {indent}{line}")
            if isinstance(event, RunFinished):
                self.close()
        except OSError:  # stderr closed or its reader gone: the run goes on without it
            self._broken = True
            self._stop_live()
            silence()

    def close(self) -> None:
        """Stop the spinner (safe to call twice, and on every exit path)."""
        try:
            self._stop_live()
        except OSError:
            self._broken = True
            silence()

    def _stop_live(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()

    def _follow(self, event: Event) -> None:
        """Keep the spinner's "waiting for" current."""
        if self._elapsed is None:
            return
        doing = _doing(event)
        if doing is not None:
            self._elapsed.doing = doing
        if isinstance(event, RunStarted) and self._live is None:
            self._live = Live(
                self._elapsed,
                console=self.console,
                transient=True,
                refresh_per_second=8,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()

    def _line(self, event: Event) -> str | None:
        who = escape(event.call_id)
        if isinstance(event, CallStarted) and event.depth > 0:
            return f"{who}: child call started"
        if isinstance(event, StepCompleted):
            what = plural(event.code_blocks, "code block") if event.code_blocks else "no code"
            final = ", FINAL" if event.has_final else ""
            step = "final-answer step" if event.forced_final else f"step {event.iteration}"
            return f"{who}: {step} → {what}{final}"
        if isinstance(event, CodeExecuted):
            if event.ok:
                return f"{who}: code ran ({plural(event.output_chars, 'char')} printed)"
            first = safe_text(event.error or "").strip().splitlines()[-1:] or ["error"]
            return f"{who}: [yellow]code error[/yellow]: {escape(first[0][:120])}"
        if isinstance(event, BudgetRefused) and event.scope == "batch":
            self._refused.add(event.call_id)
            return None
        if isinstance(event, BridgeCallFinished):
            return self._bridge_line(who, event)
        if isinstance(event, CallFinished) and event.depth > 0:
            return f"{who}: child call {event.status}"
        if isinstance(event, RunFinished):
            return (
                f"run {event.status} in {event.duration_s:.2f}s · "
                f"{plural(event.llm_calls, 'LLM call')} · "
                f"{event.input_tokens:,} in / {event.output_tokens:,} out tokens · "
                f"{format_cost(event.usage_detail, event.llm_calls)}"
            )
        return None

    def _bridge_line(self, who: str, event: BridgeCallFinished) -> str:
        if event.call_id in self._refused:
            self._refused.discard(event.call_id)
            return (
                f"{who}: {event.fn} × {event.items} [red]refused[/red]: "
                "more than the budget has left (nothing was sent)"
            )
        failed = f", [red]{event.failed_items} failed[/red]" if event.failed_items else ""
        return f"{who}: {event.fn} × {event.items} answered in {event.duration_s:.2f}s{failed}"


def _doing(event: Event) -> str | None:
    """What the run waits for after ``event`` (None: unchanged)."""
    where = "root" if event.depth == 0 else event.call_id
    if isinstance(event, RunStarted):
        return "root: waiting for the model's step 1"
    if isinstance(event, StepCompleted):
        return f"{where}: running step {event.iteration}'s code" if event.code_blocks else None
    if isinstance(event, BridgeCallStarted):
        return f"{where}: waiting for {plural(event.items, 'sub-model answer')}"
    if isinstance(event, CodeExecuted):
        return f"{where}: waiting for the model's step {event.iteration + 1}"
    return None


def format_cost(usage_detail: dict[str, Any], llm_calls: int) -> str:
    """``$0.0123``; ``unpriced`` when no call had a price; both when some had none."""
    cost = float(usage_detail.get("cost") or 0.0)
    unpriced = int(usage_detail.get("unpriced_calls") or 0)
    shown = f"${cost:,.2f}" if cost >= 1 else f"${cost:.4f}"
    if llm_calls and unpriced >= llm_calls:
        return "cost unpriced (no price for the model; see --prices)"
    if unpriced:
        return f"{shown} + {plural(unpriced, 'unpriced call')}"
    return shown


def format_traffic(traffic: dict[str, Any]) -> str:
    """One line per lane that saw requests: attempts, retries, 429s, waits, latency."""
    lines = []
    for name, lane in traffic.get("lanes", {}).items():
        if not lane.get("attempts"):
            continue
        lines.append(
            f"{name:>4} lane: {plural(lane['attempts'], 'attempt')}, "
            f"{plural(lane['retries'], 'retry', 'retries')}, "
            f"{lane['rate_limited']} × 429, peak {lane['max_in_flight']} in flight "
            f"(capacity now {lane['capacity']}), queue wait mean {lane['queue_wait_mean_s']:.3f}s, "
            f"latency p50 {lane['latency_p50_s']:.3f}s"
        )
    return "\n".join(lines)
