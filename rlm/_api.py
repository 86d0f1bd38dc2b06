"""The Python API: ``RLM(...).completion(query, context)``."""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Unpack

import trio

from rlm._config import DEFAULT_STALE_TIMEOUT, DEFAULTS, RunConfig, VolleyOptions
from rlm._events import Event, StreamSink
from rlm._result import RunResult
from rlm._run.context import Context
from rlm._run.query import QueryRunner
from rlm._run.tools import HostTool, ToolBox
from rlm._sandbox.interface import LauncherFactory
from rlm._settings import settings_of
from rlm._settings_types import RunSettings, SessionSettings
from rlm._trio_only import require_trio
from rlm.errors import (
    SettingError,
    UsageError,
)
from rlm.providers.base import Lane, Provider
from rlm.providers.fixture import FixtureOptions, FixtureProvider, pop_legacy_options

if TYPE_CHECKING:
    # Sessions, volleys and streaming load when a method uses them: a plain run never does.
    from rlm._session import AsyncSession, Session
    from rlm.volley.api import VolleyArguments, VolleyRun, VolleyStream
    from rlm.volley.records import TaskResult, VolleyResult
    from rlm.volley.tasks import TaskInput

__all__ = ["RLM"]


class ModelArguments(RunSettings, total=False):
    """Every keyword argument of ``RLM(...)``: the settings and the model's own parts."""

    trace_path: str | None
    sinks: list[Any] | None
    providers: Mapping[Lane, Provider] | Provider | None
    sandboxes: LauncherFactory | None
    tools: Sequence[Callable[..., Any] | HostTool] | None



