"""stdout for a volley: task order, whatever order tasks finished in.

``text`` and ``jsonl`` stream: a task is written as soon as it and every task
before it have a verdict, so stdout is always in task order and a long volley
shows results as they come.  At the end (or on Ctrl-C) the finished tasks not
yet written are flushed in order, then the summary.  ``json`` writes one object
at the end.  Only results the sink has accepted ever reach this writer.

Given a ``reader`` (a journal's: every task in task order, a page at a time),
the writer holds only the results of the next ``window`` tasks: one further
ahead is read back when its turn comes (it is durable: the journal kept it
before it was reported), and the end (the rest of the volley, other workers'
verdicts included, or ``json``'s whole object) is read from the journal page by
page, never held.  ``json`` then writes its object over several lines.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Literal

from rlm._durations import format_duration
from rlm._symbols import symbol
from rlm.volley.records import TaskResult, VolleyResult

__all__ = [
    "OrderedWriter",
    "OutputFormat",
    "ResultReader",
    "format_summary",
    "heartbeat_age",
    "task_label",
]

OutputFormat = Literal["text", "json", "jsonl"]

#: ``reader(after, limit)``: up to ``limit`` tasks with an index above ``after``, in task
#: order, each its verdict or a ``cancelled`` result when it has none.
ResultReader = Callable[[int, int], list[TaskResult]]

#: Results of the tasks ahead of the next one to write that the writer holds at most.
WINDOW = 4096


def task_label(prompt: str, width: int = 60) -> str:
    """The first line of a prompt, cut to ``width`` characters."""
    line = prompt.strip().splitlines()[0] if prompt.strip() else ""
    return line if len(line) <= width else line[: width - 1] + f"{symbol('more')}"


class OrderedWriter:
    """Writes accepted results in task order through ``write`` (one call per line/block);
    with a ``reader``, holding at most ``window`` of them (see the module docstring)."""

    def __init__(
        self,
        fmt: OutputFormat,
        total: int,
        write: Callable[[str], None],
        clean: Callable[[str], str] = str,
        *,
        reader: ResultReader | None = None,
        window: int = WINDOW,
    ) -> None:
        """``clean`` makes the text format's model and task text safe to show (the JSON
        formats keep it exact: JSON escapes every control character)."""
        self.format = fmt
        self._clean = clean
        self.total = total
        self._write = write
        self._reader = reader
        self._window = window
        self._pending: dict[int, TaskResult] = {}
        # With a reader: which tasks have a verdict here (one byte a task, not a record).
        self._seen = bytearray(total + 2) if reader is not None else None
        self._next = 1

    def add(self, result: TaskResult) -> None:
        """A task's accepted result: written now if every earlier task is written."""
        if self.format == "json":
            return
        if self._seen is None:
            self._pending[result.index] = result
            while self._next in self._pending:
                self._emit(self._pending.pop(self._next))
                self._next += 1
            return
        self._seen[result.index] = 1
        if result.index < self._next + self._window:
            self._pending[result.index] = result
        while self._next <= self.total and self._seen[self._next]:
            if self._next not in self._pending:
                self._read_ahead()
            self._emit(self._pending.pop(self._next))
            self._next += 1

    def _read_ahead(self) -> None:
        """Read back the verdicts of the window's tasks that are not held (they are kept)."""
        assert self._reader is not None and self._seen is not None
        for done in self._reader(self._next - 1, self._window):
            if self._seen[done.index] and done.status != "cancelled":
                self._pending.setdefault(done.index, done)

    def _read_all(self, after: int) -> Iterator[TaskResult]:
        """Every task above ``after`` as the reader has it, a page at a time."""
        assert self._reader is not None
        while page := self._reader(after, self._window):
            yield from page
            after = page[-1].index

    def finish(self, result: VolleyResult) -> None:
        """Flush what is left in order (skipping tasks that got no verdict), then the summary."""
        if self.format == "json":
            self._finish_json(result)
            return
        if self._reader is not None:
            self._pending.clear()
            for done in self._read_all(self._next - 1):
                if done.status != "cancelled":
                    self._emit(done)
        else:
            done_here = {r.index: r for r in result.tasks if r.status != "cancelled"}
            for index in sorted(i for i in done_here if i >= self._next):
                self._emit(done_here[index])
        if self.format == "jsonl":
            summary = {k: v for k, v in result.to_dict().items() if k != "tasks"}
            self._write(json.dumps(summary, ensure_ascii=False))
        else:
            self._write(format_summary(result))

    def _finish_json(self, result: VolleyResult) -> None:
        whole = result.to_dict()
        if self._reader is None:
            self._write(json.dumps(whole, ensure_ascii=False))
            return
        # The object with its tasks read from the journal: one line each, never all held.
        head = json.dumps({**whole, "tasks": []}, ensure_ascii=False)
        assert head.endswith('"tasks": []}')
        self._write(head[: -len("]}")])
        first = True
        for task in self._read_all(0):
            self._write(("" if first else ", ") + json.dumps(task.to_dict(), ensure_ascii=False))
            first = False
        self._write("]}")

    def _emit(self, result: TaskResult) -> None:
        if self.format == "jsonl":
            self._write(json.dumps(result.to_dict(), ensure_ascii=False))
            return
        mark = f"{symbol('ok')}" if result.status == "succeeded" else f"{symbol('failed')}"
        header = f"=== [{result.index}/{self.total}] {mark} {task_label(result.prompt)} ==="
        body = result.output if result.status == "succeeded" else f"Error: {result.error}"
        self._write(self._clean(f"{header}\n{body or ''}\n"))


