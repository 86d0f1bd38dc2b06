"""What the history keeps about a run: its summary, built from the run's result."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a run's history entry never loads the volley code
    from rlm._result import RunResult
    from rlm.volley.records import VolleyResult

__all__ = ["keep_trace", "summary_of", "volley_summary"]


def summary_of(result: RunResult) -> dict[str, Any]:
    """The summary fields ``rlm runs`` shows, from a finished (or partial) run."""
    calls = sum(1 for e in result.trace if e.get("event") == "call_started")
    return {
        "status": result.status,
        "answer": None if result.answer is None else result.answer[:500],
        "error": result.error,
        "llm_calls": result.usage.llm_calls,
        "input_tokens": result.usage.input_tokens,
        "output_tokens": result.usage.output_tokens,
        "cost": result.usage_detail.get("cost"),
        "duration_s": round(result.duration_s, 3),
        "calls": calls,
        "answered_by": list(result.answered_by),
    }


def volley_summary(result: VolleyResult, llm_calls: int) -> dict[str, Any]:
    """The same fields for a volley: its tasks are its calls.

    ``llm_calls`` comes from the volley's ledger (requests actually sent):
    an ``--rlm`` task makes many, a cached one none, so the tasks cannot tell.
    """
    s = result.summary
    return {
        "status": result.status, "answer": None, "error": result.error,
        "llm_calls": llm_calls,
        "input_tokens": s.tokens_input, "output_tokens": s.tokens_output,
        "cost": s.total_cost, "duration_s": round(s.duration_sec, 3),
        "calls": s.total_tasks, "answered_by": list(result.answered_by),
    }


def keep_trace(source: Path, target: Path) -> None:
    """Put a copy of ``source`` at ``target``: a hard link when it can (no bytes copied)."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.copy")
    try:
        os.link(source, tmp)
    except OSError:  # another file system, or links not allowed: copy the bytes
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)
