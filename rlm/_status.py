"""How things end, as closed sets of names (used in results, events and the trace)."""

from __future__ import annotations

from typing import Literal

__all__ = ["AttemptStatus", "CallStatus", "RunStatus"]

#: How a run ended (``RunResult.status``, ``run_finished``): ``iterations`` means the root
#: gave no answer within ``max_iterations``.
RunStatus = Literal["answered", "iterations", "timeout", "budget_exceeded", "interrupted", "error"]

#: How one call ended (``call_finished``): ``stopped`` means the run ended around it.
CallStatus = Literal["answered", "iterations", "budget_exceeded", "error", "stopped"]

#: How one request attempt ended (``llm_response``).
AttemptStatus = Literal["ok", "error", "cancelled"]
