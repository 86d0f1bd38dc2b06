"""Progress on stderr: one line per thing worth knowing, never on stdout."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from rlm._events import (
    BridgeCallFinished,
    CallFinished,
    CallStarted,
    CodeExecuted,
    Event,
    RunFinished,
    StepCompleted,
)

__all__ = ["ProgressPrinter", "format_traffic"]


class ProgressPrinter:
    """An event sink that prints a short line for steps, code, fan-outs and calls."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False)

    def __call__(self, event: Event) -> None:
        line = self._line(event)
        if line:
            indent = "  " * event.depth
            self.console.print(f"[dim]{event.t:7.2f}s[/dim] {indent}{line}")

    def _line(self, event: Event) -> str | None:
        who = escape(event.call_id)
        if isinstance(event, CallStarted) and event.depth > 0:
            return f"{who}: child call started"
        if isinstance(event, StepCompleted):
            what = f"{event.code_blocks} code block(s)" if event.code_blocks else "no code"
            final = ", FINAL" if event.has_final else ""
            return f"{who}: step {event.iteration} → {what}{final}"
        if isinstance(event, CodeExecuted):
            if event.ok:
                return f"{who}: code ran ({event.output_chars:,} chars printed)"
            first = (event.error or "").strip().splitlines()[-1:] or ["error"]
            return f"{who}: [yellow]code error[/yellow]: {escape(first[0][:120])}"
        if isinstance(event, BridgeCallFinished):
            failed = f", [red]{event.failed_items} failed[/red]" if event.failed_items else ""
            return f"{who}: {event.fn} × {event.items} answered in {event.duration_s:.2f}s{failed}"
        if isinstance(event, CallFinished) and event.depth > 0:
            return f"{who}: child call {event.status}"
        if isinstance(event, RunFinished):
            return (
                f"run {event.status} in {event.duration_s:.2f}s · {event.llm_calls} LLM calls · "
                f"{event.input_tokens:,} in / {event.output_tokens:,} out tokens"
            )
        return None


def format_traffic(traffic: dict[str, Any]) -> str:
    """One line per lane that saw requests: attempts, retries, 429s, waits, latency."""
    lines = []
    for name, lane in traffic.get("lanes", {}).items():
        if not lane.get("attempts"):
            continue
        lines.append(
            f"{name:>4} lane: {lane['attempts']} attempts, {lane['retries']} retries, "
            f"{lane['rate_limited']} × 429, peak {lane['max_in_flight']} in flight "
            f"(capacity now {lane['capacity']}), queue wait mean {lane['queue_wait_mean_s']:.3f}s, "
            f"latency p50 {lane['latency_p50_s']:.3f}s"
        )
    return "\n".join(lines)
