"""What a run returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlm._status import RunStatus
from rlm._traffic.usage import Usage

__all__ = ["STATUS_EXIT_CODES", "RunResult"]

#: Exit code of ``rlm run`` for each status that is not an error.
STATUS_EXIT_CODES: dict[RunStatus, int] = {
    "answered": 0,
    "iterations": 3,
    "timeout": 3,
    "budget_exceeded": 3,
    "interrupted": 130,
}


@dataclass(frozen=True, slots=True)
class RunResult:
    """The outcome of one run.

    ``status`` is ``answered``, ``iterations`` (no answer within
    ``max_iterations``), ``timeout``, ``budget_exceeded``, ``interrupted`` or
    ``error``.  ``trace`` holds every event of the run as a dict (the same
    records the JSONL trace file has); ``trace_path`` is that file, if one was
    written.  When a limit ended the run, ``answer`` holds the best candidate
    the run had (a FINAL in progress, an ``answer`` variable, or the reply to
    a final extract step) and ``last_output`` what the root's code printed
    last.  ``usage_detail`` breaks usage and cost down per model, lane and
    depth.  ``answered_by`` names who wrote the run's answers, in the order they
    first answered (``fixture`` for the built-in fixture model, which is not a
    language model; otherwise the provider).  ``cached_calls`` counts requests
    answered from the response cache (``cache_path``): never sent, never
    counted in ``usage``.
    """

    answer: str | None
    status: RunStatus
    iterations: int
    usage: Usage
    duration_s: float
    trace: tuple[dict[str, Any], ...] = field(default=(), repr=False)
    trace_path: str | None = None
    error: str | None = None
    answered_by: tuple[str, ...] = ()
    traffic: dict[str, Any] = field(default_factory=dict, repr=False)
    usage_detail: dict[str, Any] = field(default_factory=dict, repr=False)
    last_output: str | None = field(default=None, repr=False)
    cached_calls: int = 0
    #: The answer as validated data (a dict or list) when the run asked for a ``schema``.
    data: Any = field(default=None, repr=False)
    #: Seconds after ``duration_s`` ended that the run spent reaping its sandboxes and the
    #: zygote before it returned (0 when a timeout or abort cut it off: then in ``duration_s``).
    teardown_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` shape."""
        return {
            "answer": self.answer,
            "status": self.status,
            "iterations": self.iterations,
            "usage": self.usage.to_dict(),
            "duration_s": round(self.duration_s, 3),
            "teardown_s": round(self.teardown_s, 3),
            "trace": self.trace_path,
            "error": self.error,
            "answered_by": list(self.answered_by),
            "cost": self.usage_detail.get("cost"),
            "usage_detail": self.usage_detail,
            "traffic": self.traffic,
            "last_output": self.last_output,
            "cached_calls": self.cached_calls,
            "data": self.data,
        }
