"""The Python side of volleys, behind ``RLM.volley`` / ``avolley`` / ``iter_volley`` and
``RLM.resume_volley`` / ``work_volley``.

A volley with ``journal=`` (a SQLite path or a postgresql:// URL) is durable: it is
recorded before anything runs, every result is committed before it is reported, and
``RLM(...).resume_volley(volley_id, journal=...)`` (or ``rlm volley --resume``) runs
what is left after any stop; ``work_volley`` adds a worker beside others.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, Unpack, cast

import trio

from rlm._config import RunConfig, VolleyOptions
from rlm._run.context import Context
from rlm._settings import settings_of
from rlm._settings_types import VolleySettings
from rlm.errors import UsageError
from rlm.journal.volleys import StoredVolley, stored_layer
from rlm.providers.open import check_batch_service
from rlm.volley.engine import Volley, VolleyRun
from rlm.volley.journaled import JournaledVolley
from rlm.volley.records import TaskResult, VolleyResult, VolleyTask
from rlm.volley.tasks import TaskInput, number_tasks

__all__ = [
    "JournaledRun", "VolleyArguments", "VolleyRun", "VolleyStream", "make_volley",
    "stream_volley",
]


class VolleyArguments(VolleySettings, total=False):
    """``RLM.volley``'s keyword arguments: the volley settings, and for this volley alone
    ``timeout`` (each task's limit: the run setting) and ``on_result`` (called with each
    TaskResult once it is kept)."""

    timeout: float | None
    on_result: Callable[[TaskResult], None] | None


def make_volley(
    tasks: Iterable[TaskInput],
    context: Context | None,
    *,
    engine: dict[str, Any],
    **arguments: Unpack[VolleyArguments],
) -> VolleyRun:
    """The volley of ``RLM.volley``'s arguments (``engine``: Volley's own keyword
    arguments, the model's config among them): in memory, or through its journal when
    ``journal`` is given (durable: resumable with ``RLM.resume_volley``)."""
    if isinstance(tasks, str):
        raise UsageError("tasks must be a list of prompts (or task mappings), not one string")
    documents = [] if context is None else [context] if isinstance(context, str) else context
    if not all(isinstance(doc, str) for doc in documents):
        raise UsageError("context must be a str or a list of str")
    timeout, on_result = arguments.pop("timeout", None), arguments.pop("on_result", None)
    options = VolleyOptions(**cast(VolleySettings, arguments)).validate()  # the rest: settings
    if timeout is not None:  # each task's limit: the run setting, for this volley
        engine["config"] = dataclasses.replace(engine["config"], timeout=timeout)
    task_list = number_tasks(tasks, none="no tasks: give a list of at least one prompt that "
                                         "is not blank (or task mappings with a 'prompt')")
    engine = {**engine, "on_result": on_result}
    if options.journal is not None or options.batch_api:  # a batch volley: the default one
        return JournaledRun(options, engine, tasks=task_list, context=documents)
    return Volley(tasks=task_list, context=documents, options=options, **engine)


class JournaledRun:
    """A volley run through its journal from Python: recorded (or read back: ``ref``),
    then worked on by this process until no task is left."""

    def __init__(
        self,
        options: VolleyOptions,
        engine: dict[str, Any],
        *,
        tasks: list[VolleyTask] | None = None,
        context: list[str] | None = None,
        ref: str | None = None,
        rerun_failed: bool = False,
    ) -> None:
        self._options = options
        self._engine = dict(engine)
        self._tasks, self._context = tasks, context
        self._ref, self._rerun_failed = ref, rerun_failed
        self._journal: JournaledVolley | None = None
        self._stopped = False

    async def run(self) -> VolleyResult:
        options = self._options
        journal = await trio.to_thread.run_sync(functools.partial(
            JournaledVolley, options.journal, existing=self._ref is not None,
            stale_timeout=options.stale_timeout,
        ))
        with journal:
            config = self._engine.pop("config")
            if self._ref is None:
                assert self._tasks is not None and self._context is not None
                if options.batch_api:
                    check_batch_service(config)  # before the volley is recorded
                volley_id = journal.create(self._tasks, self._context, config, options)
                stored = journal.load(volley_id)
            else:
                stored = journal.load(self._ref)
                config, options = _stored_settings(stored, config, options)
                if self._rerun_failed:
                    stored = journal.reopen_failed(stored)
            self._journal = journal
            if self._stopped:
                journal.interrupt()
            return await journal.work(stored, config, options, main=self._main,
                                      **self._engine)

    async def _main(self, volley: VolleyRun) -> VolleyResult:
        if self._stopped:  # interrupted while the journal was opened
            volley.interrupt()
        return await volley.run()

    def interrupt(self) -> None:
        self._stopped = True
        if self._journal is not None:
            self._journal.interrupt()

    def kill_sandboxes(self) -> None:
        if self._journal is not None:
            self._journal.kill_sandboxes()


def _stored_settings(
    stored: StoredVolley, model: RunConfig, given: VolleyOptions
) -> tuple[RunConfig, VolleyOptions]:
    """A volley read back runs with the settings it was stored with, the model's key,
    and the journal and stale timeout it was read back with."""
    layer = stored_layer(stored.settings)
    run = {row.name: layer[row.name] for row in settings_of(RunConfig) if row.name in layer}
    kept = {row.name: layer[row.name] for row in settings_of(VolleyOptions)
            if row.name in layer}
    config = RunConfig(**{**run, "api_key": model.api_key, "root_permits": 0}).validate()
    options = VolleyOptions(**{**kept, "journal": given.journal,
                               "stale_timeout": given.stale_timeout}).validate()
    return config, options


class VolleyStream:
    """Task results in completion order; ``result`` is the whole volley once it ended."""

    def __init__(self, receive: trio.MemoryReceiveChannel[TaskResult]) -> None:
        self._receive = receive
        self.result: VolleyResult | None = None

    def __aiter__(self) -> VolleyStream:
        return self

    async def __anext__(self) -> TaskResult:
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None


@asynccontextmanager
async def stream_volley(build: Callable[[Callable[[TaskResult], None]], VolleyRun],
                        ) -> AsyncIterator[VolleyStream]:
    """Run the volley ``build(on_result)`` makes in the background and yield its results.

    Leaving the ``async with`` before the volley ended interrupts it (in-flight
    tasks are cancelled) and waits for it to stop.  Results are buffered without
    bound: each is small, and the whole volley's result holds them anyway.
    """
    send, receive = trio.open_memory_channel[TaskResult](math.inf)
    run = build(send.send_nowait)
    stream = VolleyStream(receive)

    async def drive() -> None:
        async with send:
            stream.result = await run.run()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drive)
        try:
            yield stream
        finally:
            if stream.result is None:
                run.interrupt()
