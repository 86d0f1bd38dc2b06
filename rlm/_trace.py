"""The JSONL trace: one event per line, written as the run goes.

The first line is a ``trace_started`` record naming the trace schema's version
(:data:`TRACE_SCHEMA_VERSION`); a trace without it is of version 1, written by an
rlm from before the schema was published (docs/compatibility.md).  The schema
itself is ``rlm/data/trace-schema.json`` (:mod:`rlm._trace_schema`).

The file is written under a temporary name beside the target and renamed into
place when the run ends (for any reason), so a reader never sees a file that
some other run is still writing, and a failed open leaves nothing behind.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import IO, Any

from rlm import __version__
from rlm._events import Event, TextDelta, TraceStarted
from rlm.errors import UsageError

__all__ = [
    "CONTENT_FIELDS",
    "TRACE_SCHEMA_VERSION",
    "TraceWriter",
    "check_trace_path",
    "half_written",
    "part_path",
    "schema_version_of",
]

#: The version of the trace schema this rlm writes.  Adding an event kind, or a field
#: with a default, keeps it; removing, renaming or retyping a field, or giving one a new
#: meaning, moves it on (``python -m rlm._trace_schema`` refuses such a change otherwise).
TRACE_SCHEMA_VERSION = 2


def schema_version_of(first: Any) -> int:
    """The schema version of a trace whose first record is ``first``: what its
    ``trace_started`` header says, or 1 for a trace without one (or with a header
    that names no usable version)."""
    if isinstance(first, dict) and first.get("event") == TraceStarted.kind:
        version = first.get("schema_version")
        if isinstance(version, int) and not isinstance(version, bool) and version >= 1:
            return version
    return 1


def check_trace_path(path: str | os.PathLike[str]) -> Path:
    """``path`` as a Path, or UsageError when a trace file cannot be written there.

    Checked before a run starts, so a bad path never costs a finished run its
    answer, and nothing is written beside a path the user did not give.
    """
    target = Path(path)
    if str(path) == "-":
        raise UsageError(
            "--trace - is not supported: stdout carries the answer; give a file path "
            "(e.g. --trace run.jsonl)"
        )
    if target.is_dir():
        raise UsageError(
            f"trace path {path} is a directory; give a file path (e.g. {target / 'run.jsonl'})"
        )
    parent = target.parent
    if not parent.is_dir():
        raise UsageError(
            f"cannot write trace file {path}: directory {parent} does not exist; create it "
            f"(mkdir -p {parent}) or give a path in an existing directory"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write trace file {path}: directory {parent} is not writable")
    return target


#: The fields that carry content (the user's input, prompts, replies, code, outputs), by kind.
#: ``--trace-content meta`` writes them as null: sizes and timings stay.
CONTENT_FIELDS: dict[str, tuple[str, ...]] = {
    "run_started": ("query", "system_prompt"),
    "run_finished": ("answer",),
    "call_started": ("query",),
    "call_finished": ("answer",),
    "step_completed": ("reply", "request"),
    "code_executed": ("code", "output", "error"),
    "bridge_call_finished": ("prompts", "contexts", "answers"),
    "task_finished": ("prompt", "output", "error"),
}


def part_path(path: Path, pid: int) -> Path:
    """Where process ``pid`` writes the trace for ``path`` until its run ends."""
    return path.with_name(f".{path.name}.{pid}.part")


def half_written(path: Path) -> Path | None:
    """The newest trace a killed run left unfinished under ``path``'s temporary name, or None.

    A run killed with ``kill -9`` (or by the OOM killer) never renames its trace into
    place: what it wrote is in ``.NAME.PID.part`` beside ``path``.
    """
    try:
        parts = [p for p in path.parent.glob(f".{glob.escape(path.name)}.*.part")
                 if p.name[len(path.name) + 2:-5].isdigit()]
        return max(parts, key=lambda p: p.stat().st_mtime, default=None)
    except OSError:  # the folder went away, or a part file between glob and stat
        return None


class TraceWriter:
    """A sink that appends each event as one JSON line (``text_delta`` excepted).

    ``content="meta"`` blanks the :data:`CONTENT_FIELDS` of every event it writes.
    """

    def __init__(self, path: str | os.PathLike[str], *, content: str = "full") -> None:
        self.path = check_trace_path(path)
        self._blank = content == "meta"
        self._tmp = part_path(self.path, os.getpid())
        try:
            # A lone surrogate (from a source not cleaned where it enters) cannot be UTF-8:
            # backslashreplace writes it as the JSON escape \udXXX, which reads back the same
            # (json escapes every backslash, so the escape is never doubled), and a trace
            # never ends a run.
            self._file: IO[str] | None = open(  # noqa: SIM115
                self._tmp, "w", encoding="utf-8", errors="backslashreplace"
            )
        except OSError as exc:
            raise UsageError(f"cannot write trace file {self.path}: {exc.strerror}") from exc
        self._write(TraceStarted(schema_version=TRACE_SCHEMA_VERSION,
                                 rlm_version=__version__).trace_record())

    def __call__(self, event: Event) -> None:
        # Streamed text stays out of the trace: it would repeat every reply in pieces.
        if self._file is not None and not isinstance(event, TextDelta):
            record = event.trace_record()
            if self._blank:  # on a copy: the record is the result's trace too
                blanked = [n for n in CONTENT_FIELDS.get(event.kind, ())
                           if record.get(n) is not None]
                if blanked:
                    record = {**record, **dict.fromkeys(blanked)}
            self._write(record)

    def _write(self, record: dict[str, Any]) -> None:
        assert self._file is not None
        self._file.write(json.dumps(record, default=_jsonable, ensure_ascii=False))
        self._file.write("\n")

    def close(self) -> None:
        """Flush and move the trace into place.  Safe to call twice."""
        if self._file is None:
            return
        self._file.close()
        self._file = None
        os.replace(self._tmp, self.path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return repr(value)
