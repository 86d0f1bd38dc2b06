"""The Python API: ``RLM(...).completion(query, context)``."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Unpack

import trio

from rlm._config import (
    DEFAULTS,
    RunConfig,
    shown_settings,
)
from rlm._events import Event, EventBus, LLMCached, LLMResponse, RunFinished, RunStarted, StreamSink
from rlm._result import RunResult
from rlm._run.call import CallOutcome, SessionCarry
from rlm._run.context import Context, context_chars
from rlm._run.runtime import RunOutcome, Runtime, load_prices, make_budget, root_system_prompt
from rlm._run.schema import SchemaError, normalise_schema
from rlm._run.tools import HostTool, ToolBox
from rlm._sandbox.interface import Launcher, LauncherFactory
from rlm._settings import settings_of
from rlm._settings_types import RunSettings, SessionSettings
from rlm._spelling import python_spelled
from rlm._status import RunStatus
from rlm._trace import TraceWriter
from rlm._traffic.budget import SessionTotals
from rlm._traffic.usage import Usage
from rlm._trio_only import require_trio
from rlm.errors import (
    Interrupted,
    LimitExceeded,
    RLMError,
    RunTimeout,
    SettingError,
    UsageError,
)
from rlm.providers.base import Lane, Provider
from rlm.providers.fixture import (
    FixtureOptions,
    FixtureProvider,
    is_fixture_answer,
    pop_legacy_options,
)
from rlm.providers.open import open_providers

if TYPE_CHECKING:
    # Sessions, volleys and streaming load when a method uses them: a plain run never does.
    from rlm._session import AsyncSession, Session
    from rlm.journal import ResponseCache
    from rlm.volley.api import VolleyStream
    from rlm.volley.engine import Volley
    from rlm.volley.records import VolleyResult
    from rlm.volley.tasks import TaskInput

__all__ = ["RLM"]


class ModelArguments(RunSettings, total=False):
    """Every keyword argument of ``RLM(...)``: the settings and the model's own parts."""

    trace_path: str | None
    sinks: list[Any] | None
    providers: Mapping[Lane, Provider] | None
    sandboxes: LauncherFactory | None
    tools: Sequence[Callable[..., Any] | HostTool] | None
    fixture: FixtureOptions | None



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
    ``fixture`` (a :class:`rlm.providers.fixture.FixtureOptions`) paces the
    built-in fixture model: latencies, streamed pieces.
    A run is bounded by default (``max_llm_calls`` 5,000, ``timeout`` 3,600 s);
    ``None`` lifts either.  A bad value raises :class:`rlm.SettingError` here,
    naming the parameter, not mid-run.

    ``trace_path`` writes the JSONL trace (a session's n-th query writes its own,
    ``chat.jsonl`` → ``chat.n.jsonl``); ``sinks`` receive every event as it
    happens.  ``providers`` replaces the providers by lane (custom back ends,
    tests): then no endpoint is needed.  ``sandboxes`` makes each run's
    sandbox launcher from its configuration and event bus (default:
    hardened sandbox processes, ``rlm._run.runtime.default_launcher``).

    Example::

        result = RLM(provider="fixture").completion("What is the magic number?", text)
        result.answer, result.status, result.usage.llm_calls
    """

    def __init__(
        self,
        *,
        trace_path: str | None = None,
        sinks: list[Any] | None = None,
        providers: Mapping[Lane, Provider] | None = None,
        sandboxes: LauncherFactory | None = None,
        tools: Sequence[Callable[..., Any] | HostTool] | None = None,
        fixture: FixtureOptions | None = None,
        **settings: Unpack[RunSettings],
    ) -> None:
        model = settings.get("model")
        if model is None:  # the fixture's own name; a hosted API's model must be named
            fixture_model = settings.get("provider") == "fixture" or providers is not None
            settings["model"] = DEFAULTS.model if fixture_model else ""
        self.config = RunConfig(**settings).validate()
        if providers is None:
            self.config.validate_endpoint()
        # A bad price table or an unpriced model under max_cost fails here, not mid-run.
        self._prices = load_prices(self.config)
        make_budget(self.config, self._prices)
        self.trace_path = trace_path
        self._providers = dict(providers) if providers is not None else None
        self._sinks = list(sinks or [])
        self._sandboxes = sandboxes
        self._tools = ToolBox(tools or ())
        self.fixture = fixture
        self._runtime: Runtime | None = None
        self._volley: Volley | None = None

    @property
    def tool_names(self) -> list[str]:
        """The host tools model code may call, by name."""
        return self._tools.names

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

        return Session(self, context, **options)

    def asession(
        self, context: Context = "", **options: Unpack[SessionSettings]
    ) -> AsyncSession:
        """Like :meth:`session`, inside a running trio loop: ``async with model.asession(c)``."""
        from rlm._session import AsyncSession

        return AsyncSession(self, context, **options)

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
        if fixture is not None:
            arguments.setdefault("fixture", fixture)
        model = cls(**{**stored, **arguments})
        return Session(model, context, restore=saved, **(session_options or {}))

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
        return await self._arun(query, context, stream=stream, schema=schema)

    async def _arun(
        self,
        query: str,
        context: Context,
        *,
        stream: StreamSink | None = None,
        schema: object = None,
        carry: SessionCarry | None = None,
        sandboxes: Launcher | None = None,
        config: RunConfig | None = None,
        trace_path: str | None = None,
        session: SessionTotals | None = None,
    ) -> RunResult:
        """One run: ``carry`` and ``sandboxes`` make it a session's query (its root goes
        on in the session's sandbox), ``config`` and ``trace_path`` replace the model's
        for this run, ``session`` names the session's totals that bound it."""
        _check_inputs(query, context)
        try:
            answer_schema = None if schema is None else normalise_schema(schema)
        except SchemaError as exc:
            raise UsageError(f"schema: {exc}") from None
        config = config or self.config
        events = EventBus()
        if stream is not None:
            events.add_stream(stream)
        trace_path = trace_path or self.trace_path
        trace = (
            TraceWriter(trace_path, content=self.config.trace_content) if trace_path else None
        )
        if trace is not None:
            events.add_sink(trace)
        for sink in self._sinks:
            events.add_sink(sink)
        result: RunResult | None = None
        runtime: Runtime | None = None
        try:
            events.emit(self._run_started(query, context, streams=stream is not None))
            async with self._open_providers() as providers, self._open_cache() as cache:
                runtime = Runtime(
                    config,
                    providers=providers,
                    events=events,
                    prices=self._prices,
                    cache=cache,
                    sandboxes=sandboxes
                    if sandboxes is not None
                    else self._factory_launcher(config, events, answer_schema is not None),
                    tools=self._tools,
                    answer_schema=answer_schema,
                    session=session,
                )
                self._runtime = runtime
                try:
                    outcome = await runtime.run(query, context, carry)
                finally:
                    self._runtime = None
            result = self._result(events, runtime, outcome, trace_path)
            if runtime.root is not None and runtime.root.data is not None:
                result = dataclasses.replace(result, data=runtime.root.data)
        except RLMError as exc:  # failed before the run could start (e.g. a bad price table)
            _emit_finished(events, runtime, "error", str(exc))
            raise
        finally:
            if result is None and not events.finished:  # cancelled, or a bug
                _emit_finished(events, runtime, "interrupted", "the run was cancelled")
            if trace is not None:
                trace.close()
        error = outcome.error
        if error is not None and not isinstance(error, LimitExceeded | Interrupted):
            error.result = result
            raise error
        return result

    def _factory_launcher(
        self, config: RunConfig, events: EventBus, answer_json: bool
    ) -> Launcher | None:
        """The run's launcher from the ``sandboxes`` factory (None: the runtime's default),
        told the host tools' names and whether FINAL_VAR hands over JSON when the run
        has them: without, model code met a NameError calling a tool, and a structured
        answer never fitted its schema."""
        if self._sandboxes is None:
            return None
        extra: dict[str, Any] = {}
        if self._tools:
            extra["tools"] = self._tools.names
        if answer_json:
            extra["answer_json"] = True
        launcher: Launcher = self._sandboxes(config, events, **extra)
        return launcher

    def interrupt(self) -> None:
        """Stop the run in progress (call it from another task or a signal handler's task).

        The run stops launching work, cancels in-flight requests, kills every
        sandbox and returns a result with status ``interrupted``.
        """
        if self._runtime is not None:
            self._runtime.interrupt()
        if self._volley is not None:
            self._volley.interrupt()

    def volley(
        self, tasks: Iterable[TaskInput], context: Context | None = None, **options: Any
    ) -> VolleyResult:
        """Run independent ``tasks`` (prompts, or mappings with ``prompt``, ``timeout``,
        ``model``, ``max_tokens``) over an optional shared ``context``, through one gate.

        ``options``: ``timeout`` (per task, s), ``cache_warm`` (default True),
        ``rlm`` (each task a whole RLM call over ``context``, in its own sandbox,
        its code offered the model's host tools; all share one gate and budget),
        ``on_result`` (called with each TaskResult as it is accepted).  Returns
        the VolleyResult, tasks in task order; it never raises for failed tasks.
        """
        return trio.run(functools.partial(self.avolley, tasks, context, **options))

    async def avolley(
        self, tasks: Iterable[TaskInput], context: Context | None = None, **options: Any
    ) -> VolleyResult:
        """Like :meth:`volley`, inside a running trio loop."""
        require_trio("RLM.avolley", _IN_A_THREAD.format("volley, tasks, context"))
        run = self._make_volley(tasks, context, **options)
        self._volley = run
        try:
            return await run.run()
        finally:
            self._volley = None

    @asynccontextmanager
    async def iter_volley(
        self, tasks: Iterable[TaskInput], context: Context | None = None, **options: Any
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
        async with stream_volley(
            lambda on_result: self._make_volley(tasks, context, on_result=on_result, **options)
        ) as stream:
            yield stream

    def avolley_stream(
        self,
        tasks: Iterable[TaskInput],
        context: Context | None = None,
        *,
        capacity: int = 256,
        **options: Any,
    ) -> AbstractAsyncContextManager[trio.abc.ReceiveChannel[Event]]:
        """Run a volley and yield its events as they happen, every task's text streamed.

        Like :meth:`astream` (``async with ... as events``; leaving early cancels
        the volley).  ``text_delta`` events carry ``task`` (1-based) and
        ``task_title``; each task ends with ``task_finished`` (``index``,
        ``status``, ``output``).  ``options`` are :meth:`volley`'s.
        """
        from rlm.streaming.run import EventStream, stream_events

        return EventStream("RLM.avolley_stream", _under_trio("RLM.avolley_stream", stream_events(
            lambda merger: self._make_volley(tasks, context, stream=merger, **options).run(),
            capacity,
        )))

    def _make_volley(
        self, tasks: Iterable[TaskInput], context: Context | None, **options: Any
    ) -> Volley:
        from rlm.volley.api import make_volley

        return make_volley(
            tasks, context, config=self.config, providers=self._providers, prices=self._prices,
            fixture=self.fixture, tools=self._tools,
            sinks=self._sinks, trace_path=self.trace_path, sandboxes=self._sandboxes, **options,
        )

    def kill_sandboxes(self) -> None:
        """Kill every sandbox of the run in progress at once (for a second Ctrl-C)."""
        if self._runtime is not None:
            self._runtime.kill_sandboxes()

    def _result(
        self, events: EventBus, runtime: Runtime, outcome: RunOutcome, trace_path: str | None
    ) -> RunResult:
        usage = runtime.usage
        root, error = outcome.root, outcome.error
        status = _status(root, error)
        answer = root.answer if root is not None else None
        if answer is None:
            answer = outcome.extracted or (root.candidate if root is not None else None)
        message = str(error) if error is not None else (root.error if root is not None else None)
        finished = _emit_finished(events, runtime, status, message, answer)
        detail, traffic = finished.usage_detail, finished.traffic
        return RunResult(
            answer=answer,
            status=status,
            iterations=root.iterations if root is not None else 0,
            usage=usage,
            duration_s=finished.duration_s,
            teardown_s=finished.teardown_s,
            trace=tuple(e.trace_record() for e in events.events),
            trace_path=trace_path,
            error=message,
            fixture=_saw_fixture(events.events),
            traffic=traffic,
            usage_detail=detail,
            last_output=root.last_output if root is not None else None,
            cached_calls=runtime.gate.cached_calls,
        )

    def _run_started(self, query: str, context: Context, *, streams: bool) -> RunStarted:
        public = shown_settings(self.config)
        # A live consumer (rlm run --stream, astream) makes every request stream, as
        # stream=True does: the recorded setting says what the run did.
        public["stream"] = self.config.stream or streams
        return RunStarted(
            query=query[:2000],
            context_chars=context_chars(context),
            context_docs=1 if isinstance(context, str) else len(context),
            config=public,
            wall_time=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            system_prompt=root_system_prompt(self._tools),  # what the root is sent
        )

    @asynccontextmanager
    async def _open_cache(self) -> AsyncIterator[ResponseCache | None]:
        path = self.config.cache_path
        if path is None:
            yield None
            return
        from rlm.journal import ResponseCache, parse_cache_mode  # only runs that cache
        from rlm.journal.cache import open_cache_store

        mode = parse_cache_mode(self.config.cache_mode)
        store = await trio.to_thread.run_sync(open_cache_store, path, mode)
        try:
            yield ResponseCache(store, mode)
        finally:
            store.close()

    @asynccontextmanager
    async def _open_providers(self) -> AsyncIterator[Mapping[Lane, Provider]]:
        if self._providers is not None:
            yield self._providers
            return
        async with open_providers(self.config, self.fixture) as providers:
            yield providers



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

def _emit_finished(
    events: EventBus,
    runtime: Runtime | None,
    status: RunStatus,
    error: str | None,
    answer: str | None = None,
) -> RunFinished:
    """Record ``run_finished`` with everything the runtime (if any) counted."""
    usage = runtime.usage if runtime is not None else Usage()
    # The run's duration ends when its outcome was known; the teardown that followed
    # (sandboxes reaped, the zygote gone) is reported apart.  It is over by now.
    teardown = runtime.teardown_s if runtime is not None else 0.0
    finished = events.emit(
        RunFinished(
            status=status,
            answer=answer,
            error=error,
            duration_s=round(events.now() - teardown, 6),
            teardown_s=round(teardown, 6),
            llm_calls=usage.llm_calls,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            usage_detail=runtime.budget.usage_report() if runtime is not None else {},
            traffic=runtime.gate.traffic() if runtime is not None else {},
        )
    )
    assert isinstance(finished, RunFinished)
    return finished


def _status(root: CallOutcome | None, error: RLMError | None) -> RunStatus:
    if isinstance(error, RunTimeout):
        return "timeout"
    if isinstance(error, LimitExceeded):
        return "budget_exceeded"
    if isinstance(error, Interrupted):
        return "interrupted"
    if error is not None or root is None or root.status == "stopped":
        return "error"  # (a stopped root always comes with the error that stopped the run)
    return root.status


def _saw_fixture(events: list[Event]) -> bool:
    """Whether the fixture model wrote an answer (sent, or replayed from the cache)."""
    return any(
        (isinstance(e, LLMResponse | LLMCached) and is_fixture_answer(e.metadata))
        or (isinstance(e, LLMCached) and e.provider == FixtureProvider.name)
        for e in events
    )


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


def _check_inputs(query: str, context: Context) -> None:
    if not isinstance(query, str) or not query.strip():
        raise UsageError("the query must be a non-empty string")
    if isinstance(context, list):
        if not all(isinstance(doc, str) for doc in context):
            raise UsageError("context must be a str or a list of str")
    elif not isinstance(context, str):
        raise UsageError("context must be a str or a list of str")
    for name, text in (("the query", query), *_documents(context)):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            if not python_spelled():  # a command line's argument: bytes that were not UTF-8
                raise UsageError(
                    f"{name} holds bytes that are not UTF-8 text (at character {exc.start}): "
                    "give it as UTF-8 (check the encoding of the terminal or script it came from)"
                ) from exc
            raise UsageError(
                f"{name} holds a character that is not valid Unicode text (a lone surrogate at "
                f"index {exc.start}); decode the input with errors='replace' first"
            ) from exc


def _documents(context: Context) -> list[tuple[str, str]]:
    if isinstance(context, str):
        return [("the context", context)]
    return [(f"context document {i}", doc) for i, doc in enumerate(context)]
