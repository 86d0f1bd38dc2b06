"""One query of a configured model, end to end: events, trace, providers, the run, the result.

:class:`QueryRunner` is what ``RLM(...)`` holds: its settings and parts
(providers, sinks, trace path, sandbox factory, host tools, prices).  Its one
public entry, :meth:`QueryRunner.run`, opens the run's events (trace file,
sinks, a live stream), its providers and response cache, builds a
:class:`~rlm._run.runtime.Runtime`, runs the root through
:meth:`~rlm._run.runtime.Runtime.run_root` and turns the outcome into a
:class:`~rlm.RunResult`.  ``RLM.completion`` and every question of a session
go through it; a session passes its carried state and its own launcher.
"""

from __future__ import annotations

import copy
import datetime
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from rlm._config import RunConfig, shown_settings
from rlm._events import Event, EventBus, LLMCached, LLMResponse, RunFinished, RunStarted, StreamSink
from rlm._result import RunResult
from rlm._run.assembly import (
    load_prices,
    make_budget,
    open_cache,
    open_telemetry,
    root_system_prompt,
)
from rlm._run.call import CallOutcome, SessionCarry
from rlm._run.context import Context, context_chars
from rlm._run.runtime import RunOutcome, Runtime
from rlm._run.schema import SchemaError, normalise_schema
from rlm._run.tools import ToolBox
from rlm._sandbox.interface import Launcher, LauncherFactory
from rlm._status import RunStatus
from rlm._trace import TraceWriter
from rlm._traffic.budget import SessionTotals
from rlm._traffic.prices import PriceTable
from rlm._traffic.usage import Usage
from rlm.errors import (
    Interrupted,
    LimitExceeded,
    RLMError,
    RunTimeout,
    SettingError,
    UsageError,
)
from rlm.providers.base import Lane, Provider
from rlm.providers.fixture import FixtureProvider, answered_by
from rlm.providers.open import open_providers

__all__ = ["QueryRunner"]


class QueryRunner:
    """A configured model's parts, and how it runs one query."""

    def __init__(
        self,
        config: RunConfig,
        *,
        trace_path: str | None = None,
        sinks: Sequence[Callable[[Event], None]] = (),
        providers: Mapping[Lane, Provider] | None = None,
        sandboxes: LauncherFactory | None = None,
        tools: ToolBox | None = None,
    ) -> None:
        self.config = config
        # A bad price table or an unpriced model under max_cost fails here, not mid-run.
        self.prices: PriceTable = load_prices(config)
        make_budget(config, self.prices)
        self.trace_path = trace_path
        self.sinks = list(sinks)
        self.providers = dict(providers) if providers is not None else None
        self.sandboxes = sandboxes
        self.tools = tools or ToolBox()
        self._live: set[Runtime] = set()
        self._forks: weakref.WeakSet[QueryRunner] = weakref.WeakSet()

    def fixture_provider(self) -> FixtureProvider | None:
        """The fixture model this runner was given as a provider (a paced one), if any."""
        found = [p for p in (self.providers or {}).values() if isinstance(p, FixtureProvider)]
        return found[0] if found else None

    def fork(self) -> QueryRunner:
        """A runner with the same parts and none of this one's runs: what a session
        holds, so that interrupting its question stops no other run of the model (this
        runner's :meth:`interrupt` still stops its forks' runs too)."""
        other = copy.copy(self)
        other._live, other._forks = set(), weakref.WeakSet()
        self._forks.add(other)
        return other

    def launcher(
        self, config: RunConfig, events: EventBus, *, answer_json: bool = False
    ) -> Launcher | None:
        """The launcher the ``sandboxes`` factory makes for a run (None without one: the
        runtime's default), told the host tools' names and whether FINAL_VAR hands over
        JSON when the run has them: without, model code met a NameError calling a
        tool, and a structured answer never fitted its schema."""
        if self.sandboxes is None:
            return None
        extra: dict[str, Any] = {}
        if self.tools:
            extra["tools"] = self.tools.names
        if answer_json:
            extra["answer_json"] = True
        launcher: Launcher = self.sandboxes(config, events, **extra)
        return launcher

    async def run(
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
        spans: Callable[[Event], None] | None = None,
    ) -> RunResult:
        """One run.  ``carry`` and ``sandboxes`` make it a session's query (its root goes
        on in the session's sandbox), ``config`` and ``trace_path`` replace the model's
        for this run, ``session`` names the session's totals that bound it, ``spans`` is
        the session's OpenTelemetry span builder (without it, ``config.otel`` makes the
        run one trace of its own).

        Limits end it with their status; a failure raises, its ``result`` set."""
        config = config or self.config
        _check_inputs(query, context)
        if (size := context_chars(context)) > config.max_context_bytes:
            raise SettingError(
                f"the context holds {size:,} characters, more than "
                f"<max_context_bytes={config.max_context_bytes}>: raise it, or pass less"
            )
        try:
            answer_schema = None if schema is None else normalise_schema(schema)
        except SchemaError as exc:
            raise UsageError(f"schema: {exc}") from None
        events = EventBus()
        if stream is not None:
            events.add_stream(stream)
        trace_path = trace_path or self.trace_path
        trace = TraceWriter(trace_path, content=config.trace_content) if trace_path else None
        if trace is not None:
            events.add_sink(trace)
        telemetry = open_telemetry(config) if spans is None else None
        if telemetry is not None:
            spans = telemetry.spans
        if spans is not None:
            events.add_sink(spans)
        for sink in self.sinks:
            events.add_sink(sink)
        result: RunResult | None = None
        runtime: Runtime | None = None
        try:
            events.emit(self._run_started(config, query, context, streams=stream is not None))
            async with self._open_providers() as providers, open_cache(config) as cache:
                runtime = Runtime.build(
                    config, providers=providers, events=events, prices=self.prices,
                    cache=cache, tools=self.tools, answer_schema=answer_schema, session=session,
                    sandboxes=sandboxes if sandboxes is not None
                    else self.launcher(config, events, answer_json=answer_schema is not None),
                )
                self._live.add(runtime)
                try:
                    outcome = await runtime.run_root(query, context, carry=carry,
                                                     serve=carry is None)
                finally:
                    self._live.discard(runtime)
            result = _result(events, runtime, outcome, trace_path)
        except RLMError as exc:  # failed before the run could start (e.g. a bad price table)
            _emit_finished(events, runtime, None, "error", str(exc))
            raise
        finally:
            if result is None and not events.finished:  # cancelled, or a bug
                _emit_finished(events, runtime, None, "interrupted", "the run was cancelled")
            if trace is not None:
                trace.close()
            if telemetry is not None:
                await telemetry.aclose()
        error = outcome.error
        if error is not None and not isinstance(error, LimitExceeded | Interrupted):
            error.result = result
            raise error
        return result

    def interrupt(self) -> None:
        """Stop the runs in progress (its forks' too): each ends ``interrupted``."""
        for runtime in self._runtimes():
            runtime.interrupt()

    def kill_sandboxes(self) -> None:
        """Kill every sandbox of the runs in progress at once (for a second Ctrl-C)."""
        for runtime in self._runtimes():
            runtime.kill_sandboxes()

    def _runtimes(self) -> list[Runtime]:
        return [*self._live, *(r for fork in list(self._forks) for r in fork._runtimes())]

    def _run_started(
        self, config: RunConfig, query: str, context: Context, *, streams: bool
    ) -> RunStarted:
        public = shown_settings(config)
        # A live consumer (rlm run --stream, astream) makes every request stream, as
        # stream=True does: the recorded setting says what the run did.
        public["stream"] = config.stream or streams
        return RunStarted(
            query=query[:2000],
            context_chars=context_chars(context),
            context_docs=1 if isinstance(context, str) else len(context),
            config=public,
            wall_time=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            system_prompt=root_system_prompt(self.tools),  # what the root is sent
        )

    @asynccontextmanager
    async def _open_providers(self) -> AsyncIterator[Mapping[Lane, Provider]]:
        if self.providers is not None:
            yield self.providers
            return
        async with open_providers(self.config) as providers:
            yield providers


