"""From a trace's events to the page's data: overview, call tree, steps, timeline.

The page gets one JSON document (:func:`build_model`).  Calls and their steps
are objects; the timeline is columnar (one list per field) because a run can
make tens of thousands of attempts and the browser draws them from arrays.
Texts go through a :class:`~rlm.view.texts.TextStore`, which folds long ones.

Events are attributed the way ``docs/events.md`` defines them: a request whose
``depth`` equals its call's depth is one of the call's steps, one at depth + 1
is a sub-query the call's code asked for; code executions and bridge calls
belong to the call's latest step; a sub-query or child call started while its
call has bridge calls open belongs to the first of them still missing one.  (A loop
auto-batching sends ahead has one ``speculative`` ``llm_query`` bridge call per item
open at once; which of them a request belongs to the trace does not say, so their
rows' latencies may be each other's.)  A ``loop_batched`` event goes to the step with
the loop's block.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from rlm.view.load import LoadedTrace
from rlm.view.phases import time_summary
from rlm.view.texts import TextStore

__all__ = ["build_model"]

#: How many sub-queries a bridge call lists with their prompts and answers (the rest are counted).
ITEMS_SHOWN = 500
#: call_started.query keeps this many characters (docs/events.md).
CALL_QUERY_CHARS = 500

_STATUS_CODES = {"ok": 0, "error": 1, "cancelled": 2}


@dataclass
class _Call:
    id: str
    parent: str | None
    depth: int
    t0: float
    record: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    open_bridges: dict[Any, dict[str, Any]] = field(default_factory=dict)  # by bridge_id
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0


class _Builder:
    def __init__(self, trace: LoadedTrace, texts: TextStore) -> None:
        self.trace = trace
        self.texts = texts
        self.run: dict[str, Any] = {}
        self.calls: dict[str, _Call] = {}
        self.attempts: dict[str, list[Any]] = defaultdict(list)
        self.open_attempts: dict[tuple[int, int], int] = {}  # (request_id, attempt) → row
        self.request_owner: dict[int, tuple[str, bool]] = {}  # request_id → (call, is step)
        self.execs: dict[str, list[Any]] = defaultdict(list)
        self.sandboxes: dict[str, list[Any]] = defaultdict(list)
        self.bridges: dict[str, list[Any]] = defaultdict(list)
        self.backoffs: dict[str, list[Any]] = defaultdict(list)
        self.in_flight: list[tuple[float, int]] = []
        self.capacity: list[tuple[float, int]] = []
        self.refusals: list[dict[str, Any]] = []
        self.learned: list[dict[str, Any]] = []
        self.isolation: list[str] = []
        self.cached_tokens = 0
        self.cached_requests: list[int] = []
        self.end = 0.0

    # -- one handler per event kind ------------------------------------------------

    def feed(self, e: dict[str, Any]) -> None:
        self.end = max(self.end, float(e.get("t", 0.0)))
        handler = getattr(self, "_on_" + e["event"], None)
        if handler is not None:
            handler(e)

    def _on_run_started(self, e: dict[str, Any]) -> None:
        config = dict(e.get("config") or {})
        config.pop("api_key", None)  # never recorded; dropped again in case a trace has one
        self.run.update(query=self.texts.add(e.get("query")), config=config,
                        system_prompt=self.texts.add(e.get("system_prompt")),
                        content=config.get("trace_content", "none"),
                        wall_time=e.get("wall_time"), context_chars=e.get("context_chars"),
                        context_docs=e.get("context_docs"))
        sub = int(config.get("max_concurrent", 0) or 0) - int(config.get("root_permits", 0) or 0)
        if sub > 0:
            self.capacity.append((float(e["t"]), sub))

    def _on_run_finished(self, e: dict[str, Any]) -> None:
        detail = e.get("usage_detail") or {}
        self.run.update(status=e.get("status"), answer=self.texts.add(e.get("answer")),
                        error=e.get("error"), duration_s=e.get("duration_s"),
                        llm_calls=e.get("llm_calls"), input_tokens=e.get("input_tokens"),
                        output_tokens=e.get("output_tokens"), cost=detail.get("cost"),
                        unpriced_calls=detail.get("unpriced_calls"),
                        usage_detail=detail, traffic=e.get("traffic") or {})

    def _on_call_started(self, e: dict[str, Any]) -> None:
        call_id = str(e.get("call_id"))
        parent = e.get("parent_id")
        call = _Call(call_id, parent, int(e.get("depth", 0)), float(e["t"]), {
            "id": call_id, "parent": parent, "depth": int(e.get("depth", 0)),
            "query": self.texts.add(e.get("query")), "model": e.get("model"),
            "context_chars": e.get("context_chars"), "t0": e["t"], "t1": None,
            "status": "running", "iterations": 0, "answer": None, "error": None,
            "duration_s": None,
        })
        self.calls[call_id] = call
        owner = self.calls.get(str(parent)) if parent is not None else None
        if owner is not None:
            owner.children.append(call_id)
            bridge = _waiting_bridge(owner, "children")
            if bridge is not None:
                bridge["children"].append(call_id)

    def _on_call_finished(self, e: dict[str, Any]) -> None:
        call = self.calls.get(str(e.get("call_id")))
        if call is None:
            return
        call.record.update(t1=e["t"], status=e.get("status"), iterations=e.get("iterations"),
                           answer=self.texts.add(e.get("answer")), error=e.get("error"),
                           duration_s=e.get("duration_s"))

    def _on_step_completed(self, e: dict[str, Any]) -> None:
        call = self.calls.get(str(e.get("call_id")))
        if call is None:
            return
        fields = {
            "t": e["t"], "iteration": e.get("iteration"), "model": e.get("model"),
            "code_blocks": e.get("code_blocks"), "has_final": e.get("has_final"),
            "forced_final": e.get("forced_final"), "input_tokens": e.get("input_tokens"),
            "output_tokens": e.get("output_tokens"), "reply_chars": e.get("reply_chars"),
            "cached_input_tokens": e.get("cached_input_tokens") or 0,
            "cache_write_tokens": e.get("cache_write_tokens") or 0,
            "reply_cut_chars": e.get("reply_cut_chars") or 0,
            "reply": self.texts.add(e.get("reply")),
            "request": self._request_messages(e.get("request")),
        }
        if call.steps and call.steps[-1].get("pending"):
            # Begun at its request: code that ran while the reply streamed is already in it.
            call.steps[-1].update(fields, pending=False)
        else:
            call.steps.append({**fields, "blocks": [], "bridges": [], "loops": []})

    def _request_messages(self, request: Any) -> Any:
        if not isinstance(request, dict):
            return None
        new = [{"role": m.get("role"), "ref": m.get("ref"),
                "content": self.texts.add(m.get("content"))}
               for m in request.get("new", []) if isinstance(m, dict)]
        return {"reused": request.get("reused", 0), "new": new}

    def _step_of(self, call: _Call) -> dict[str, Any]:
        if not call.steps:  # code before any step (should not happen): a placeholder step
            call.steps.append({"t": call.t0, "iteration": 0, "blocks": [], "bridges": [],
                               "loops": []})
        return call.steps[-1]

    def _on_code_executed(self, e: dict[str, Any]) -> None:
        call = self.calls.get(str(e.get("call_id")))
        if call is None:
            return
        duration = float(e.get("duration_s") or 0.0)
        self._step_of(call)["blocks"].append({
            "block": e.get("block"), "ok": e.get("ok"), "code": self.texts.add(e.get("code")),
            "output": self.texts.add(e.get("output")), "output_chars": e.get("output_chars"),
            "error": self.texts.add(e.get("error")), "final": e.get("final"),
            "duration_s": duration, "t": e["t"],
        })
        self._row(self.execs, call_id=call.id, t0=float(e["t"]) - duration, t1=e["t"],
                  ok=1 if e.get("ok") else 0, iteration=e.get("iteration"), block=e.get("block"))

    def _on_bridge_call_started(self, e: dict[str, Any]) -> None:
        call = self.calls.get(str(e.get("call_id")))
        if call is None:
            return
        bridge = {"bridge_id": e.get("bridge_id"), "fn": e.get("fn"), "items": e.get("items"),
                  "mode": e.get("mode"), "t0": e["t"], "t1": None, "failed_items": None,
                  "duration_s": None, "requests": [], "children": [], "prompts": None,
                  "answers": None, "speculative": bool(e.get("speculative")),
                  "cancelled": False}
        self._step_of(call)["bridges"].append(bridge)
        call.open_bridges[e.get("bridge_id")] = bridge

    def _on_bridge_call_finished(self, e: dict[str, Any]) -> None:
        call = self.calls.get(str(e.get("call_id")))
        if call is None or not call.open_bridges:
            return
        bridge = call.open_bridges.pop(e.get("bridge_id"), None)
        if bridge is None:  # a trace from before bridge ids were unique: the oldest open one
            bridge = call.open_bridges.pop(next(iter(call.open_bridges)))
        bridge.update(t1=e["t"], failed_items=e.get("failed_items"),
                      duration_s=e.get("duration_s"), cancelled=bool(e.get("cancelled")))
        prompts, contexts, answers = e.get("prompts"), e.get("contexts"), e.get("answers")
        if isinstance(prompts, list):
            if not isinstance(contexts, list) or len(contexts) != len(prompts):
                contexts = [None] * len(prompts)
            # As a sub-query sent it: the prompt, then the item's context if it had one.
            bridge["prompts"] = [
                self.texts.add(_text(p) if c is None else f"{_text(p)}\n\n{_text(c)}")
                for p, c in zip(prompts[:ITEMS_SHOWN], contexts[:ITEMS_SHOWN], strict=True)]
        if isinstance(answers, list):
            bridge["answers"] = [self.texts.add(_text(a)) for a in answers[:ITEMS_SHOWN]]
        if isinstance(prompts, list) and bridge["children"]:
            self._whole_queries(bridge["children"], [_text(p) for p in prompts])
        self._row(self.bridges, call_id=call.id, t0=bridge["t0"], t1=e["t"],
                  items=e.get("items"), failed=e.get("failed_items"))

    def _on_loop_batched(self, e: dict[str, Any]) -> None:
        call = self.calls.get(str(e.get("call_id")))
        if call is None:
            return
        self._step_of(call).setdefault("loops", []).append(
            {k: e.get(k) for k in ("t", "loop", "line", "calls", "used", "cancelled", "window",
                                   "duration_s")})

    def _whole_queries(self, children: list[str], prompts: list[str]) -> None:
        """Give each child call its whole query: call_started keeps only its first 500
        characters, the parent's bridge call has the prompt that started it in full."""
        by_start: dict[str, set[str]] = defaultdict(set)
        for prompt in prompts:
            if len(prompt) > CALL_QUERY_CHARS:
                by_start[prompt[:CALL_QUERY_CHARS]].add(prompt)
        for child_id in children:
            record = self.calls[child_id].record
            whole = by_start.get(record["query"]) if isinstance(record["query"], str) else None
            if whole is not None and len(whole) == 1:  # two different prompts: cannot tell which
                record["query"] = self.texts.add(next(iter(whole)))

    def _on_llm_request(self, e: dict[str, Any]) -> None:
        call_id = str(e.get("call_id"))
        call = self.calls.get(call_id) or self._task_call(e)
        request_id, attempt = int(e.get("request_id", 0)), int(e.get("attempt", 1))
        step = call is not None and int(e.get("depth", 0)) == call.depth
        if call is not None and step and request_id not in self.request_owner:
            # A step begins at its request; step_completed fills it in (see _on_step_completed).
            call.steps.append({"t": e["t"], "pending": True, "blocks": [], "bridges": [],
                               "loops": []})
        self.request_owner[request_id] = (call_id, step)
        bridge = None if call is None or step or attempt != 1 else _waiting_bridge(
            call, "requests")
        if bridge is not None:
            bridge["requests"].append(request_id)
        sent = float(e["t"])
        queue, pace = float(e.get("queue_wait_s") or 0.0), float(e.get("pace_wait_s") or 0.0)
        self.open_attempts[(request_id, attempt)] = len(self.attempts["request_id"])
        self._row(self.attempts, request_id=request_id, attempt=attempt,
                  lane=0 if e.get("lane") == "root" else 1, call_id=call_id,
                  step=1 if step else 0, queued=sent - queue - pace, paced=sent - pace,
                  sent=sent, end=None, status=-1, http=None, input_tokens=0, output_tokens=0,
                  cost=None, prompt_chars=e.get("prompt_chars"), error=None, ttft=None)
        self.in_flight.append((sent, int(e.get("in_flight") or 0)))

    def _on_llm_response(self, e: dict[str, Any]) -> None:
        key = (int(e.get("request_id", 0)), int(e.get("attempt", 1)))
        row = self.open_attempts.pop(key, None)
        if row is None:
            return
        a = self.attempts
        status = _STATUS_CODES.get(str(e.get("status")), 1)
        a["end"][row] = e["t"]
        a["status"][row] = 3 if e.get("http_status") == 429 else status
        a["http"][row] = e.get("http_status")
        a["input_tokens"][row] = int(e.get("input_tokens") or 0)
        a["output_tokens"][row] = int(e.get("output_tokens") or 0)
        a["cost"][row] = e.get("cost")
        a["error"][row] = e.get("error")
        a["ttft"][row] = e.get("ttft_s")
        self.cached_tokens += int((e.get("metadata") or {}).get("cached_tokens") or 0)
        self.in_flight.append((float(e["t"]), len(self.open_attempts)))
        # A call's usage counts its own steps and the sub-queries its code asked for.
        call = self.calls.get(self.request_owner.get(key[0], ("", False))[0])
        if call is not None:
            call.llm_calls += 1
            call.input_tokens += a["input_tokens"][row]
            call.output_tokens += a["output_tokens"][row]
            call.cost += float(e.get("cost") or 0.0)

    def _on_llm_cached(self, e: dict[str, Any]) -> None:
        """Answered from the response cache: nothing sent, so no bar; counted and listed."""
        call_id = str(e.get("call_id"))
        call = self.calls.get(call_id)
        request_id = int(e.get("request_id", 0))
        self.cached_requests.append(request_id)
        bridge = None if call is None or int(e.get("depth", 0)) == call.depth else (
            _waiting_bridge(call, "requests"))
        if bridge is not None:
            bridge["requests"].append(request_id)

    def _on_llm_retry(self, e: dict[str, Any]) -> None:
        call_id, _ = self.request_owner.get(int(e.get("request_id", 0)), ("", False))
        self._row(self.backoffs, request_id=e.get("request_id"),
                  lane=0 if e.get("lane") == "root" else 1, call_id=call_id,
                  t0=e["t"], t1=float(e["t"]) + float(e.get("delay_s") or 0.0),
                  retry_after=1 if e.get("retry_after") else 0, reason=e.get("reason"))

    def _on_capacity_changed(self, e: dict[str, Any]) -> None:
        self.capacity.append((float(e["t"]), int(e.get("new") or 0)))

    def _on_budget_refused(self, e: dict[str, Any]) -> None:
        self.refusals.append({k: e.get(k) for k in ("t", "call_id", "scope", "items", "reason")})

    def _on_rate_limit_learned(self, e: dict[str, Any]) -> None:
        self.learned.append({k: e.get(k) for k in ("t", "limit", "value", "source")})

    def _on_sandbox_started(self, e: dict[str, Any]) -> None:
        startup = float(e.get("startup_s") or 0.0)
        self._row(self.sandboxes, call_id=e.get("call_id"), t0=float(e["t"]) - startup,
                  t1=e["t"], pid=e.get("pid"))
        layers = e.get("isolation")
        if isinstance(layers, list) and len(layers) > len(self.isolation):
            self.isolation = [str(x) for x in layers]

    # -- a volley: its tasks are the roots ------------------------------------------------

    def _task_call(self, e: dict[str, Any]) -> _Call | None:
        """A completion task of a volley, shown as a root call (made at its first request)."""
        call_id = str(e.get("call_id"))
        if self.run.get("kind") != "volley" or not call_id.startswith("t"):
            return None
        call = _Call(call_id, None, 0, float(e["t"]), {
            "id": call_id, "parent": None, "depth": 0, "query": None, "model": e.get("model"),
            "context_chars": self.run.get("context_chars"), "t0": e["t"], "t1": None,
            "status": "running", "iterations": 0, "answer": None, "error": None,
            "duration_s": None, "task": True})
        self.calls[call_id] = call
        return call

    def _on_volley_started(self, e: dict[str, Any]) -> None:
        self.run.update(kind="volley", volley_id=e.get("volley_id"), tasks=e.get("tasks"),
                        context_chars=e.get("context_chars"), mode=e.get("mode"),
                        query=f"a volley of {e.get('tasks')} tasks ({e.get('mode')})",
                        # Traces before the field was written kept no task's prompt.
                        content=e.get("trace_content", "none"),
                        config=self.run.get("config") or {})

    def _on_task_finished(self, e: dict[str, Any]) -> None:
        call = self.calls.get(str(e.get("call_id")))
        if call is None:
            return
        call.record.update(t1=e["t"], status=e.get("status"), error=e.get("error"),
                           answer=self.texts.add(e.get("output")),
                           query=self.texts.add(e.get("prompt")),
                           duration_s=e.get("duration_s"), iterations=1, task=e.get("index"))
        if call.steps and call.steps[-1].get("pending"):
            call.steps[-1].update(pending=False, t=e["t"], iteration=1,
                                  input_tokens=e.get("input_tokens"),
                                  output_tokens=e.get("output_tokens"),
                                  reply=self.texts.add(e.get("output")), code_blocks=0)

    def _on_volley_finished(self, e: dict[str, Any]) -> None:
        summary = e.get("summary") or {}
        self.run.update(status=e.get("status"), error=e.get("error"),
                        duration_s=summary.get("duration_sec", e["t"]),
                        input_tokens=summary.get("tokens_input"),
                        output_tokens=summary.get("tokens_output"),
                        cost=summary.get("total_cost"), summary=summary)
        self.cached_tokens = int(summary.get("tokens_cached") or self.cached_tokens)

    @staticmethod
    def _row(table: dict[str, list[Any]], **values: Any) -> None:
        for key, value in values.items():
            table[key].append(value)

    # -- the document ----------------------------------------------------------------

    def model(self) -> dict[str, Any]:
        end = max(self.end, float(self.run.get("duration_s") or 0.0))
        a = self.attempts
        for row, value in enumerate(a.get("end", [])):
            if value is None:  # never answered (a cut trace): draw it to the end, marked
                a["end"][row] = end
        for call in self.calls.values():
            for bridge in call.open_bridges.values():  # still waiting when the trace ends
                self._row(self.bridges, call_id=call.id, t0=bridge["t0"], t1=end,
                          items=bridge["items"], failed=None)
        order = sorted(self.calls.values(), key=lambda c: (c.t0, c.id))
        calls = []
        for call in order:
            record = dict(call.record, steps=call.steps, children=call.children,
                          llm_calls=call.llm_calls, input_tokens=call.input_tokens,
                          output_tokens=call.output_tokens, cost=round(call.cost, 8))
            calls.append(record)
        self.run.setdefault("status", "unfinished")
        self.run.update(cached_tokens=self.cached_tokens, cached_requests=self.cached_requests,
                        isolation=self.isolation, calls=len(calls), end=end,
                        requests=len(self.request_owner),
                        attempts=len(a.get("request_id", [])))
        if self.run.get("llm_calls") is None:  # no run_finished: count what the trace shows
            self.run.update(llm_calls=len(a.get("request_id", [])),
                            input_tokens=sum(a.get("input_tokens", [])),
                            output_tokens=sum(a.get("output_tokens", [])))
        return {
            "run": self.run,
            "calls": calls,
            "timeline": {
                "end": end, "attempts": dict(a), "execs": dict(self.execs),
                "sandboxes": dict(self.sandboxes), "bridges": dict(self.bridges),
                "backoffs": dict(self.backoffs), "in_flight": self.in_flight,
                "capacity": self.capacity,
                "max_concurrent": (self.run.get("config") or {}).get("max_concurrent"),
            },
            "refusals": self.refusals,
            "learned": self.learned,
        }


def _waiting_bridge(call: _Call, what: str) -> dict[str, Any] | None:
    """The first open bridge call of ``call`` with fewer ``what`` (requests, children) than
    items: where the next sub-query or child call it starts belongs (the last one open when
    all have theirs, as a retried request or a structured answer's repair adds one)."""
    bridges = list(call.open_bridges.values())
    for bridge in bridges:
        if len(bridge[what]) < int(bridge.get("items") or 0):
            return bridge
    return bridges[-1] if bridges else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def build_model(trace: LoadedTrace, texts: TextStore | None = None) -> dict[str, Any]:
    """The page's data for ``trace`` (see the module docstring)."""
    store = texts or TextStore()
    builder = _Builder(trace, store)
    for event in trace.events:
        builder.feed(event)
    model = builder.model()
    model["time"] = time_summary(trace.events, model)
    model["notices"] = trace.notices()
    if store.dropped:
        model["notices"].append(
            f"{store.dropped} long text(s) are shown as their beginning and end only, to keep "
            f"this page small; the trace file ({trace.source}) has them in full.")
    model["source"] = trace.source
    return model
