"""Volleys in a journal: what is stored when a volley is created, and what a resume reads.

A volley's record holds its tasks, its shared context and its settings: where
and how to send (provider, base URL, model, limits, every run setting) and the
volley options — never the API key, which each worker reads from its own
environment.  :func:`load_volley` turns the record back into what the volley
engine takes: the tasks, the context, the settings, and the results tasks
already have (done ones, and failed ones when failed tasks are skipped).
"""

from __future__ import annotations

import dataclasses
import getpass
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from rlm._config import RunConfig, public_settings
from rlm.journal.records import Spend, TaskRow, VolleyRow
from rlm.journal.store import JournalStore
from rlm.providers.fixture import FixtureOptions, pop_legacy_options
from rlm.volley.records import TaskResult, VolleyTask

__all__ = [
    "StoredRows",
    "StoredVolley",
    "load_volley",
    "record_volley",
    "reopen_failed",
    "result_from_row",
    "result_reader",
    "stored_fixture",
    "stored_layer",
    "stored_settings",
    "this_origin",
]

_T = TypeVar("_T")

#: Run settings never written to a journal.
_SECRET = frozenset({"api_key"})


def stored_settings(
    config: RunConfig, options: Mapping[str, Any], fixture: FixtureOptions | None = None
) -> dict[str, Any]:
    """What a journal keeps of a volley's configuration (no key), and the fixture's pace."""
    stored = {"config": public_settings(config), "options": dict(options),
              "origin": this_origin()}
    if fixture is not None:
        stored["fixture"] = dataclasses.asdict(fixture)
    return stored


def this_origin() -> dict[str, str]:
    """Who started a volley, and where: this process's user and working directory.

    Stored with each volley, so that ``last`` means the last volley *this user started
    from this directory*, not another process's newest in a shared journal.
    """
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no name for this uid (a container)
        user = str(os.getuid())
    return {"user": user, "cwd": os.getcwd()}


def stored_fixture(settings: Mapping[str, Any]) -> FixtureOptions | None:
    """The fixture model's pace a volley was stored with, if any.

    Journals written when the pace was a run setting hold it as
    ``config.fixture_sub_latency`` (and the other ``fixture_*`` keys):
    those are read as the same options.
    """
    pace = settings.get("fixture")
    if isinstance(pace, dict):
        return FixtureOptions(**pace)
    return pop_legacy_options(dict(settings.get("config", {})))


def stored_layer(settings: Mapping[str, Any]) -> dict[str, Any]:
    """What a volley stored, by setting name: its run settings and its options (to
    resolve a resume's or a worker's settings on top of; never the key).

    Volleys stored before the settings table kept a per-task ``timeout`` among their
    options: it is the run setting ``timeout`` now (each task's limit).
    """
    config = {k: v for k, v in dict(settings.get("config", {})).items() if k not in _SECRET}
    pop_legacy_options(config)  # the fixture's pace, once a run setting
    if isinstance(config.get("require_isolation"), list):
        config["require_isolation"] = tuple(config["require_isolation"])
    options = dict(settings.get("options", {}))
    if options.get("timeout") is not None:
        config["timeout"] = options["timeout"]
    options.pop("timeout", None)
    return {**config, **options}


def record_volley(
    store: JournalStore,
    volley_id: str,
    settings: Mapping[str, Any],
    tasks: Iterable[VolleyTask],
    context: Sequence[str],
) -> None:
    """Record a volley; its tasks are taken one at a time (a TaskStream is never held)."""
    store.create_volley(volley_id, settings, (t.to_dict() for t in tasks), context=context)


def result_from_row(row: TaskRow) -> TaskResult | None:
    """The verdict a done or failed task row holds (None for open or claimed tasks)."""
    if row.status not in ("done", "failed"):
        return None
    usage = row.usage
    return TaskResult(
        index=row.index,
        prompt=str(row.spec.get("prompt", "")),
        status="succeeded" if row.status == "done" else "failed",
        duration_sec=float(usage.get("duration_sec", 0.0)),
        tokens_input=int(usage.get("tokens_input", 0)),
        tokens_output=int(usage.get("tokens_output", 0)),
        tokens_cached=int(usage.get("tokens_cached", 0)),
        cost=row.cost,
        retries=int(usage.get("retries", 0)),
        output=row.output,
        error=row.error,
        calls=int(usage.get("calls", 0)),
        error_kind=_text_or_none(usage.get("error_kind")),
        trace=_text_or_none(usage.get("trace")),
        request_sec=float(usage.get("request_sec", 0.0)),
    )


