"""A task's verdict on its way to the journal: flat on the event loop, a row off it.

The worker's event loop hands a group of verdicts to its writes as *flat*
tuples: the :class:`~rlm.volley.records.TaskResult` fields the journal keeps,
read in one C call per result (:func:`flat_verdict`, an ``attrgetter``), with
no object built per field and no text looked at.  Turning them into the rows
:meth:`rlm.journal.store.JournalStore.finish_rows` writes (:func:`verdict_row`:
the status word, the usage object, the duration rounded, text cleaned of what
UTF-8 cannot encode) happens in the store's thread, while the event loop runs
the volley's tasks.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter
from typing import Any

from rlm._text import clean_text
from rlm.journal.records import VerdictRow

__all__ = ["FlatVerdict", "flat_verdict", "verdict_row", "verdict_rows"]

#: index, status (``succeeded``/``failed``), output, duration (s), input, output and
#: cached tokens, retries, cost, error, requests sent, error kind, trace file, time at
#: the provider (s): a TaskResult's journaled fields, in this order.
FlatVerdict = tuple[int, str, str | None, float, int, int, int, int, float | None, str | None,
                    int, str | None, str | None, float]

#: A TaskResult's :data:`FlatVerdict` (one C call; read on the event loop).
flat_verdict: Any = attrgetter(
    "index", "status", "output", "duration_sec", "tokens_input", "tokens_output",
    "tokens_cached", "retries", "cost", "error", "calls", "error_kind", "trace", "request_sec",
)


def verdict_row(flat: FlatVerdict) -> VerdictRow:
    """The store's row for a flat verdict."""
    (index, status, output, duration, tokens_in, tokens_out, cached, retries, cost, error,
     calls, kind, trace, at_provider) = flat
    usage: dict[str, Any] = {
        "duration_sec": round(duration, 6),
        "tokens_input": tokens_in,
        "tokens_output": tokens_out,
        "tokens_cached": cached,
        "retries": retries,
        "calls": calls,
        "request_sec": round(at_provider, 6),
    }
    if kind is not None:
        usage["error_kind"] = kind
    if trace is not None:
        usage["trace"] = trace
    return (
        index,
        "done" if status == "succeeded" else "failed",
        # Any text may reach a verdict (model code's answers, errors): it must encode.
        None if output is None else clean_text(output),
        usage,
        cost,
        None if error is None else clean_text(error),
    )


def verdict_rows(flats: Iterable[FlatVerdict]) -> list[VerdictRow]:
    return [verdict_row(flat) for flat in flats]