class RLM:
    """A configured recursive language model.

    Every setting of the table (``docs/settings.md``; :class:`rlm.RunConfig`) is a
    keyword argument with its default (the ``rlm run`` flags are the same names with
    dashes: ``max_depth`` is ``--max-depth``); an editor flags a misspelt one.
    ``provider`` is one of ``"openai"`` (any OpenAI-compatible endpoint at
    ``base_url``), ``"anthropic"`` (the Messages API; ``base_url`` optional) or
    ``"fixture"`` (the built-in scripted model, no key needed).  ``model`` names the
    root's model; it may be left out only for the fixture.  ``stream`` streams every
    step and runs its code blocks as they close, even with no live consumer.
    The fixture model's pace is the fixture provider's own:
    ``RLM(provider="fixture", providers=FixtureProvider(sub_latency=0.5))``.
    A run is bounded by default (``max_llm_calls`` 5,000, ``timeout`` 3,600 s);
    ``None`` lifts either.  A bad value raises :class:`rlm.SettingError` here,
    naming the parameter, not mid-run.

    ``trace_path`` writes the JSONL trace (a session's n-th query writes its own,
    ``chat.jsonl`` → ``chat.n.jsonl``); ``sinks`` receive every event as it
    happens.  ``providers`` replaces the providers by lane (custom back ends,
    tests), or one provider serves both lanes: then no endpoint is needed.
    ``sandboxes`` makes each run's sandbox launcher from its configuration and
    event bus (default: hardened sandbox processes,
    ``rlm._run.assembly.default_launcher``).

    Example::

        result = RLM(provider="fixture").completion("What is the magic number?", text)
        result.answer, result.status, result.usage.llm_calls
    """

    def __init__(
        self,
        *,
        trace_path: str | None = None,
        sinks: list[Any] | None = None,
        providers: Mapping[Lane, Provider] | Provider | None = None,
        sandboxes: LauncherFactory | None = None,
        tools: Sequence[Callable[..., Any] | HostTool] | None = None,
        **settings: Unpack[RunSettings],
    ) -> None:
        model = settings.get("model")
        if model is None:  # the fixture's own name; a hosted API's model must be named
            fixture_model = settings.get("provider") == "fixture" or providers is not None
            settings["model"] = DEFAULTS.model if fixture_model else ""
        self.config = RunConfig(**settings).validate()
        if providers is None:
            self.config.validate_endpoint()
        elif not isinstance(providers, Mapping):  # one provider answers both lanes
            providers = {"root": providers, "sub": providers}
        self._runs = QueryRunner(
            self.config, trace_path=trace_path, sinks=sinks or (), providers=providers,
            sandboxes=sandboxes, tools=ToolBox(tools or ()),
        )
        self._volley: VolleyRun | None = None

    @property
    def trace_path(self) -> str | None:
        """Where each run writes its JSONL trace (None: no trace file)."""
        return self._runs.trace_path

    @trace_path.setter
    def trace_path(self, path: str | None) -> None:
        self._runs.trace_path = path

    @property
    def tool_names(self) -> list[str]:
        """The host tools model code may call, by name."""
        return self._runs.tools.names

    def completion(self, query: str, context: Context = "", *, schema: object = None) -> RunResult:
        """Run to the end in a fresh trio event loop and return the result.

        Limits (iterations, timeout, budget) return a result with that status;
        failures raise an :class:`RLMError` whose ``result`` attribute holds
        what the run had.  With ``schema`` (a dict of field -> type, or a JSON
        Schema) the answer must be JSON fitting it: ``result.data`` holds it.
        """
        return trio.run(functools.partial(self.acompletion, query, context, schema=schema))

    def session(self, context: Context = "", **options: Unpack[SessionSettings]) -> Session:
        """A root call kept alive across queries: its sandbox, variables and conversation.

        ``options``: ``max_history_chars`` (older steps are compacted past it),
        ``max_total_llm_calls`` / ``max_total_cost`` (a budget for the whole
        session).  Close it (or use ``with``) to kill its sandbox::

            with RLM(provider="fixture").session(text) as chat:
                chat.completion("What is the magic number?")
                chat.completion("How many chunks did you search?")
        """
        from rlm._session import Session

        return Session(self._runs, context, **options)

    def asession(
        self, context: Context = "", **options: Unpack[SessionSettings]
    ) -> AsyncSession:
        """Like :meth:`session`, inside a running trio loop: ``async with model.asession(c)``."""
        from rlm._session import AsyncSession

        return AsyncSession(self._runs, context, **options)

    @classmethod
    def load_session(
        cls,
        path: str,
        context: Context = "",
        *,
        session_options: SessionSettings | None = None,
        **arguments: Unpack[ModelArguments],
    ) -> Session:
        """Resume a session saved with :meth:`Session.save`: the same settings (``arguments``
        are RLM's and override them; the key is never saved), its conversation and its plain-data
        variables, over ``context`` (which must be the context it was saved with).
        ``session_options`` are :meth:`session`'s (they are not saved).
        ``trace_path`` is not saved: given again, the traces number on after the saved
        session's queries."""
        from rlm._session import Session, read_saved_session

        saved = read_saved_session(path, context)
        stored = dict(saved.settings)
        pace = stored.pop("fixture", None)
        try:
            # Sessions saved when the fixture's pace was run settings (fixture_*) hold those keys.
            fixture = (FixtureOptions(**pace) if isinstance(pace, dict)
                       else pop_legacy_options(stored))
            RunConfig(**stored).validate()
        except SettingError as exc:
            raise UsageError(f"{path} is damaged: its saved setting {exc}") from None
        if fixture is not None and "providers" not in arguments:
            arguments["providers"] = FixtureProvider.paced(fixture)
        model = cls(**{**stored, **arguments})
        return Session(model._runs, context, restore=saved, **(session_options or {}))

    def astream(
        self, query: str, context: Context = "", *, capacity: int = 256
    ) -> AbstractAsyncContextManager[trio.abc.ReceiveChannel[Event]]:
        """Run and yield the run's events as they happen, streamed text included.

        Every request streams: pieces of text arrive as ``text_delta`` events
        attributed to their call; code blocks run as soon as they close.  At
        most ``capacity`` events wait for the consumer; past that the run's
        streams wait.  Leaving the block early cancels the run cleanly (no
        sandbox process, no open connection is left).  A failure the run
        would raise from :meth:`acompletion` is raised after its last event::

            async with model.astream(query, context) as events:
                async for event in events:
                    if event.kind == "text_delta":
                        print(event.text, end="")
        """
        from rlm.streaming.run import EventStream, stream_events

        return EventStream("RLM.astream", _under_trio("RLM.astream", stream_events(
            lambda merger: self.acompletion(query, context, stream=merger), capacity
        )))

    async def acompletion(
        self,
        query: str,
        context: Context = "",
        *,
        stream: StreamSink | None = None,
        schema: object = None,
    ) -> RunResult:
        """Like :meth:`completion`, inside a running trio loop.

        Cancellation is trio cancellation: every sandbox is killed and the
        trace is flushed before the Cancelled exception propagates.  With a
        live ``stream`` (a :class:`rlm.streaming.StreamMerger`) every event
        also goes there, and requests stream their text into it.  It needs
        trio; under asyncio, run the blocking :meth:`completion` in a thread:
        ``await asyncio.to_thread(model.completion, query, context)``.
        """
        require_trio("RLM.acompletion", _IN_A_THREAD.format("completion, query, context"))
        return await self._runs.run(query, context, stream=stream, schema=schema)

    def interrupt(self) -> None:
        """Stop the run in progress (call it from another task or a signal handler's task).

        The run stops launching work, cancels in-flight requests, kills every
        sandbox and returns a result with status ``interrupted``.
        """
        self._runs.interrupt()
        if self._volley is not None:
            self._volley.interrupt()

    def volley(
        self,
        tasks: Iterable[TaskInput],
        context: Context | None = None,
        **arguments: Unpack[VolleyArguments],
    ) -> VolleyResult:
        """Run independent ``tasks`` (prompts, or mappings with ``prompt``, ``timeout``,
        ``model``, ``max_tokens``) over an optional shared ``context``, through one gate.

        ``arguments`` are the volley settings (``docs/settings.md``): ``mode="rlm"``
        makes each task a whole RLM call over ``context`` (its own sandbox, its code
        offered the model's host tools; all share one gate and budget), ``cache_warm``,
        and ``journal`` (a SQLite path or a postgresql:// URL) makes the volley durable:
        recorded before it runs, each result committed before it is reported, resumable
        with :meth:`resume_volley`; ``batch_api=True`` sends the tasks through the
        provider's batch service (about half the price, within 24 h; in the default
        journal when none is given; ``retry_live`` runs what it failed again live).
        Beside them: ``timeout`` (each task's limit) and
        ``on_result`` (called with each TaskResult once it is kept).  Returns the
        VolleyResult, tasks in task order; it never raises for failed tasks.
        """
        return trio.run(functools.partial(self.avolley, tasks, context, **arguments))

    async def avolley(
        self,
        tasks: Iterable[TaskInput],
        context: Context | None = None,
        **arguments: Unpack[VolleyArguments],
    ) -> VolleyResult:
        """Like :meth:`volley`, inside a running trio loop."""
        require_trio("RLM.avolley", _IN_A_THREAD.format("volley, tasks, context"))
        return await self._drive(self._make_volley(tasks, context, **arguments))

    def resume_volley(
        self,
        volley_id: str,
        *,
        journal: str,
        skip_failed: bool = False,
        stale_timeout: float = DEFAULT_STALE_TIMEOUT,
        on_result: Callable[[TaskResult], None] | None = None,
    ) -> VolleyResult:
        """Run what is left of volley ``volley_id`` (or ``last``) in ``journal``: its
        open tasks and, unless ``skip_failed``, its failed ones again; a task whose
        result was committed is never paid for again (see docs/journal.md for what a
        killed worker leaves uncommitted).  The volley runs with the settings it was stored
        with; this model gives the key, providers, tools and sandboxes.  Returns the
        whole volley.
        """
        return trio.run(functools.partial(
            self._adrive_stored, volley_id, journal, not skip_failed, stale_timeout, on_result
        ))

    def work_volley(
        self,
        volley_id: str,
        *,
        journal: str,
        stale_timeout: float = DEFAULT_STALE_TIMEOUT,
        on_result: Callable[[TaskResult], None] | None = None,
    ) -> VolleyResult:
        """Work on volley ``volley_id`` beside any other worker on ``journal`` (another
        process, another machine sharing a postgresql:// journal) until no task is
        left; failed tasks stay failed.  See :meth:`resume_volley`."""
        return trio.run(functools.partial(
            self._adrive_stored, volley_id, journal, False, stale_timeout, on_result
        ))

    async def _adrive_stored(
        self, ref: str, journal: str, rerun_failed: bool, stale_timeout: float,
        on_result: Callable[[TaskResult], None] | None,
    ) -> VolleyResult:
        from rlm.volley.api import JournaledRun

        options = VolleyOptions(journal=journal, stale_timeout=stale_timeout).validate()
        engine = {**self._volley_engine(), "on_result": on_result}
        return await self._drive(
            JournaledRun(options, engine, ref=ref, rerun_failed=rerun_failed)
        )

    async def _drive(self, run: VolleyRun) -> VolleyResult:
        self._volley = run
        try:
            return await run.run()
        finally:
            self._volley = None

    @asynccontextmanager
    async def iter_volley(
        self,
        tasks: Iterable[TaskInput],
        context: Context | None = None,
        **arguments: Unpack[VolleyArguments],
    ) -> AsyncIterator[VolleyStream]:
        """Task results in completion order, as they are accepted::

            async with model.iter_volley(prompts, context) as results:
                async for task_result in results:
                    ...
            results.result  # the VolleyResult

        Leaving the block early interrupts the volley.
        """
        from rlm.volley.api import stream_volley

        require_trio("RLM.iter_volley", _IN_A_THREAD.format("volley, tasks, context"))
        def build(on_result: Callable[[TaskResult], None]) -> VolleyRun:
            arguments["on_result"] = on_result
            return self._make_volley(tasks, context, **arguments)

        async with stream_volley(build) as stream:
            yield stream

    def avolley_stream(
        self,
        tasks: Iterable[TaskInput],
        context: Context | None = None,
        *,
        capacity: int = 256,
        **arguments: Unpack[VolleyArguments],
    ) -> AbstractAsyncContextManager[trio.abc.ReceiveChannel[Event]]:
        """Run a volley and yield its events as they happen, every task's text streamed.

        Like :meth:`astream` (``async with ... as events``; leaving early cancels
        the volley).  ``text_delta`` events carry ``task`` (1-based) and
        ``task_title``; each task ends with ``task_finished`` (``index``,
        ``status``, ``output``).  ``arguments`` are :meth:`volley`'s.
        """
        from rlm.streaming.run import EventStream, stream_events

        return EventStream("RLM.avolley_stream", _under_trio("RLM.avolley_stream", stream_events(
            lambda merger: self._make_volley(tasks, context, stream=merger, **arguments).run(),
            capacity,
        )))

    def _make_volley(
        self,
        tasks: Iterable[TaskInput],
        context: Context | None,
        *,
        stream: StreamSink | None = None,
        **arguments: Unpack[VolleyArguments],
    ) -> VolleyRun:
        from rlm.volley.api import make_volley

        engine = {**self._volley_engine(), "stream": stream}
        return make_volley(tasks, context, engine=engine, **arguments)

    def _volley_engine(self) -> dict[str, Any]:
        """What every volley of this model is made with (Volley's keyword arguments)."""
        runs = self._runs
        return {"config": self.config, "providers": runs.providers, "prices": runs.prices,
                "tools": runs.tools, "sinks": runs.sinks, "trace_path": runs.trace_path,
                "sandboxes": runs.sandboxes}

    def kill_sandboxes(self) -> None:
        """Kill every sandbox of the run in progress at once (for a second Ctrl-C)."""
        self._runs.kill_sandboxes()


