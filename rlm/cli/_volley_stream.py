"""``rlm volley --stream``: every task's text as it arrives, labelled with its task.

Text mode writes complete lines to stderr, each prefixed with its task
(``[3/50 api.go] …``); a task's last partial line is written when the task
finishes, a cut stream says so before its retry starts over, and every retry says why
(``[3/50 api.go] [⚠ timed out after 600s (--request-timeout), retrying in 0.92s]``).  stdout
keeps the ordered final output.  With ``--output-format jsonl`` stdout
carries every event as one JSON line instead, each with ``task`` (the 1-based
task index, null for the volley's own events); ``task_finished`` has the
task's ``status`` and ``output``.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from typing import TextIO

from rlm._durations import format_wait
from rlm._events import Event, LLMRetry, StreamDiscarded, TextDelta
from rlm._symbols import symbol
from rlm.cli._terminal import safe_text, silence
from rlm.volley.events import TaskFinished

__all__ = ["TaskLines", "VolleyJSONLines", "task_of"]

_TASK_CALL = re.compile(r"^t(\d+)(?:\.|$)")


def task_of(event: Event) -> int | None:
    """The 1-based task an event belongs to, or None for the volley's own events."""
    if isinstance(event, TextDelta | StreamDiscarded) and event.task is not None:
        return event.task
    if isinstance(event, TaskFinished):
        return event.index
    match = _TASK_CALL.match(event.call_id)
    return int(match.group(1)) if match else None


def _streamed_task(event: TextDelta) -> int | None:
    """The task whose text this is: a completion task's, or an ``--rlm`` task's root
    steps (its sub-queries' and child calls' text would interleave with them)."""
    if event.task is not None:
        return event.task
    return task_of(event) if event.depth == 0 and event.parent_id is None else None


class VolleyJSONLines:
    """Every event as one JSON line, with its ``task``."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout

    def __call__(self, event: Event) -> None:
        record = {**event.trace_record(), "task": task_of(event)}
        self.out.write(json.dumps(record, ensure_ascii=False, default=repr) + "\n")
        self.out.flush()


class TaskLines:
    """Each task's streamed text, line by line, prefixed ``[i/N title]``.

    ``title_of`` (task index → title, while it runs) labels the tasks whose text
    carries no title of its own: an ``--rlm`` task's root steps.  What is kept per
    task goes when the task finishes.
    """

    def __init__(self, total: int, out: TextIO | None = None, *, title_width: int = 32,
                 title_of: Callable[[int], str | None] = lambda index: None) -> None:
        self.total = total
        self.out = out or sys.stderr
        self.width = title_width
        self._title_of = title_of
        self._partial: dict[int, str] = {}
        self._titles: dict[int, str] = {}
        self._request: dict[int, int] = {}  # the request each task's text came from last
        self._broken = False

    def __call__(self, event: Event) -> None:
        if isinstance(event, TextDelta) and (task := _streamed_task(event)) is not None:
            if event.task_title:
                self._titles.setdefault(task, event.task_title)
            if self._request.setdefault(task, event.request_id) != event.request_id:
                # A new step of an --rlm task: its reply starts on a line of its own.
                self._request[task] = event.request_id
                if rest := self._partial.pop(task, ""):
                    self._line(task, rest)
            text = self._partial.pop(task, "") + event.text
            *lines, rest = text.split("\n")
            for line in lines:
                self._line(task, line)
            if rest:
                self._partial[task] = rest
        elif isinstance(event, StreamDiscarded) and event.task is not None:
            self._partial.pop(event.task, None)
            self._line(event.task, f"[stream cut after {event.chars} chars "
                                   f"({event.reason}): the lines above are void]")
        elif isinstance(event, LLMRetry) and (task := task_of(event)) is not None:
            why = event.brief or event.reason.split(":", 1)[0]
            self._line(task, f"[{symbol('warn')} {why}, retrying in "
                             f"{format_wait(event.delay_s)}]")
        elif isinstance(event, TaskFinished):
            rest = self._partial.pop(event.index, "")
            if rest:
                self._line(event.index, rest)
            if event.status != "succeeded":
                self._line(event.index, f"[{event.status}: {event.error}]")
            self._titles.pop(event.index, None)
            self._request.pop(event.index, None)

    def _line(self, task: int, text: str) -> None:
        title = self._titles.get(task) or self._title_of(task) or ""
        if len(title) > self.width:
            title = title[: self.width - 1] + f"{symbol('more')}"
        label = f"[{task}/{self.total} {title}]" if title else f"[{task}/{self.total}]"
        if self._broken:
            return
        try:  # model text and task titles: no escape sequence reaches the terminal
            self.out.write(safe_text(f"{label} {text}") + "\n")
            self.out.flush()
        except OSError:  # stderr closed or its reader gone: the volley goes on without it
            self._broken = True
            if self.out is sys.stderr:
                silence()
