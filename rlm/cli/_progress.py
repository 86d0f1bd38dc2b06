"""Progress on stderr: one line per thing worth knowing, never on stdout.

Lines are never hard-wrapped (a redirected stderr is read by programs and
grep), colour follows ``NO_COLOR``, and every piece of text that came from a
model or from model code passes :func:`safe_text` first.  On a terminal an
elapsed-time spinner says what the run is waiting for, so a slow first step
is not mistaken for a hang.  On a pipe or in a file the lines are plain text
and rich is not imported (``_rich_stderr.py`` holds what needs it).  A closed
or broken stderr silences the printer; it never costs the run.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Protocol

from rlm._durations import format_wait
from rlm._events import (
    BridgeCallFinished,
    BridgeCallStarted,
    BudgetRefused,
    CallFinished,
    CallStarted,
    CodeExecuted,
    Event,
    LLMRetry,
    RunFinished,
    RunStarted,
    StepCompleted,
)
from rlm._symbols import symbol
from rlm.cli._terminal import plural, safe_text, silence

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "ProgressPrinter", "estimated_note", "format_cost", "format_traffic", "stderr_console"
]

#: A line as pieces of text, each with a rich style name (or None): colour on a
#: terminal, the bare text on a pipe.
Segments = list[tuple[str, str | None]]


def stderr_console() -> Console:
    """The rich console for stderr (``_rich_stderr.py``); rich is imported on this call."""
    from rlm.cli._rich_stderr import stderr_console as rich_console

    return rich_console()


def stderr_is_terminal() -> bool:
    """Whether rich would treat stderr as a terminal (``Console.is_terminal``'s rules).

    Decided without importing rich: on a pipe or in a file progress is plain
    text and rich is not needed at all.
    """
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "1"
    force_color = os.environ.get("FORCE_COLOR")
    if force_color is not None:
        return force_color != ""
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except ValueError:  # closed
        return False


class _Output(Protocol):
    def line(self, segments: Segments) -> None: ...
    def doing(self, what: str) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...


class _PlainOutput:
    """Progress on a pipe or in a file: the lines' text, no colour, no spinner."""

    def line(self, segments: Segments) -> None:
        if sys.stderr is None:  # the process started with fd 2 closed
            return
        sys.stderr.write("".join(text for text, _ in segments) + "\n")
        sys.stderr.flush()

    def doing(self, what: str) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class ProgressPrinter:
    """An event sink that prints a short line for steps, code, fan-outs and calls.

    With no ``console``, a stderr that is not a terminal gets plain lines
    without rich; otherwise lines go through rich (colour, and the spinner
    unless ``spinner`` is False).
    """

    def __init__(self, console: Console | None = None, *, spinner: bool | None = None) -> None:
        self._output: _Output
        if console is None and not stderr_is_terminal():
            self._output = _PlainOutput()
        else:
            from rlm.cli._rich_stderr import RichProgressOutput

            self._output = RichProgressOutput(console, spinner=spinner)
        self._broken = False
        self._refused: set[str] = set()  # call ids whose current batch the budget refused

    def __call__(self, event: Event) -> None:
        if self._broken:
            return
        try:
            self._follow(event)
            line = self._line(event)
            if line:
                indent = "  " * event.depth
                self._output.line([(f"{event.t:7.2f}s", "dim"), (f" {indent}", None), *line])
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
        self._output.stop()

    def _follow(self, event: Event) -> None:
        """Keep the spinner's "waiting for" current."""
        doing = _doing(event)
        if doing is not None:
            self._output.doing(doing)
        if isinstance(event, RunStarted):
            self._output.start()

    def _line(self, event: Event) -> Segments | None:
        who = (event.call_id, None)
        if isinstance(event, CallStarted) and event.depth > 0:
            return [who, (": child call started", None)]
        if isinstance(event, StepCompleted):
            what = plural(event.code_blocks, "code block") if event.code_blocks else "no code"
            final = ", FINAL" if event.has_final else ""
            step = "final-answer step" if event.forced_final else f"step {event.iteration}"
            return [who, (f": {step} {symbol('to')} {what}{final}", None)]
        if isinstance(event, CodeExecuted):
            if event.ok:
                return [who, (f": code ran ({plural(event.output_chars, 'char')} printed)", None)]
            first = safe_text(event.error or "").strip().splitlines()[-1:] or ["error"]
            return [who, (": ", None), ("code error", "yellow"), (f": {first[0][:120]}", None)]
        if isinstance(event, BudgetRefused) and event.scope == "batch":
            self._refused.add(event.call_id)
            return None
        if isinstance(event, BridgeCallFinished):
            return self._bridge_line(who, event)
        if isinstance(event, CallFinished) and event.depth > 0:
            return [who, (f": child call {event.status}", None)]
        if isinstance(event, LLMRetry):
            what = "step" if event.lane == "root" else "sub-query"
            why = safe_text(event.brief or event.reason.split(":", 1)[0])
            return [who, (": ", None), (f"{symbol('warn')} {what} {why}", "yellow"),
                    (f", retrying in {format_wait(event.delay_s)}", None)]
        if isinstance(event, RunFinished):
            return [(_summary(event), None)]
        return None

    def _bridge_line(self, who: tuple[str, None], event: BridgeCallFinished) -> Segments:
        if event.call_id in self._refused:
            self._refused.discard(event.call_id)
            times = symbol("times")
            return [who, (f": {event.fn} {times} {event.items} ", None), ("refused", "red"),
                    (": more than the budget has left (nothing was sent)", None)]
        if event.failed_items and event.failed_items == event.items:  # none answered
            every = "failed" if event.items == 1 else f"all {event.items} failed"
            took = f"{event.duration_s:.2f}s"
            return [who, (f": {event.fn} {symbol('times')} {event.items} in {took}: ", None),
                    (every, "red")]
        line: Segments = [
            who,
            (f": {event.fn} {symbol('times')} {event.items} answered in {event.duration_s:.2f}s",
             None),
        ]
        if event.failed_items:
            line += [(", ", None), (f"{event.failed_items} failed", "red")]
        return line


def _summary(event: RunFinished) -> str:
    """The run's last line: status, time, calls (and retries), tokens, cost."""
    sep = f" {symbol('sep')} "
    lanes = event.traffic.get("lanes", {}).values()
    retries = sum(int(lane.get("retries") or 0) for lane in lanes)
    calls = plural(event.llm_calls, "LLM call")
    if retries:
        calls += f" ({plural(retries, 'retry', 'retries')})"
    tokens = f"{event.input_tokens:,} in / {event.output_tokens:,} out tokens"
    estimated = int(event.usage_detail.get("estimated_calls") or 0)
    if estimated:
        tokens = f"~{tokens} ({estimated_note(estimated, event.llm_calls)})"
    # What stopped a run is the Error line's to say: "timeout in 0.05s" would contradict a
    # run that stopped at once rather than wait past its --timeout.
    ended = event.status if event.status in ("answered", "interrupted") else "stopped"
    return sep.join([
        f"run {ended} in {event.duration_s:.2f}s", calls, tokens,
        format_cost(event.usage_detail, event.llm_calls),
    ])


def estimated_note(estimated: int, calls: int) -> str:
    """Why token counts (and the budgets counting them) are approximate."""
    which = "the server" if estimated >= calls else f"for {plural(estimated, 'answer')}, the server"
    return f"estimated: {which} sent no usage, so token budgets are approximate"


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
            f"{lane['rate_limited']} {symbol('times')} 429, "
            f"peak {lane['max_in_flight']} in flight of "
            f"{lane['capacity']}, queue wait mean {lane['queue_wait_mean_s']:.3f}s, "
            f"latency p50 {lane['latency_p50_s']:.3f}s"
        )
    return "\n".join(lines)
