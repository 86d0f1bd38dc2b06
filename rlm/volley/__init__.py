"""Volleys: many independent tasks, optionally over one shared context, through one gate.

The records (:class:`VolleyTask`, :class:`TaskResult`, :class:`VolleyResult`)
and the store protocols (:class:`TaskSource`, :class:`ResultSink`) are the
interface a durable journal builds on; :class:`Volley` runs one volley.
"""

from rlm._config import VolleyOptions
from rlm.volley.engine import Volley, VolleyProgress
from rlm.volley.records import (
    EXIT_CODES,
    TaskResult,
    TaskStatus,
    VolleyResult,
    VolleyStatus,
    VolleySummary,
    VolleyTask,
    new_volley_id,
)
from rlm.volley.store import MemoryStore, ResultSink, TaskSource
from rlm.volley.tasks import TaskInput, number_tasks

__all__ = [
    "EXIT_CODES",
    "MemoryStore",
    "ResultSink",
    "TaskInput",
    "TaskResult",
    "TaskSource",
    "TaskStatus",
    "Volley",
    "VolleyOptions",
    "VolleyProgress",
    "VolleyResult",
    "VolleyStatus",
    "VolleySummary",
    "VolleyTask",
    "new_volley_id",
    "number_tasks",
]
