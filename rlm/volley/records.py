"""What a volley is made of and what it produces: plain, frozen, JSON-able records.

These are the records the journal stores as they are: a :class:`VolleyTask`
goes in, a :class:`TaskResult` comes out, and ``to_dict``/``from_dict`` round
trip both through JSON.  :class:`VolleyResult` is the whole volley's outcome in
the ``--output-format json`` shape.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from rlm._config import RunConfig, VolleyMode
from rlm.errors import UsageError

__all__ = [
    "EXIT_CODES",
    "TASK_SETTINGS",
    "TaskResult",
    "TaskStatus",
    "VolleyResult",
    "VolleyStatus",
    "VolleySummary",
    "VolleyTask",
    "check_task_settings",
    "new_volley_id",
    "prompt_title",
]

#: ``cancelled``: the task did not run to a verdict (interrupted, stopped by a
#: budget or by refused credentials before or while it ran).
TaskStatus = Literal["succeeded", "failed", "cancelled"]

#: How a whole volley ended; each maps to an exit code (EXIT_CODES).
VolleyStatus = Literal[
    "succeeded",  # every task succeeded
    "failed",  # at least one task failed after its retries
    "budget_exceeded",  # a budget flag (or the account's credit) stopped it
    "credentials_refused",  # 401/403: nothing more was sent
    "interrupted",  # Ctrl-C / SIGTERM / interrupt()
    "running",  # not ended: `rlm volley show` of a volley a live worker holds tasks of
    "created",  # `rlm volley show` of a volley no worker has taken a task of yet
]

EXIT_CODES: dict[VolleyStatus, int] = {
    "succeeded": 0,
    "failed": 1,
    "budget_exceeded": 3,
    "credentials_refused": 4,
    "interrupted": 130,
    "running": 0,  # only `rlm volley show` reports it, and show succeeded
    "created": 0,  # the same
}


def prompt_title(prompt: str) -> str:
    """A prompt's first line, at most 80 characters: its task's label."""
    return prompt.strip().partition("\n")[0][:80]


def new_volley_id() -> str:
    """A fresh volley id: short, random, safe in file names and URLs."""
    return "v" + uuid.uuid4().hex[:12]


#: Run settings a task may set for itself (``VolleyTask.settings``): they shape its own
#: call, not the volley's gate, endpoint or ledger, which every task shares.
TASK_SETTINGS = frozenset({
    "sub_model", "max_depth", "max_iterations", "exec_timeout", "max_output_chars",
    "max_reply_chars", "max_llm_calls", "context_window",
})
_OWN = ("context", "mode", "settings", "group", "group_max_cost")  # kept only when given


@dataclass(frozen=True)
class VolleyTask:
    """One task: a prompt, run independently of every other task.

    ``index`` is 1-based and fixes the task's place in the output.
    ``timeout`` (seconds), ``model`` and ``max_tokens`` override the volley's.

    A task may carry more of what it needs, so that any worker runs it as it was
    made (an eval's item under one arm): ``context``, the positions of the volley's
    documents that are its context (None: all of them, the shared context);
    ``mode``, ``completion`` or ``rlm`` for it alone; ``settings``, run settings of
    :data:`TASK_SETTINGS` for it alone; ``group``, a label it shares with other
    tasks, and ``group_max_cost``, the USD their finished tasks may spend before
    no more of them starts.
    """

    index: int
    prompt: str
    timeout: float | None = None
    model: str | None = None
    max_tokens: int | None = None
    context: tuple[int, ...] | None = None
    mode: VolleyMode | None = None
    settings: dict[str, Any] | None = None
    group: str | None = None
    group_max_cost: float | None = None

    @property
    def title(self) -> str:
        """The prompt's first line, at most 80 characters: the task's label in streamed text."""
        return prompt_title(self.prompt)

    def run_config(self, base: RunConfig) -> RunConfig:
        """The run settings this task runs with: ``base`` (the volley's), its own on top."""
        if self.model is None and self.max_tokens is None and not self.settings:
            return base
        return dataclasses.replace(base, model=self.model or base.model,
                                   max_tokens=self.max_tokens or base.max_tokens,
                                   **(self.settings or {}))

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"index": self.index, "prompt": self.prompt,
                                "timeout": self.timeout, "model": self.model,
                                "max_tokens": self.max_tokens}
        for name in _OWN:  # a plain task's record stays as small as it always was
            value = getattr(self, name)
            if value is not None:
                data[name] = list(value) if isinstance(value, tuple) else value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VolleyTask:
        own = {k: data[k] for k in _OWN if data.get(k) is not None}
        if "context" in own:
            own["context"] = tuple(int(i) for i in own["context"])
        return cls(**{k: data.get(k) for k in ("timeout", "model", "max_tokens")}, **own,
                   index=int(data["index"]), prompt=str(data["prompt"]))


def check_task_settings(settings: Mapping[str, Any], where: str) -> None:
    """UsageError naming ``where`` for a setting a task cannot set for itself."""
    foreign = sorted(set(settings) - TASK_SETTINGS)
    if foreign:
        raise UsageError(
            f"{where}: {', '.join(foreign)} cannot differ between tasks (the volley's gate, "
            f"endpoint and ledger are shared); a task may set {', '.join(sorted(TASK_SETTINGS))}"
        )


@dataclass(frozen=True)
class TaskResult:
    """The verdict on one task.  ``cost`` is USD, ``None`` when the model has no price.
    ``duration_sec`` is the task's time in its worker (waits for a permit included),
    ``request_sec`` its requests' time at the provider (attempts summed: the concurrency
    it used, in seconds)."""

    index: int
    prompt: str
    status: TaskStatus
    duration_sec: float = 0.0
    tokens_input: int = 0
    tokens_output: int = 0
    tokens_cached: int = 0
    cost: float | None = 0.0
    retries: int = 0
    output: str | None = None
    error: str | None = None
    #: Requests sent for it (retries included; none for answers from the response cache).
    calls: int = 0
    #: What kind of failure (``timeout``, ``budget``, ``provider``, ``sandbox``,
    #: ``no_answer``, ``context_window``, ``error``), for a failed task.
    error_kind: str | None = None
    #: The trace file its events went to, when one was written.
    trace: str | None = None
    request_sec: float = 0.0

    @property
    def tokens_total(self) -> int:
        return self.tokens_input + self.tokens_output

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["duration_sec"] = round(self.duration_sec, 3)
        data["request_sec"] = round(self.request_sec, 3)
        data["cost"] = None if self.cost is None else round(self.cost, 8)
        data["tokens_total"] = self.tokens_total
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskResult:
        status = data["status"]
        if status not in get_args(TaskStatus):
            raise ValueError(f"unknown task status {status!r}")
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class VolleySummary:
    """Totals over a volley (the ``summary`` object of the JSON output)."""

    total_tasks: int
    succeeded: int
    failed: int
    cancelled: int
    duration_sec: float
    tokens_input: int
    tokens_output: int
    tokens_cached: int
    total_cost: float | None
    max_concurrent_used: int
    total_retries: int
    rate_limited: int
    #: Tasks answered through a provider's batch service (``--batch-api``), at its prices.
    batch_tasks: int = 0

    @property
    def total_tokens(self) -> int:
        return self.tokens_input + self.tokens_output

    @property
    def avg_tokens_per_task(self) -> float:
        """Tokens per task that has a verdict (0 before any)."""
        judged = self.succeeded + self.failed
        return self.total_tokens / judged if judged else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["duration_sec"] = round(self.duration_sec, 3)
        data["total_cost"] = None if self.total_cost is None else round(self.total_cost, 8)
        data["total_tokens"] = self.total_tokens
        data["avg_tokens_per_task"] = round(self.avg_tokens_per_task, 1)
        return data


@dataclass(frozen=True)
class VolleyResult:
    """A whole volley: every task in task order (those that never ran are ``cancelled``)."""

    volley_id: str
    status: VolleyStatus
    summary: VolleySummary
    tasks: tuple[TaskResult, ...] = field(repr=False)
    error: str | None = None  # why the volley stopped early, when it did
    #: Who wrote the answers (``fixture``: the built-in fixture model, not a language model).
    answered_by: tuple[str, ...] = ()
    # ``running`` (``rlm volley show``): seconds since the youngest heartbeat of a live
    # worker's claim on the volley; a worker killed on another host ages it until the
    # stale timeout reopens its tasks.  None for any other status.
    heartbeat_age_sec: float | None = None
    # Built from the journal's rows alone (``rlm volley show``, a resume with nothing left
    # to run), which keep each task's retries but not the peak in flight or the 429s.
    read_back: bool = False
    #: The volley's provider batches (``--batch-api``), in order: ``number``, ``batch_id``,
    #: ``provider``, ``stage`` (how far rlm got: planned ... collected), ``status`` (the
    #: provider's word), ``tasks``, ``succeeded``, ``failed``.
    batches: tuple[dict[str, Any], ...] = ()
    #: Answers this process counted at an estimate: their provider sent no usage (a
    #: llama.cpp server's streams), so the token figures are approximate.
    estimated_calls: int = 0

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def to_dict(self) -> dict[str, Any]:
        """The ``--output-format json`` shape."""
        return {
            "volley_id": self.volley_id,
            "status": self.status,
            "heartbeat_age_sec": self.heartbeat_age_sec,
            "error": self.error,
            "summary": self.summary.to_dict(),
            "batches": list(self.batches),
            "estimated_calls": self.estimated_calls,
            "tasks": [t.to_dict() for t in self.tasks],
        }
