"""Reading tasks: arguments, ``-f FILE`` (lines, JSON or JSONL) and ``--stdin``.

A task file is one of:

- plain text, one task per line;
- a JSON object ``{"context": ..., "max_concurrent": ..., "tasks": [...]}``
  whose tasks are strings or objects ``{"prompt", "timeout", "model", "max_tokens"}``;
- a JSON list of such tasks;
- JSONL: one task object per line.

Blank lines are skipped everywhere.  In a task file (plain text or JSONL, not ``--stdin``) a
line whose first non-blank character is ``#`` is a comment: a task that starts with ``#`` is
written as JSONL (``{"prompt": "#1 ..."}``).  Every mistake is a UsageError naming the
file and line, and an empty task list is one too.  A file named ``*.json`` or
``*.jsonl`` must be JSON: read as lines of text, a typo in it would become
tasks (paid for) instead of an error.

Lines and JSONL are read lazily: their tasks are made from the text again on
each pass (:class:`Items`, :class:`TaskStream`), so a million-task file costs
its text, not a million records.  A JSON document is parsed whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rlm._durations import parse_duration
from rlm.errors import UsageError
from rlm.volley.records import VolleyTask

__all__ = [
    "Items",
    "TaskFile",
    "TaskInput",
    "TaskStream",
    "number_tasks",
    "parse_lines",
    "parse_task_file",
    "task_models",
]

_TASK_KEYS = ("prompt", "timeout", "model", "max_tokens")
_FILE_KEYS = ("context", "max_concurrent", "tasks")

#: A task as callers give it: a prompt, or a mapping with ``prompt`` and overrides.
TaskInput = str | dict[str, Any]


class Items:
    """Task items made again on each iteration by ``make`` (from text that is kept)."""

    def __init__(self, make: Callable[[], Iterator[dict[str, Any]]]) -> None:
        self._make = make

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self._make()


@dataclass(frozen=True)
class TaskFile:
    """What a task file held: tasks (not yet numbered; a list, or :class:`Items` read
    again on each pass), and the JSON form's extras."""

    tasks: Iterable[dict[str, Any]]
    context: list[str] = field(default_factory=list)
    max_concurrent: int | None = None