def result_reader(
    store: JournalStore, volley_id: str, *, cut_short: Collection[int] = ()
) -> Callable[[int, int], list[TaskResult]]:
    """Reads a volley's tasks back a page at a time (an ``OrderedWriter``'s reader): up to
    ``limit`` tasks above index ``after``, in task order, each its verdict or a cancelled
    result (``cut_short``: this process cancelled it after it had sent something)."""

    def read(after: int, limit: int) -> list[TaskResult]:
        return [
            result_from_row(row) or TaskResult(
                index=row.index, prompt=str(row.spec.get("prompt", "")), status="cancelled",
                error=("cancelled while running" if row.index in cut_short
                       else "in progress" if row.status == "in_progress" else "not started"),
            )
            for row in store.tasks_after(volley_id, after, limit)
        ]

    return read


class StoredRows(Generic[_T]):
    """What a volley's task rows make (its tasks, its verdicts), read from its journal a
    page at a time on each pass: never all held.  ``len`` comes from the journal's counts
    (how many rows make something), without reading them."""

    def __init__(self, store: JournalStore, volley_id: str, count: int,
                 make: Callable[[TaskRow], _T | None], page: int = 1024) -> None:
        self._store, self._volley_id, self._count = store, volley_id, count
        self._make, self._page = make, page

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[_T]:
        after = 0
        while self._count and (rows := self._store.tasks_after(self._volley_id, after,
                                                                self._page)):
            for row in rows:
                made = self._make(row)
                if made is not None:
                    yield made
            after = rows[-1].index

    def __contains__(self, item: object) -> bool:
        return any(item == mine for mine in self)

    def where(self, make: Callable[[TaskRow], _T | None]) -> StoredRows[_T]:
        """The same rows, making ``make``'s instead (its ``len`` is that of every task)."""
        total = sum(self._store.volley(self._volley_id).counts.values())
        return StoredRows(self._store, self._volley_id, total, make, self._page)


def _task_of(row: TaskRow) -> VolleyTask:
    return VolleyTask.from_dict(row.spec)


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class StoredVolley:
    """A volley read back from a journal, ready to run again.  Its tasks and its verdicts
    so far are read from the journal as they are used (:class:`StoredRows`)."""

    row: VolleyRow
    tasks: StoredRows[VolleyTask]
    context: list[str]
    earlier: StoredRows[TaskResult]

    @property
    def volley_id(self) -> str:
        return self.row.volley_id

    @property
    def settings(self) -> dict[str, Any]:
        return self.row.settings

    @property
    def spent(self) -> Spend:
        return self.row.spent


def load_volley(store: JournalStore, ref: str, *, rerun_failed: bool) -> StoredVolley:
    """Read volley ``ref`` (an id or ``last``); with ``rerun_failed``, failed tasks reopen.

    ``earlier`` holds the verdicts that stand: every done task, and failed ones
    unless they were reopened.
    """
    volley_id = store.resolve(ref)
    if rerun_failed:
        store.reopen_failed(volley_id)
    row = store.volley(volley_id)
    counts = row.counts
    return StoredVolley(
        row=row,
        tasks=StoredRows(store, volley_id, sum(counts.values()), _task_of),
        context=store.context(volley_id),
        earlier=StoredRows(store, volley_id, counts["done"] + counts["failed"],
                           result_from_row),
    )


def reopen_failed(store: JournalStore, stored: StoredVolley) -> StoredVolley:
    """Reopen ``stored``'s failed tasks (a resume runs them again); the volley as it is now.

    Separate from :func:`load_volley` so that a resume can show its estimate (and
    be declined) before it changes anything in the journal.
    """
    if not stored.row.counts["failed"]:
        return stored
    store.reopen_failed(stored.volley_id)
    return load_volley(store, stored.volley_id, rerun_failed=False)