def _result(
    events: EventBus, runtime: Runtime, outcome: RunOutcome, trace_path: str | None
) -> RunResult:
    root, error = outcome.root, outcome.error
    status = _status(root, error)
    answer = root.answer if root is not None else None
    if answer is None:
        answer = outcome.extracted or (root.candidate if root is not None else None)
    message = str(error) if error is not None else (root.error if root is not None else None)
    finished = _emit_finished(events, runtime, outcome, status, message, answer)
    return RunResult(
        answer=answer,
        status=status,
        iterations=root.iterations if root is not None else 0,
        usage=runtime.usage,
        duration_s=finished.duration_s,
        teardown_s=finished.teardown_s,
        trace=tuple(e.trace_record() for e in events.events),
        trace_path=trace_path,
        error=message,
        answered_by=_answered_by(events.events),
        traffic=finished.traffic,
        usage_detail=finished.usage_detail,
        last_output=root.last_output if root is not None else None,
        cached_calls=runtime.gate.cached_calls,
        data=outcome.data,
    )


def _emit_finished(
    events: EventBus,
    runtime: Runtime | None,
    outcome: RunOutcome | None,
    status: RunStatus,
    error: str | None,
    answer: str | None = None,
) -> RunFinished:
    """Record ``run_finished`` with everything the runtime (if any) counted."""
    usage = runtime.usage if runtime is not None else Usage()
    # The run's duration ends when its outcome was known; the teardown that followed
    # (sandboxes reaped, the zygote gone) is reported apart.  It is over by now.
    teardown = outcome.teardown_s if outcome is not None else 0.0
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


def _answered_by(events: list[Event]) -> tuple[str, ...]:
    """Who wrote the run's answers (sent, or replayed from the cache), in order."""
    found = {
        answered_by(e.provider, e.metadata): None
        for e in events
        if isinstance(e, LLMCached) or (isinstance(e, LLMResponse) and e.status == "ok")
    }
    return tuple(found)


def _check_inputs(query: str, context: Context) -> None:
    from rlm._spelling import python_spelled

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