def _show_settings_in_signature(cls: type[RLM]) -> None:
    """``help(RLM)`` and ``inspect.signature(RLM)`` list every setting with its default
    (the type checker reads them from ``RunSettings``)."""
    init = cls.__init__
    own = [p for p in inspect.signature(init).parameters.values()
           if p.kind is not inspect.Parameter.VAR_KEYWORD]
    settings = [
        inspect.Parameter(row.name, inspect.Parameter.KEYWORD_ONLY, annotation=row.kind,
                          default=None if row.name == "model" else row.default)
        for row in settings_of(RunConfig)
    ]
    init.__signature__ = inspect.Signature([*own, *settings])  # type: ignore[attr-defined]


_show_settings_in_signature(RLM)

#: What an asyncio program does instead of awaiting an entry: the blocking call, in a thread.
_IN_A_THREAD = "run the blocking call in a thread: `await asyncio.to_thread(model.{})`"


@asynccontextmanager
async def _under_trio(
    entry: str, events: AbstractAsyncContextManager[trio.abc.ReceiveChannel[Event]]
) -> AsyncIterator[trio.abc.ReceiveChannel[Event]]:
    """``events``, entered only under trio (an event stream has no blocking twin)."""
    require_trio(entry, "use the blocking RLM.completion or RLM.volley in a thread "
                 "(asyncio.to_thread), and sinks=[...] for the events")
    async with events as channel:
        yield channel