def _traffic(result: VolleyResult) -> str:
    """The traffic line; a volley read back from its journal (`show`, a resume with nothing
    left to run) knows its retries but not its peak in flight or its 429s, whether or not
    any of its tasks has finished."""
    s = result.summary
    if result.read_back:
        return f"traffic: {s.total_retries} retries (peak in flight and 429s: not in the journal)"
    return (f"traffic: peak {s.max_concurrent_used} in flight, {s.total_retries} retries, "
            f"{s.rate_limited} rate limited")


def _batch_priced(result: VolleyResult) -> str:
    """How much of the cost is at the batch service's prices."""
    s = result.summary
    if not s.batch_tasks:
        return ""
    if s.batch_tasks >= s.succeeded + s.failed:
        return " (at batch prices)"
    return f" ({s.batch_tasks:,} tasks at batch prices, the rest at live prices)"


def _batch_lines(result: VolleyResult) -> list[str]:
    """The volley's provider batches: each one's status and counts."""
    lines = [f"batches: {len(result.batches)} at {result.batches[0]['provider']}"]
    for batch in result.batches:
        said = batch["status"] or batch["stage"]
        where = f"{batch['batch_id']}: {said}" if batch["batch_id"] else f"not sent ({said})"
        lines.append(f"  batch {batch['number']} {where}, {batch['succeeded']:,} succeeded, "
                     f"{batch['failed']:,} failed of {batch['tasks']:,}")
        if batch.get("error"):
            lines.append(f"    the provider failed it: {batch['error']}")
    if any(b["stage"] != "collected" for b in result.batches):
        lines.append(f"not collected yet: `rlm volley --resume {result.volley_id}` collects "
                     f"them, `rlm volley cancel {result.volley_id}` cancels them")
    return lines


def heartbeat_age(seconds: float) -> str:
    """A heartbeat's age in whole seconds (``42s``, ``4m12s``), ``<1s`` when fresh."""
    return "<1s" if seconds < 1 else format_duration(round(seconds))


def _tokens_line(result: VolleyResult) -> str:
    """The summary's tokens, marked approximate when some were estimated."""
    s, estimated = result.summary, result.estimated_calls
    near = "~" if estimated else ""
    line = (f"tokens: {near}{s.tokens_input:,} in ({s.tokens_cached:,} cached), "
            f"{near}{s.tokens_output:,} out")
    if estimated:
        answers = "1 answer" if estimated == 1 else f"{estimated:,} answers"
        line += (f" (estimated: the server sent no usage for {answers}, so token budgets "
                 "are approximate)")
    return line


def format_summary(result: VolleyResult) -> str:
    """The text format's closing block."""
    s = result.summary
    cost = "unpriced" if s.total_cost is None else f"${s.total_cost:.4f}"
    age = result.heartbeat_age_sec
    beat = "" if age is None else f" (heartbeat {heartbeat_age(age)} ago)"
    # Shown from the journal while no worker has ended it, a task without a verdict is
    # still to run, not cancelled.
    left = "open" if result.status in ("created", "running") else "cancelled"
    lines = [
        f"=== volley {result.volley_id}: {result.status}{beat} ===",
        f"tasks: {s.succeeded} succeeded, {s.failed} failed, {s.cancelled} {left} "
        f"of {s.total_tasks} in {format_duration(s.duration_sec)}",
        _tokens_line(result) + f"; cost {cost}{_batch_priced(result)}",
        *(_batch_lines(result) if result.batches else [_traffic(result)]),
    ]
    if result.error:
        lines.append(f"stopped: {result.error}")
    if result.status == "created":
        lines.append(f"not started yet: `rlm volley work {result.volley_id}` runs it")
    return "\n".join(lines)
