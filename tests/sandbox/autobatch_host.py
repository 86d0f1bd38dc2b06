"""An in-process host for auto-batching tests: a REPL whose bridge frames a fake answers.

:class:`FakeHost` plays the host's side of the protocol on a simulated clock:
every sub-query takes ``latency`` seconds in one of ``slots`` slots (FIFO, like
the gate's sub lane), speculative calls start when they are offered, a
``collect`` waits for its call's end, a direct ``llm_query`` for its own.  The
sandbox's own code takes no simulated time.  So a test reads, without any wall
clock, how long the sub-queries of a block took (``host.clock``), how many were in
flight at once, which prompts were sent and which were wasted.
"""

from __future__ import annotations

import heapq
import json
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlm_sandbox.protocol import ResultFrame
from rlm_sandbox.worker import Repl

__all__ = ["FakeHost", "Ran", "block", "run_block"]


def default_answer(prompt: str, context: str | None) -> str:
    return f"A[{prompt}]" if context is None else f"A[{prompt}|{context}]"


@dataclass
class Sent:
    prompt: str
    context: str | None
    start: float
    end: float
    speculative: bool
    used: bool = False
    cancelled: bool = False


@dataclass
class FakeHost:
    latency: float = 0.3
    slots: int = 16
    answer: Callable[[str, str | None], str] = default_answer
    max_calls: int | None = None
    clock: float = 0.0
    sent: list[Sent] = field(default_factory=list)
    speculative: dict[int, Sent] = field(default_factory=dict)
    loops: list[dict[str, Any]] = field(default_factory=list)
    _free: list[float] = field(default_factory=list)
    _replies: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._free = [0.0] * self.slots

    # --- the Channel interface -----------------------------------------------------------

    def send(self, frame: dict[str, Any]) -> None:
        assert frame["t"] == "bridge", frame
        reply = getattr(self, "_" + frame["fn"])(frame)
        self._replies.append({"t": "reply", "id": frame["id"], "ok": True, "error": "",
                              "kind": "", **reply})

    def receive(self) -> dict[str, Any]:
        return self._replies.pop(0)

    # --- serving ---------------------------------------------------------------------

    def _start(self, prompt: str, context: str | None, speculative: bool) -> Sent:
        start = max(self.clock, heapq.heappop(self._free))
        call = Sent(prompt, context, start, start + self.latency, speculative)
        heapq.heappush(self._free, call.end)
        self.sent.append(call)
        return call

    def _refused(self) -> bool:
        return self.max_calls is not None and len(self.sent) >= self.max_calls

    def _llm_query(self, frame: dict[str, Any]) -> dict[str, Any]:
        if self._refused():
            return {"ok": False, "value": None, "error": "budget spent", "kind": "budget"}
        call = self._start(frame["prompts"][0], frame["contexts"][0], False)
        call.used = True
        self.clock = call.end
        return {"value": self.answer(call.prompt, call.context)}

    def _llm_query_batched(self, frame: dict[str, Any]) -> dict[str, Any]:
        calls = [self._start(p, c, False) for p, c in zip(frame["prompts"], frame["contexts"],
                                                          strict=True)]
        for call in calls:
            call.used = True
        self.clock = max([self.clock, *(call.end for call in calls)])
        return {"value": [self.answer(call.prompt, call.context) for call in calls]}

    def _speculate(self, frame: dict[str, Any]) -> dict[str, Any]:
        accepted = 0
        for spec, prompt, context in zip(frame["spec"], frame["prompts"], frame["contexts"],
                                         strict=True):
            if self._refused():
                break
            self.speculative[spec] = self._start(prompt, context, True)
            accepted += 1
        self.loops.append({"loop": frame["loop"], "line": frame["line"], "offered": accepted})
        return {"value": {"accepted": accepted}}

    def _collect(self, frame: dict[str, Any]) -> dict[str, Any]:
        call = self.speculative.pop(frame["spec"][0])
        call.used = True
        self.clock = max(self.clock, call.end)
        return {"value": self.answer(call.prompt, call.context)}

    def _cancel(self, frame: dict[str, Any]) -> dict[str, Any]:
        cancelled = 0
        for spec in frame["spec"]:
            call = self.speculative.pop(spec)
            call.cancelled = True
            cancelled += call.end > self.clock
        self.loops.append({"loop": frame["loop"], "cancel": len(frame["spec"]),
                           "end": frame["end"]})
        return {"value": {"cancelled": cancelled}}

    def _budget(self, frame: dict[str, Any]) -> dict[str, Any]:
        left = None if self.max_calls is None else self.max_calls - len(self.sent)
        return {"value": {"llm_calls_remaining": left}}

    # --- what happened ---------------------------------------------------------------

    def prompts(self, *, used: bool | None = None) -> list[str]:
        return [c.prompt for c in self.sent if used is None or c.used == used]

    def most_in_flight(self) -> int:
        edges = sorted([(c.start, 1) for c in self.sent] + [(c.end, -1) for c in self.sent])
        most = now = 0
        for _, step in edges:
            now += step
            most = max(most, now)
        return most


@dataclass
class Ran:
    result: ResultFrame
    host: FakeHost
    repl: Repl

    @property
    def output(self) -> str:
        return self.result["output"]

    @property
    def error(self) -> str | None:
        return self.result["error"]

    def variables(self) -> dict[str, Any]:
        """The namespace's plain-data variables, and the names of the others."""
        data, skipped = self.repl.export()
        return {"data": json.loads(data), "other": skipped}


def block(*parts: str) -> str:
    """Pieces of code, each dedented, one after another."""
    return "".join(textwrap.dedent(part).strip("\n") + "\n" for part in parts)


def run_block(code: str, *, window: int = 16, host: FakeHost | None = None,
              context: str | list[str] = "ctx", repl: Repl | None = None) -> Ran:
    """Run ``code`` in a REPL whose host is ``host`` (a fresh one by default)."""
    host = host or FakeHost()
    repl = repl or Repl(host, context, 100_000)  # type: ignore[arg-type]
    result = repl.execute(1, code, window=window)
    return Ran(result, host, repl)
