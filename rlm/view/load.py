"""Reading a trace file the way a person would want it read: whatever is there.

A trace from a killed run ends in a cut line; a trace from a newer rlm has
event kinds this version does not know.  Neither is an error: the page shows
what can be shown and says what was left out.  A file that is not a trace at
all (or is missing) is a :class:`~rlm.errors.UsageError` with a message that
says what to pass instead.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rlm.volley.events  # noqa: F401  (defines the volley's event kinds: they are known too)
from rlm._events import Event, TraceStarted
from rlm._files import TRACE_FILE_BYTES, ReadLimits, read_bytes
from rlm._trace import TRACE_SCHEMA_VERSION, schema_version_of
from rlm.errors import UsageError

__all__ = ["KNOWN_KINDS", "LoadedTrace", "load_trace", "parse_trace"]



def _kinds(cls: type[Event]) -> set[str]:
    found = set()
    for sub in cls.__subclasses__():
        found.add(sub.kind)
        found |= _kinds(sub)
    return found


#: The event kinds this version of rlm writes: anything else comes from a newer rlm.
KNOWN_KINDS = frozenset(_kinds(Event))


@dataclass
class LoadedTrace:
    """The events of one trace file and what was wrong with it.

    ``truncated`` is true when the last line was cut (a killed run);
    ``bad_lines`` counts other lines that were not JSON objects (line numbers
    in ``bad_line_numbers``, at most ten); ``unknown_kinds`` counts events of
    kinds this version does not know (kept, not shown).  ``schema_version`` is what
    the trace's first line says (1 for a trace from before the header existed); the
    header itself is not among ``events``.
    """

    source: str
    schema_version: int = 1
    events: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False
    bad_lines: int = 0
    bad_line_numbers: list[int] = field(default_factory=list)
    unknown_kinds: Counter[str] = field(default_factory=Counter)

    @property
    def finished(self) -> bool:
        return any(e["event"] in ("run_finished", "volley_finished") for e in self.events)

    def notices(self) -> list[str]:
        """Sentences for the page and the terminal about what could not be shown."""
        notes = []
        if self.schema_version > TRACE_SCHEMA_VERSION:
            notes.append(f"The trace follows schema version {self.schema_version}; this rlm "
                         f"reads up to version {TRACE_SCHEMA_VERSION}: showing what it "
                         "understands; upgrade rlm to see the rest.")
        if self.truncated:
            notes.append("The trace's last line was cut (the run was probably killed): "
                         "showing everything before it.")
        elif not self.finished:
            notes.append("The trace has no run_finished event: the run was still going or "
                         "was killed; showing what it recorded.")
        if self.bad_lines:
            lines = ", ".join(str(n) for n in self.bad_line_numbers)
            more = "…" if self.bad_lines > len(self.bad_line_numbers) else ""
            notes.append(f"{self.bad_lines} line(s) were not JSON events and were skipped "
                         f"(line {lines}{more}).")
        if self.unknown_kinds:
            kinds = ", ".join(f"{k} ×{n}" for k, n in sorted(self.unknown_kinds.items()))
            notes.append(f"Events of kinds this version of rlm does not know were skipped "
                         f"({kinds}): the trace comes from a newer rlm; upgrade to see them.")
        return notes


def load_trace(path: str | Path) -> LoadedTrace:
    """Read ``path``; raise :class:`UsageError` when it is missing or is not a trace."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"no trace file at {p}: pass a file written by `rlm run --trace PATH`")
    if p.is_dir():
        raise UsageError(f"{p} is a directory: pass a trace file (.jsonl)")
    # A device or a pipe is refused, and a trace past the bound is not held whole.
    raw = read_bytes(str(p), "trace", ReadLimits.file_only(TRACE_FILE_BYTES))
    return parse_trace(raw.decode("utf-8", errors="replace"), source=str(p))


def parse_trace(text: str, *, source: str = "<trace>") -> LoadedTrace:
    """Parse JSONL text into a :class:`LoadedTrace` (see :func:`load_trace`)."""
    trace = LoadedTrace(source=source)
    lines = text.split("\n")
    cut_last = not text.endswith("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        event = _event(line)
        if event is None:
            if cut_last and number == len(lines):
                trace.truncated = True
            else:
                trace.bad_lines += 1
                if len(trace.bad_line_numbers) < 10:
                    trace.bad_line_numbers.append(number)
            continue
        if event["event"] == TraceStarted.kind:  # the header: not an event to show
            if not trace.events:
                trace.schema_version = schema_version_of(event)
            continue
        if event["event"] not in KNOWN_KINDS:
            trace.unknown_kinds[event["event"]] += 1
            continue
        trace.events.append(event)
    if not any(e["event"] in ("run_started", "volley_started", "call_started", "llm_request")
               for e in trace.events):
        raise UsageError(f"{source} is not an rlm trace (no run, call or request events in "
                         f"it): pass the JSONL file written by `rlm run --trace PATH`")
    return trace


def _event(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("event"), str):
        return None
    if not isinstance(value.get("t", 0.0), int | float):
        return None
    return value
