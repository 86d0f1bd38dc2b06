"""The Python API: ``RLM(...).completion(query, context)``."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import trio

from rlm._config import RunConfig
from rlm._context import Context, context_chars
from rlm._events import Event, EventBus, LLMResponse, RunFinished, RunStarted
from rlm._result import RunResult
from rlm._runtime import Runtime
from rlm._trace import TraceWriter
from rlm.errors import LimitExceeded, RLMError, RunTimeout, UsageError
from rlm.providers.base import Lane, Provider

__all__ = ["RLM"]


class RLM:
    """A configured recursive language model.

    Every keyword is a field of the run configuration (the ``rlm run`` flags of
    the same name): ``model``, ``base_url``, ``sub_model``, ``sub_base_url``,
    ``provider`` ("openai" or "fixture"), ``api_key``, ``max_depth``,
    ``max_iterations``, ``max_concurrent``, ``root_permits``, ``timeout``,
    ``exec_timeout``, ``max_output_chars``, ``max_tokens``.  ``trace_path``
    writes the JSONL trace; ``providers`` replaces the providers by lane (for
    tests and custom back ends); ``sinks`` receive every event as it happens.

    >>> RLM(provider="fixture").completion("What is the magic number?", text).answer
    """

    def __init__(
        self,
        *,
        trace_path: str | None = None,
        providers: Mapping[Lane, Provider] | None = None,
        sinks: list[Any] | None = None,
        **settings: Any,
    ) -> None:
        names = {f.name for f in dataclasses.fields(RunConfig)}
        unknown = sorted(set(settings) - names)
        if unknown:
            raise UsageError(f"unknown RLM setting(s): {', '.join(unknown)}")
        if providers is not None and "provider" not in settings:
            settings["provider"] = "fixture"  # skip endpoint checks: the caller brings its own
        self.config = RunConfig(**settings).validate()
        self.trace_path = trace_path
        self._providers = dict(providers) if providers is not None else None
        self._sinks = list(sinks or [])

    def completion(self, query: str, context: Context = "") -> RunResult:
        """Run to the end in a fresh trio event loop and return the result.

        Limits (iterations, timeout, budget) return a result with that status;
        failures raise an :class:`RLMError` whose ``result`` attribute holds
        what the run had.
        """
        return trio.run(self.acompletion, query, context)

    async def acompletion(self, query: str, context: Context = "") -> RunResult:
        """Like :meth:`completion`, inside a running trio loop.

        Cancellation is trio cancellation: every sandbox is killed and the
        trace is flushed before the Cancelled exception propagates.
        """
        _check_inputs(query, context)
        events = EventBus()
        trace = TraceWriter(self.trace_path) if self.trace_path else None
        if trace is not None:
            events.add_sink(trace)
        for sink in self._sinks:
            events.add_sink(sink)
        result: RunResult | None = None
        error: RLMError | None = None
        try:
            events.emit(self._run_started(query, context))
            async with self._open_providers() as providers:
                runtime = Runtime(self.config, providers=providers, events=events)
                outcome = await runtime.run(query, context)
            error = outcome.error
            result = self._result(events, runtime, outcome.root, error)
        finally:
            if result is None:  # cancelled, or a bug: still record how the run ended
                status = "interrupted"
                events.emit(
                    RunFinished(
                        status=status,
                        answer=None,
                        error=status,
                        duration_s=round(events.now(), 6),
                        llm_calls=0,
                        input_tokens=0,
                        output_tokens=0,
                    )
                )
            if trace is not None:
                trace.close()
        if error is not None and not isinstance(error, LimitExceeded):
            error.result = result
            raise error
        return result

    def _result(
        self, events: EventBus, runtime: Runtime, root: Any, error: RLMError | None
    ) -> RunResult:
        usage = runtime.usage.snapshot()
        if error is not None:
            status = (
                "timeout"
                if isinstance(error, RunTimeout)
                else ("budget_exceeded" if isinstance(error, LimitExceeded) else "error")
            )
        else:
            status = root.status if root is not None else "error"
        answer = root.answer if root is not None else None
        message = str(error) if error is not None else (root.error if root is not None else None)
        finished = events.emit(
            RunFinished(
                status=status,
                answer=answer,
                error=message,
                duration_s=round(events.now(), 6),
                llm_calls=usage.llm_calls,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
            )
        )
        return RunResult(
            answer=answer,
            status=status,
            iterations=root.iterations if root is not None else 0,
            usage=usage,
            duration_s=finished.t,
            trace=tuple(e.to_dict() for e in events.events),
            trace_path=self.trace_path,
            error=message,
            fixture=(self.config.provider == "fixture" and self._providers is None)
            or _saw_fixture(events.events),
            traffic=runtime.gate.traffic(),
        )

    def _run_started(self, query: str, context: Context) -> RunStarted:
        public = {k: v for k, v in dataclasses.asdict(self.config).items() if k != "api_key"}
        return RunStarted(
            query=query[:2000],
            context_chars=context_chars(context),
            context_docs=1 if isinstance(context, str) else len(context),
            config=public,
            wall_time=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        )

    @asynccontextmanager
    async def _open_providers(self) -> AsyncIterator[Mapping[Lane, Provider]]:
        if self._providers is not None:
            yield self._providers
            return
        config = self.config
        if config.provider == "fixture":
            from rlm.providers.fixture import FixtureProvider

            fixture = FixtureProvider(
                root_latency=config.fixture_root_latency, sub_latency=config.fixture_sub_latency
            )
            yield {"root": fixture, "sub": fixture}
            return
        from rlm.providers.openai import OpenAIProvider, make_http_client

        assert config.base_url is not None
        async with make_http_client(
            max_connections=config.max_concurrent, request_timeout=config.request_timeout
        ) as client:
            root = OpenAIProvider(client, config.base_url, config.api_key)
            sub = OpenAIProvider(client, config.sub_base_url or config.base_url, config.api_key)
            yield {"root": root, "sub": sub}


def _saw_fixture(events: list[Event]) -> bool:
    return any(isinstance(e, LLMResponse) and e.metadata.get("fixture") for e in events)


def _check_inputs(query: str, context: Context) -> None:
    if not isinstance(query, str) or not query.strip():
        raise UsageError("the query must be a non-empty string")
    if isinstance(context, list):
        if not all(isinstance(doc, str) for doc in context):
            raise UsageError("context must be a str or a list of str")
    elif not isinstance(context, str):
        raise UsageError("context must be a str or a list of str")