#: Where ``str.splitlines`` breaks a line.
_LINE_BREAK = re.compile("\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def _lines(text: str) -> Iterator[str]:
    """``text.splitlines()``, one line at a time."""
    start = 0
    for found in _LINE_BREAK.finditer(text):
        yield text[start:found.start()]
        start = found.end()
    if start < len(text):
        yield text[start:]


def _is_comment(line: str) -> bool:
    return line.lstrip().startswith("#")


def parse_lines(text: str, *, comments: bool = False) -> Items:
    """One task per non-blank line (made on each pass over them); with ``comments``, a line
    starting with ``#`` is skipped too."""
    return Items(lambda: (
        {"prompt": line} for line in _lines(text)
        if line.strip() and not (comments and _is_comment(line))
    ))


def _without_leading_comments(text: str) -> str:
    """``text`` from its first line that is neither blank nor a comment (what decides its
    format)."""
    start = 0
    for found in _LINE_BREAK.finditer(text):
        line = text[start:found.start()]
        if line.strip() and not _is_comment(line):
            break
        start = found.end()
    return text[start:]


def parse_task_file(text: str, name: str) -> TaskFile:
    """Parse a task file's text (its format is detected; see the module docstring)."""
    try:
        return _parse(text, name)
    except RecursionError:  # JSON nested thousands deep: Python's parser recurses
        raise UsageError(
            f"{name} holds JSON nested too deeply to be tasks: {_JSON_FORMS}"
        ) from None


def _parse(text: str, name: str) -> TaskFile:
    stripped = _without_leading_comments(text).strip()
    json_named = name.lower().endswith(".json")
    if stripped.startswith(("{", "[")):
        try:
            whole = json.loads(text)  # not stripped: its error names the right line
        except json.JSONDecodeError as exc:
            if json_named and stripped.startswith("["):
                raise UsageError(
                    f"{name} is not valid JSON ({exc.msg}, line {exc.lineno} column "
                    f"{exc.colno}); {_JSON_FORMS}"
                ) from exc
            whole = None
        if isinstance(whole, list):
            return _json_file({"tasks": whole}, name)
        if isinstance(whole, dict) and "tasks" in whole:
            return _json_file(whole, name)
        if isinstance(whole, dict):  # a one-line JSONL file
            return TaskFile([_task_object(whole, f"{name}, line 1")])
        if stripped.startswith("{"):
            for _ in _jsonl(text, name):  # every line checked now: a mistake is said at once
                pass
            return TaskFile(Items(lambda: _jsonl(text, name)))
    if stripped and (json_named or name.lower().endswith(".jsonl")):
        kind = _json_scalar_kind(stripped)
        if kind is not None:  # JSON, but one value and not tasks
            raise UsageError(f"{name} holds a JSON {kind}, not tasks: {_JSON_FORMS}")
        raise UsageError(f"{name} is not JSON: {_JSON_FORMS}")
    return TaskFile(parse_lines(text, comments=True))


def _json_scalar_kind(text: str) -> str | None:
    """What one JSON value other than an object or a list is (``string``, ``number``...),
    or None when ``text`` is not one."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "number"
    return "null" if value is None else None


_JSON_FORMS = (
    'a .json task file holds {"tasks": [...]} or a list of tasks, a .jsonl one a task object '
    "per line (a file of any other name takes one task per line of text)"
)


def _json_file(data: dict[str, Any], name: str) -> TaskFile:
    unknown = sorted(set(data) - set(_FILE_KEYS))
    if unknown:
        raise UsageError(
            f"{name}: unknown key(s) {', '.join(unknown)}; a task file object may have "
            f"{', '.join(_FILE_KEYS)}"
        )
    raw_tasks = data["tasks"]
    if not isinstance(raw_tasks, list):
        raise UsageError(f"{name}: 'tasks' must be a list of prompts or task objects")
    tasks = []
    for i, item in enumerate(raw_tasks, 1):
        where = f"{name}, task {i}"
        if isinstance(item, str):
            if item.strip():
                tasks.append({"prompt": item})
        elif isinstance(item, dict):
            tasks.append(_task_object(item, where))
        else:
            raise UsageError(f"{where}: a task must be a string or an object with a 'prompt'")
    context = data.get("context")
    if context is None:
        docs: list[str] = []
    elif isinstance(context, str):
        docs = [context]
    elif isinstance(context, list) and all(isinstance(d, str) for d in context):
        docs = list(context)
    else:
        raise UsageError(f"{name}: 'context' must be a string or a list of strings")
    cap = data.get("max_concurrent")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise UsageError(f"{name}: 'max_concurrent' must be a positive integer, got {cap!r}")
    return TaskFile(tasks, docs, cap)


def _jsonl(text: str, name: str) -> Iterator[dict[str, Any]]:
    for lineno, line in enumerate(_lines(text), 1):
        if not line.strip() or _is_comment(line):
            continue
        where = f"{name}, line {lineno}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"{where} is not valid JSON ({exc.msg}); a JSONL task file needs one task "
                "object per line"
            ) from exc
        if not isinstance(item, dict):
            raise UsageError(f"{where}: each line must be a task object with a 'prompt'")
        yield _task_object(item, where)


def _task_object(item: dict[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(item) - set(_TASK_KEYS))
    if unknown:
        raise UsageError(
            f"{where}: unknown key(s) {', '.join(unknown)}; a task may have "
            f"{', '.join(_TASK_KEYS)}"
        )
    if not isinstance(item.get("prompt"), str):
        raise UsageError(f"{where}: a task object needs a 'prompt' string")
    return dict(item)


_NO_TASKS_CLI = ("no tasks: give them as arguments, with -f FILE (one per line, JSON or JSONL) "
                "or with --stdin (one per line)")


def number_tasks(
    items: Iterable[TaskInput], where: str = "task", *, none: str = _NO_TASKS_CLI
) -> list[VolleyTask]:
    """Validate tasks and number them 1, 2, …; blank prompts are skipped.

    Raises UsageError for a bad field, and for an empty list (saying ``none``).
    """
    tasks = list(_numbered(items, where))
    if not tasks:
        raise UsageError(none)
    return tasks


class TaskStream:
    """A volley's tasks, numbered as :func:`number_tasks` numbers them, made again from
    ``items`` on each pass instead of held: its memory is the input's, not a record per
    task.  ``len`` counts them (one pass, which validates every task first).
    """

    def __init__(self, items: Iterable[TaskInput], where: str = "task", *,
                 none: str = _NO_TASKS_CLI) -> None:
        self._items = items
        self._where = where
        self._none = none
        self._count: int | None = None

    def __iter__(self) -> Iterator[VolleyTask]:
        count = 0
        for task in _numbered(self._items, self._where):
            count += 1
            yield task
        if not count:
            raise UsageError(self._none)
        self._count = count

    def __len__(self) -> int:
        if self._count is None:
            for _ in self:
                pass
        assert self._count is not None
        return self._count

    def __contains__(self, task: object) -> bool:
        return any(task == mine for mine in self)


def _numbered(items: Iterable[TaskInput], where: str) -> Iterator[VolleyTask]:
    index = 0
    for position, item in enumerate(items, 1):
        data = {"prompt": item} if isinstance(item, str) else item
        if not isinstance(data, dict):
            raise UsageError(f"{where} {position}: give a prompt string or a mapping")
        label = f"{where} {position}"
        prompt = data.get("prompt")
        if not isinstance(prompt, str):
            raise UsageError(f"{label}: 'prompt' must be a string")
        if not prompt.strip():
            continue
        index += 1
        yield VolleyTask(
            index=index,
            prompt=prompt,
            timeout=_timeout(data.get("timeout"), label),
            model=_model(data.get("model"), label),
            max_tokens=_max_tokens(data.get("max_tokens"), label),
        )


def _timeout(value: Any, label: str) -> float | None:
    return None if value is None else parse_duration(value, f"{label}: 'timeout'")


def _model(value: Any, label: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{label}: 'model' must be a non-empty string")
    return value


def _max_tokens(value: Any, label: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{label}: 'max_tokens' must be a positive integer, got {value!r}")
    return value


def task_models(tasks: Iterable[VolleyTask], default: str) -> set[str]:
    """Every model the tasks will use."""
    return {task.model or default for task in tasks}
