"""``rlm run --stream``: the root's reply as it is written, on stderr.

The root call's text is written piece by piece; code inside ```` ``` ````
fences is marked (cyan on a terminal, between ``[code]``/``[/code]`` lines
otherwise), and what a block printed follows it under an ``output`` rule.
Sub-queries and child calls are summed up in one status line (redrawn in
place on a terminal, printed when a fan-out finishes otherwise), so many
concurrent streams never interleave their text with the root's.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

from rlm._durations import format_wait
from rlm._events import (
    BridgeCallFinished,
    BridgeCallStarted,
    CodeExecuted,
    Event,
    LLMResponse,
    LLMRetry,
    RunFinished,
    StepCompleted,
    StreamDiscarded,
    TextDelta,
)
from rlm._symbols import symbol
from rlm.cli._terminal import safe_text, silence

__all__ = ["JSONLines", "LiveDisplay"]

_CYAN, _DIM, _RED, _RESET, _CLEAR_LINE = "\x1b[36m", "\x1b[2m", "\x1b[31m", "\x1b[0m", "\r\x1b[2K"
_OUTPUT_LINES = 12


class JSONLines:
    """``--stream --json``: every event as one JSON object per line on stdout."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout

    def __call__(self, event: Event) -> None:
        self.out.write(json.dumps(event.trace_record(), ensure_ascii=False, default=repr) + "\n")
        self.out.flush()


class LiveDisplay:
    """An event consumer that writes the root's reply live and a status for the rest."""

    def __init__(self, out: TextIO | None = None, *, tty: bool | None = None) -> None:
        self.out = out or sys.stderr
        self.tty = self.out.isatty() if tty is None else tty
        self._colour = self.tty and not os.environ.get("NO_COLOR")
        self._broken = False
        self._in_code = False
        self._held = ""  # trailing backticks that may be the start of a fence
        self._at_line_start = True
        self._status_shown = False
        self._root_request: int | None = None
        self._after_output = False  # a block's output was shown while its reply streamed
        self._subs: dict[str, Any] = {
            "streaming": set(), "done": 0, "failed": 0, "retries": 0, "chars": 0
        }

    def __call__(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            if event.call_id == "root" and event.lane == "root":
                self._root_text(event)
            else:
                self._subs["streaming"].add(event.request_id)
                self._subs["chars"] += len(event.text)
                self._status(event.t)
        elif isinstance(event, StreamDiscarded) and event.lane == "root":
            # Whether a retry follows is not known yet: the retry says so itself.
            self._line(self._paint(_RED, f"[stream cut after {event.chars} chars "
                                         f"({event.reason}): the text above is void]"))
            self._in_code, self._held = False, ""
        elif isinstance(event, LLMRetry):
            self._retry(event)
        elif isinstance(event, LLMResponse) and event.lane == "sub":
            self._subs["streaming"].discard(event.request_id)
            self._subs["done" if event.status == "ok" else "failed"] += 1
            self._status(event.t)
        elif isinstance(event, CodeExecuted) and event.depth == 0:
            self._executed(event)
        elif isinstance(event, BridgeCallStarted | BridgeCallFinished) and event.depth == 0:
            self._status(event.t, force=isinstance(event, BridgeCallFinished))
        elif isinstance(event, StepCompleted) and event.depth == 0:
            self._flush_held()
            if not self._at_line_start:
                self._write("\n")
        elif isinstance(event, RunFinished):
            self._clear_status()
            if not self._at_line_start:
                self._write("\n")

    def _retry(self, event: LLMRetry) -> None:
        """A root step's retry is a line of its own; a sub-query's is counted in the status."""
        if event.call_id == "root" and event.lane == "root":
            why = safe_text(event.brief or event.reason.split(":", 1)[0])
            self._line(self._paint(_RED, f"[{symbol('warn')} step {why}, retrying in "
                                         f"{format_wait(event.delay_s)}]"))
        else:
            self._subs["retries"] += 1
            self._status(event.t)

    # -- the root's text -------------------------------------------------------------

    def _root_text(self, event: TextDelta) -> None:
        if event.request_id != self._root_request:
            self._root_request = event.request_id
            rule = symbol("rule")
            self._line(self._paint(_DIM, f"{rule} root step (request {event.request_id}) {rule}"))
        elif self._after_output:  # pipelined: the reply goes on below the block's output
            rule = symbol("rule")
            self._line(self._paint(
                _DIM, f"{rule} root step (request {event.request_id}) goes on {rule}"
            ))
        self._after_output = False
        text = self._held + safe_text(event.text)  # model text: no escapes reach the terminal
        keep = len(text) - len(text.rstrip("`"))
        self._held = text[len(text) - keep :] if keep < 3 else ""
        text = text[: len(text) - len(self._held)]
        parts = text.split("```")
        for index, part in enumerate(parts):
            if index:
                self._toggle_fence()
            if part:
                self._write(self._paint(_CYAN, part) if self._in_code else part)

    def _toggle_fence(self) -> None:
        self._in_code = not self._in_code
        if self.tty:
            self._write("```" if self._in_code else self._paint(_CYAN, "```"))
        else:
            self._write("[code]```" if self._in_code else "```[/code]")

    def _flush_held(self) -> None:
        if self._held:
            self._write(self._held)
            self._held = ""
        self._in_code = False

    def _executed(self, event: CodeExecuted) -> None:
        self._flush_held()
        rule = symbol("rule")
        title = f"{rule} output of block {event.block} ({event.duration_s:.2f}s) {rule}"
        self._line(self._paint(_DIM, title))
        lines = event.output.rstrip("\n").splitlines()
        for line in lines[:_OUTPUT_LINES]:
            self._line(safe_text(line))
        if len(lines) > _OUTPUT_LINES or event.output_chars > len(event.output):
            self._line(self._paint(_DIM, f"[{symbol('more')} {event.output_chars:,} chars in all]"))
        if event.error:
            last = safe_text(event.error).strip().splitlines()[-1:] or ["error"]
            self._line(self._paint(_RED, f"error: {last[0]}"))
        self._after_output = True

    # -- the status line for everything but the root's text ----------------------------

    def _status(self, t: float, *, force: bool = False) -> None:
        sep = symbol("sep")
        subs = self._subs
        text = (
            f"{symbol('busy')} sub-queries: {len(subs['streaming'])} streaming {sep} "
            f"{subs['done']} done"
            + (f" {sep} {subs['failed']} failed" if subs["failed"] else "")
            + (f" {sep} {subs['retries']} retried" if subs["retries"] else "")
            + f" {sep} {subs['chars']:,} chars at {t:.1f}s"
        )
        if self.tty and self._at_line_start:
            self._write(_CLEAR_LINE + self._paint(_DIM, text), status=True)
        elif not self.tty and force:
            self._line(text)

    def _clear_status(self) -> None:
        if self._status_shown:
            self._status_shown = False
            self._write(_CLEAR_LINE, status=True)
            self._status_shown = False

    # -- writing -----------------------------------------------------------------------

    def _paint(self, color: str, text: str) -> str:
        return f"{color}{text}{_RESET}" if self._colour else text

    def _line(self, text: str) -> None:
        if not self._at_line_start:
            self._write("\n")
        self._write(text + "\n")

    def _write(self, text: str, *, status: bool = False) -> None:
        if not status:
            self._clear_status()
            self._at_line_start = text.removesuffix(_RESET).endswith("\n")
        self._status_shown = status
        if self._broken:
            return
        try:
            self.out.write(text)
            self.out.flush()
        except OSError:  # stderr closed or its reader gone: the run goes on without it
            self._broken = True
            silence()
