"""A run's events as OpenTelemetry spans: the one place that turns one into the other.

:class:`SpanBuilder` is an event sink (``EventBus.add_sink``): it reads the events a
run, a volley or a session emits anyway, and makes spans of them.  The tree, each
span under its parent::

    rlm.session                   a session: one trace for all its questions
    └── rlm.run | rlm.volley
        └── rlm.task              a volley's task t<i> (rlm.task = i)
            └── rlm.call          the root call; a child call sits under the bridge call
                │                 that started it, so the spans nest as the call tree does
                ├── rlm.step ─── chat <model>    one LLM attempt (queue and pacing waits,
                │                                 a retry: span events on it)
                ├── rlm.execute                   one code block
                ├── rlm.sandbox_start
                ├── rlm.tool
                └── rlm.bridge ─ chat <model> | rlm.call   sub-queries, or child calls

Each span is made when its first event arrives, back-dated to when it began (an
event's ``t`` less the durations and waits it carries), and ended at its last.  A
code block is known only when it ends, so its span is a sibling of the bridge calls
it made rather than their parent.  Events with no span of their own (a budget
refusal, a rate change, a sandbox exit) become span events on the span they belong
to.  Content (queries, replies, code, outputs, prompts, answers) is set as
attributes only when ``content`` is true (``--trace-content full``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, StatusCode, Tracer

from rlm._events import Event
from rlm._trace import CONTENT_FIELDS

__all__ = ["SpanBuilder"]

_COMMON = frozenset({"event", "t", "call_id", "parent_id", "depth"})
_SCALARS = (str, bool, int, float)
#: Fields of events without a span of their own that hold what the model wrote.
_MORE_CONTENT = ("summary",)


@dataclass
class _Call:
    span: Span
    depth: int
    step: Span | None = None
    bridges: list[tuple[int, Span]] = field(default_factory=list)  # open, oldest first
    reply: str | None = None  # the previous step's reply (a step's request refers to it)


class SpanBuilder:
    """Makes spans of the events it is handed; :meth:`close` ends what is still open."""

    def __init__(self, tracer: Tracer, *, content: bool, session: bool = False,
                 clock: Callable[[], int] = time.time_ns) -> None:
        self._tracer = tracer
        self._content = content
        self._clock = clock
        self._origin = clock()  # wall-clock ns of t = 0, set again at each run's start
        self._last = self._origin
        self._session = tracer.start_span("rlm.session", start_time=self._origin) \
            if session else None
        self._top: Span | None = None  # the run or volley now open
        self._tasks: dict[str, Span] = {}
        self._calls: dict[str, _Call] = {}
        self._attempts: dict[tuple[int, int], Span] = {}
        self._failed: dict[int, tuple[Span, int]] = {}  # a failed attempt, until its retry
        self._bridges: dict[int, Span] = {}
        self._system_prompt: str | None = None

    # -- the sink ----------------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        record = event.trace_record()
        handler = getattr(self, f"_on_{event.kind}", None)
        if event.kind in ("run_started", "volley_started"):
            self._origin = self._clock() - _ns(event.t)
        self._last = max(self._last, self._at(event.t))
        if handler is not None:
            handler(record)
        elif event.kind != "text_delta":
            self._owner(record).add_event(f"rlm.{event.kind}", self._attributes(record),
                                          timestamp=self._at(event.t))

    def close(self) -> None:
        """End every span still open (a run cut off before its last events) at the last
        time seen, the session's included."""
        self._end_open(self._last)
        if self._top is not None:
            self._top.end(end_time=self._last)
            self._top = None
        if self._session is not None:
            self._session.end(end_time=max(self._last, self._clock()))
            self._session = None

    # -- runs, volleys, tasks ----------------------------------------------------------

    def _on_run_started(self, e: dict[str, Any]) -> None:
        config = e.get("config") or {}
        self._system_prompt = e.get("system_prompt")
        self._top = self._start("rlm.run", self._session, e["t"], {
            "gen_ai.request.model": config.get("model"), "rlm.provider": config.get("provider"),
            "rlm.max_depth": config.get("max_depth"), "rlm.context_chars": e["context_chars"],
            **self._text(rlm_query=e.get("query"))})

    def _on_run_finished(self, e: dict[str, Any]) -> None:
        self._finish_top(e, {
            "rlm.status": e["status"], "rlm.llm_calls": e["llm_calls"],
            "gen_ai.usage.input_tokens": e["input_tokens"],
            "gen_ai.usage.output_tokens": e["output_tokens"],
            "rlm.cost": (e.get("usage_detail") or {}).get("cost"),
            **self._text(rlm_answer=e.get("answer"))}, ok=e["status"] == "answered")

    def _on_volley_started(self, e: dict[str, Any]) -> None:
        self._top = self._start("rlm.volley", self._session, e["t"], {
            "rlm.volley_id": e["volley_id"], "rlm.tasks": e["tasks"], "rlm.mode": e["mode"],
            "rlm.context_chars": e["context_chars"]})

    def _on_volley_finished(self, e: dict[str, Any]) -> None:
        self._finish_top(e, {"rlm.volley_id": e["volley_id"], "rlm.status": e["status"]},
                         ok=e["status"] == "succeeded")

    def _finish_top(self, e: dict[str, Any], attributes: dict[str, Any], *, ok: bool) -> None:
        end = self._at(e["t"])
        self._end_open(end)
        if self._top is None:
            return
        self._top.set_attributes(_clean(attributes))
        if not ok:
            self._top.set_status(StatusCode.ERROR, e.get("error") or attributes["rlm.status"])
        self._top.end(end_time=end)
        self._top = None

    def _on_task_finished(self, e: dict[str, Any]) -> None:
        key = f"t{e['index']}"
        span = self._tasks.pop(key, None) or self._start(
            "rlm.task", self._top, e["t"] - e["duration_s"], {"rlm.task": e["index"]})
        span.set_attributes(_clean({
            "rlm.status": e["status"], "gen_ai.usage.input_tokens": e["input_tokens"],
            "gen_ai.usage.output_tokens": e["output_tokens"], "rlm.cost": e.get("cost"),
            "rlm.retries": e["retries"],
            **self._text(rlm_title=e.get("title") or None, rlm_prompt=e.get("prompt"),
                         rlm_output=e.get("output"))}))
        if e["status"] != "succeeded":  # a task's error may quote its prompt: content
            span.set_status(StatusCode.ERROR,
                            (e.get("error") if self._content else None) or e["status"])
        span.end(end_time=self._at(e["t"]))

    def _task(self, call_id: str, t: float) -> Span | None:
        """The span of the volley task ``call_id`` belongs to (``t3``, ``t3.1``), begun at
        ``t`` when this is its first event; None outside a volley."""
        head = call_id.split(".", 1)[0]
        if not (head[:1] == "t" and head[1:].isdigit()):
            return None
        span = self._tasks.get(head)
        if span is None:
            span = self._tasks[head] = self._start("rlm.task", self._top, t,
                                                   {"rlm.task": int(head[1:])})
        return span

    # -- calls and steps ---------------------------------------------------------------

    def _on_call_started(self, e: dict[str, Any]) -> None:
        parent_call = self._calls.get(e["parent_id"] or "")
        parent: Span | None
        if parent_call is not None:
            parent = parent_call.bridges[-1][1] if parent_call.bridges else parent_call.span
        else:
            parent = self._task(e["call_id"], e["t"]) or self._top
        span = self._start("rlm.call", parent, e["t"], {
            **self._ids(e), "rlm.parent_id": e["parent_id"], "gen_ai.request.model": e["model"],
            "rlm.context_chars": e["context_chars"], **self._text(rlm_query=e.get("query"))})
        self._calls[e["call_id"]] = _Call(span, e["depth"])

    def _on_call_finished(self, e: dict[str, Any]) -> None:
        call = self._calls.pop(e["call_id"], None)
        if call is None:
            return
        end = self._at(e["t"])
        for _, bridge in call.bridges:
            bridge.end(end_time=end)
        if call.step is not None:
            call.step.end(end_time=end)
        call.span.set_attributes(_clean({
            "rlm.status": e["status"], "rlm.iterations": e["iterations"],
            **self._text(rlm_answer=e.get("answer"))}))
        if e["status"] == "error":
            call.span.set_status(StatusCode.ERROR, e.get("error") or "error")
        call.span.end(end_time=end)

    def _on_step_completed(self, e: dict[str, Any]) -> None:
        call = self._calls.get(e["call_id"])
        if call is None:
            return
        step = call.step or self._start("rlm.step", call.span, e["t"], self._ids(e))
        call.step = None
        step.set_attributes(_clean({
            "rlm.iteration": e["iteration"], "gen_ai.request.model": e["model"],
            "rlm.code_blocks": e["code_blocks"], "rlm.has_final": e["has_final"],
            "gen_ai.usage.input_tokens": e["input_tokens"],
            "gen_ai.usage.output_tokens": e["output_tokens"],
            "gen_ai.usage.cache_read.input_tokens": e.get("cached_input_tokens"),
            "rlm.reply_chars": e["reply_chars"]}))
        if self._content:
            step.set_attributes(_clean(self._messages(call, e)))
        call.reply = e.get("reply")
        step.end(end_time=self._at(e["t"]))

    def _messages(self, call: _Call, e: dict[str, Any]) -> dict[str, Any]:
        """The step's new input messages (earlier ones are on earlier steps' spans) and its
        reply, in the GenAI conventions' shape, the trace's references resolved."""
        new = (e.get("request") or {}).get("new") or []
        resolved = []
        for message in new:
            text = message.get("content")
            if message.get("ref") == "system_prompt":
                text = self._system_prompt
            elif message.get("ref") == "reply":
                text = call.reply
            resolved.append({"role": message.get("role"),
                             "parts": [{"type": "text", "content": text}]})
        output = [{"role": "assistant", "parts": [{"type": "text", "content": e.get("reply")}]}]
        return {"gen_ai.input.messages": json.dumps(resolved, ensure_ascii=False),
                "gen_ai.output.messages": json.dumps(output, ensure_ascii=False)}

    # -- LLM attempts ------------------------------------------------------------------

    def _on_llm_request(self, e: dict[str, Any]) -> None:
        queue, pace = e["queue_wait_s"], e["pace_wait_s"]
        began = e["t"] - queue - pace
        self._end_failed(e["request_id"])
        span = self._start(f"chat {e['model']}", self._request_parent(e, began), began,
                           {**self._llm(e), "rlm.attempt": e["attempt"],
                            "rlm.prompt_chars": e["prompt_chars"],
                            "rlm.queue_wait_s": queue, "rlm.pace_wait_s": pace},
                           kind=SpanKind.CLIENT)
        span.add_event("rlm.queue_wait", {"rlm.wait_s": queue}, timestamp=self._at(began))
        span.add_event("rlm.pace_wait", {"rlm.wait_s": pace},
                       timestamp=self._at(began + queue))
        self._attempts[(e["request_id"], e["attempt"])] = span

    def _on_llm_response(self, e: dict[str, Any]) -> None:
        span = self._attempts.pop((e["request_id"], e["attempt"]), None) or self._start(
            f"chat {e['model']}", self._request_parent(e, e["t"] - e["latency_s"]),
            e["t"] - e["latency_s"], {**self._llm(e), "rlm.attempt": e["attempt"]},
            kind=SpanKind.CLIENT)
        span.set_attributes(_clean({
            "gen_ai.usage.input_tokens": e["input_tokens"],
            "gen_ai.usage.output_tokens": e["output_tokens"],
            "http.response.status_code": e.get("http_status"), "rlm.status": e["status"],
            "rlm.latency_s": e["latency_s"], "rlm.ttft_s": e.get("ttft_s"),
            "rlm.cost": e.get("cost")}))
        end = self._at(e["t"])
        if e["status"] != "error":
            span.end(end_time=end)
            return
        error = e.get("error") or "error"
        span.set_attributes({"error.type": error.split(":", 1)[0]})
        span.set_status(StatusCode.ERROR, error)
        self._end_failed(e["request_id"])
        self._failed[e["request_id"]] = (span, end)  # a retry may follow: its event goes here

    def _on_llm_retry(self, e: dict[str, Any]) -> None:
        failed = self._failed.pop(e["request_id"], None)
        if failed is None:
            return
        span, end = failed
        span.add_event("rlm.retry", _clean({
            "rlm.next_attempt": e["attempt"], "rlm.delay_s": e["delay_s"],
            "rlm.reason": e["reason"], "rlm.retry_after": e["retry_after"]}),
            timestamp=self._at(e["t"]))
        span.end(end_time=end)

    def _on_llm_cached(self, e: dict[str, Any]) -> None:
        span = self._start(f"chat {e['model']}", self._request_parent(e, e["t"]), e["t"], {
            **self._llm(e), "rlm.cached": True,
            "gen_ai.usage.input_tokens": e["input_tokens"],
            "gen_ai.usage.output_tokens": e["output_tokens"]}, kind=SpanKind.CLIENT)
        span.end(end_time=self._at(e["t"]))

    def _request_parent(self, e: dict[str, Any], began: float) -> Span | None:
        """A step's request goes under its step (begun here when it is the first); a
        sub-query's under the bridge call that asked, else its call, task or run."""
        call = self._calls.get(e["call_id"])
        if call is None:
            return self._task(e["call_id"], began) or self._top
        if e["depth"] == call.depth:
            if call.step is None:
                call.step = self._start("rlm.step", call.span, began, self._ids(e))
            return call.step
        return call.bridges[-1][1] if call.bridges else call.span

    def _end_failed(self, request_id: int) -> None:
        failed = self._failed.pop(request_id, None)
        if failed is not None:
            failed[0].end(end_time=failed[1])

    # -- code, bridge calls, tools, sandboxes ------------------------------------------

    def _on_code_executed(self, e: dict[str, Any]) -> None:
        span = self._under_call("rlm.execute", e, e["duration_s"], {
            "rlm.iteration": e["iteration"], "rlm.block": e["block"], "rlm.ok": e["ok"],
            "rlm.output_chars": e["output_chars"], "rlm.final": e["final"],
            "rlm.pipelined": e.get("pipelined"),
            **self._text(rlm_code=e.get("code"), rlm_output=e.get("output"),
                         rlm_error=e.get("error"))})
        if not e["ok"]:
            span.set_status(StatusCode.ERROR, "the code block failed")
        span.end(end_time=self._at(e["t"]))

    def _on_bridge_call_started(self, e: dict[str, Any]) -> None:
        call = self._calls.get(e["call_id"])
        span = self._start("rlm.bridge", call.span if call else self._top, e["t"], {
            **self._ids(e), "rlm.bridge_id": e["bridge_id"], "rlm.fn": e["fn"],
            "rlm.items": e["items"], "rlm.mode": e["mode"]})
        self._bridges[e["bridge_id"]] = span
        if call is not None:
            call.bridges.append((e["bridge_id"], span))

    def _on_bridge_call_finished(self, e: dict[str, Any]) -> None:
        span = self._bridges.pop(e["bridge_id"], None)
        if span is None:
            return
        call = self._calls.get(e["call_id"])
        if call is not None:
            call.bridges = [(i, s) for i, s in call.bridges if i != e["bridge_id"]]
        span.set_attributes(_clean({
            "rlm.failed_items": e["failed_items"],
            **self._text(rlm_prompts=_json(e.get("prompts")),
                         rlm_answers=_json(e.get("answers")))}))
        span.end(end_time=self._at(e["t"]))

    def _on_tool_called(self, e: dict[str, Any]) -> None:
        span = self._under_call("rlm.tool", e, e["duration_s"], {
            "rlm.tool": e["tool"], "rlm.ok": e["ok"], **self._text(rlm_error=e.get("error"))})
        if not e["ok"]:
            span.set_status(StatusCode.ERROR, "the tool failed")
        span.end(end_time=self._at(e["t"]))

    def _on_sandbox_started(self, e: dict[str, Any]) -> None:
        span = self._under_call("rlm.sandbox_start", e, e["startup_s"], {
            "rlm.pid": e["pid"], "rlm.isolation": list(e["isolation"])})
        span.end(end_time=self._at(e["t"]))

    def _under_call(self, name: str, e: dict[str, Any], duration: float,
                    attributes: Mapping[str, Any]) -> Span:
        call = self._calls.get(e["call_id"])
        parent = call.span if call is not None else self._owner(e)
        return self._start(name, parent, e["t"] - duration, {**self._ids(e), **attributes})

    # -- helpers -----------------------------------------------------------------------

    def _start(self, name: str, parent: Span | None, t: float, attributes: Mapping[str, Any],
               *, kind: SpanKind = SpanKind.INTERNAL) -> Span:
        context = trace.set_span_in_context(parent) if parent is not None else None
        return self._tracer.start_span(name, context=context, kind=kind,
                                       attributes=_clean(attributes), start_time=self._at(t))

    def _owner(self, e: Mapping[str, Any]) -> Span:
        """The span an event with no span of its own belongs to: its call's, its task's,
        the run's or volley's, the session's, or (none open) a span of its own."""
        call = self._calls.get(e.get("call_id") or "")
        if call is not None:
            return call.span
        owner = self._task(e.get("call_id") or "", e["t"]) or self._top or self._session
        return owner if owner is not None else self._start("rlm.event", None, e["t"], {})

    def _end_open(self, end: int) -> None:
        """End the attempts, steps, bridge calls, calls and tasks still open, at ``end``."""
        for span, failed_end in self._failed.values():
            span.end(end_time=failed_end)
        spans = [*self._attempts.values(), *self._bridges.values()]
        for call in self._calls.values():
            spans += [call.step] if call.step is not None else []
        spans += [c.span for c in self._calls.values()] + list(self._tasks.values())
        for span in spans:
            span.end(end_time=end)
        self._failed, self._attempts, self._bridges, self._calls, self._tasks = {}, {}, {}, {}, {}

    def _ids(self, e: Mapping[str, Any]) -> dict[str, Any]:
        head = e["call_id"].split(".", 1)[0]
        task = int(head[1:]) if head[:1] == "t" and head[1:].isdigit() else None
        return {"rlm.call_id": e["call_id"], "rlm.depth": e["depth"], "rlm.task": task}

    def _llm(self, e: Mapping[str, Any]) -> dict[str, Any]:
        # gen_ai.system is the conventions' older name of gen_ai.provider.name: backends
        # read one or the other, so both are set.
        return {**self._ids(e), "gen_ai.operation.name": "chat", "gen_ai.system": e["provider"],
                "gen_ai.provider.name": e["provider"],
                "gen_ai.request.model": e["model"], "rlm.lane": e["lane"],
                "rlm.request_id": e["request_id"]}

    def _text(self, **content: str | None) -> dict[str, Any]:
        """Content attributes (``rlm_query`` → ``rlm.query``), or none without ``content``."""
        if not self._content:
            return {}
        return {name.replace("_", ".", 1): value for name, value in content.items()}

    def _attributes(self, e: Mapping[str, Any]) -> dict[str, Any]:
        """A generic event's scalar fields as attributes (content ones only with content)."""
        content = (*CONTENT_FIELDS.get(e["event"], ()), *_MORE_CONTENT)
        return {f"rlm.{k}": v for k, v in e.items()
                if k not in _COMMON and isinstance(v, _SCALARS)
                and (self._content or k not in content)}

    def _at(self, t: float) -> int:
        return self._origin + _ns(t)


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes OpenTelemetry takes: no None (it would drop them with a warning)."""
    return {k: v for k, v in attributes.items() if v is not None}
