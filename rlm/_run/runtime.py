"""The runtime: runs root calls and everything they start, on one gate and one ledger.

:meth:`Runtime.run_root` is the one way a root call runs: ``RLM(...)``'s runs
and a session's questions (one root at a time), and a volley's ``--rlm`` tasks
(many at once, sharing the volley's gate, ledger and launcher) all go through
it.  Each root runs under a cancel scope of its own: when the root call
concludes, when an error that ends its run is raised anywhere in its call tree
(see ``RLMError.ends_run``), or when its deadline passes, that scope is
cancelled: its in-flight requests are abandoned, and every partition's
``aclose`` kills its call's sandbox before ``run_root`` returns.  Nothing it
started outlives it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import trio

from rlm._config import RunConfig
from rlm._events import EventBus, HistoryCompacted
from rlm._run.assembly import build_gate, default_launcher, make_budget, root_system_prompt
from rlm._run.bridge import Bridge
from rlm._run.call import Call, CallOutcome, CallParts, SessionCarry, new_cache_key
from rlm._run.context import Context
from rlm._run.parsing import find_final
from rlm._run.schema import JsonSchema
from rlm._run.tools import ToolBox
from rlm._sandbox.interface import Launcher
from rlm._spelling import setting
from rlm._traffic.budget import Budget, SessionTotals
from rlm._traffic.gate import CompletionCache, Gate
from rlm._traffic.prices import PriceTable
from rlm._traffic.usage import Usage
from rlm.errors import BudgetExceeded, Interrupted, LimitExceeded, RLMError, RunTimeout
from rlm.providers.base import CompletionRequest, Lane, Provider

__all__ = ["RunOutcome", "Runtime"]

# Short on purpose: the extract step must fit where a full step did not.
_EXTRACT_SYSTEM = (
    "You were the root of a recursive language model: you worked on a large `context` by "
    "writing Python in a REPL and calling sub-models with llm_query / llm_query_batched. "
    "No more code can run. Answer with one line: FINAL(your answer)."
)


@dataclass(frozen=True, slots=True, eq=False)
class RunOutcome:
    """How a root call's run ended: its outcome, or the error that stopped it.

    ``extracted`` is the answer a last small request got when a budget stopped the
    run; ``data`` the root's answer as data (structured answers); ``teardown_s``
    how long the reaping after the root's outcome took (0 when the run was cut off).
    """

    root: CallOutcome | None
    error: RLMError | None
    extracted: str | None = None
    data: object = None
    teardown_s: float = 0.0


class Runtime:
    """Runs root calls on one gate, one budget ledger and one sandbox launcher.

    Every call of a root's tree gets exactly that root's parts
    (:class:`CallParts`): the shared gate and launcher, and a bridge and an abort
    of the root's own, so that an error ending one root (one volley task) ends
    only that root.
    """

    def __init__(
        self,
        config: RunConfig,
        *,
        gate: Gate,
        budget: Budget,
        events: EventBus,
        sandboxes: Launcher,
        tools: ToolBox | None = None,
        answer_schema: JsonSchema | None = None,
    ) -> None:
        self.config = config
        self.gate = gate
        self.budget = budget
        self.events = events
        self.sandboxes = sandboxes
        self._tools = tools or ToolBox()
        self._system = root_system_prompt(self._tools)
        self._answer_schema = answer_schema
        self._live: set[_RootRun] = set()

    @classmethod
    def build(
        cls,
        config: RunConfig,
        *,
        providers: Mapping[Lane, Provider],
        events: EventBus,
        prices: PriceTable | None = None,
        cache: CompletionCache | None = None,
        sandboxes: Launcher | None = None,
        tools: ToolBox | None = None,
        answer_schema: JsonSchema | None = None,
        session: SessionTotals | None = None,
    ) -> Runtime:
        """A runtime for one run (or one session question): its own ledger (bound by the
        session's ``session`` totals when given), its own gate, and ``sandboxes`` (by
        default real sandbox processes, :func:`rlm._run.assembly.default_launcher`)."""
        tools = tools or ToolBox()
        budget = make_budget(config, prices, session)
        # Every request of a root runs inside the root's cancel scope: its effective
        # deadline is the run's (or a tighter one, the extract step's).
        gate = build_gate(config, providers=providers, events=events, ledger=budget,
                          cache=cache, deadline=trio.current_effective_deadline)
        if sandboxes is None:
            sandboxes = default_launcher(config, events, tools=tools.names,
                                         answer_json=answer_schema is not None)
        return cls(config, gate=gate, budget=budget, events=events, sandboxes=sandboxes,
                   tools=tools, answer_schema=answer_schema)

    @property
    def usage(self) -> Usage:
        """What the runtime's roots have spent so far, from its budget ledger."""
        return self.budget.usage()

    async def run_root(
        self,
        query: str,
        context: Context,
        *,
        call_id: str = "root",
        config: RunConfig | None = None,
        deadline: float | None = None,
        call_limit: int | None = None,
        carry: SessionCarry | None = None,
        serve: bool = False,
        extract: bool = True,
    ) -> RunOutcome:
        """Run one root call to its end, or until an error or its deadline stops it.

        ``config`` replaces the runtime's for this root (a volley task's own model);
        ``deadline`` is on trio's clock (default: ``timeout`` from now); ``call_limit``
        bounds the requests this root's code may send under the shared ledger.  With
        ``carry`` (a session's follow-up) the root continues the session's conversation
        in its sandbox.  With ``serve`` the launcher serves this root alone and reaps
        every sandbox when it ends.  With ``extract``, a root a budget stopped before it
        answered gets one last small request for its best answer.
        """
        config = config or self.config
        if deadline is None:
            deadline = trio.current_time() + config.timeout if config.timeout else float("inf")
        run = _RootRun(deadline)
        bridge = Bridge(config=config, events=self.events, gate=self.gate, budget=self.budget,
                        abort=run.abort, deadline=lambda: run.deadline, tools=self._tools,
                        call_limit=call_limit)
        parts = CallParts(config, self.events, self.gate, self.sandboxes, bridge, run.abort,
                          system_prompt=self._system, answer_schema=self._answer_schema,
                          cache_key=carry.cache_key if carry is not None else new_cache_key())
        self._live.add(run)
        try:
            return await self._run(run, parts, query, context, call_id, carry, serve, extract)
        finally:
            self._live.discard(run)

    async def _run(
        self, run: _RootRun, parts: CallParts, query: str, context: Context, call_id: str,
        carry: SessionCarry | None, serve: bool, extract: bool,
    ) -> RunOutcome:
        teardown = 0.0
        root: Call | None = None
        with trio.CancelScope(deadline=run.deadline) as scope:
            run.scope = scope
            if carry is not None and _too_long(carry):
                try:
                    await self._compact(parts.config, carry)
                except LimitExceeded as exc:  # the query ends with that status, not an error
                    return RunOutcome(None, exc)
            root = Call(parts, call_id=call_id, parent_id=None, depth=0, query=query,
                        context=context, carry=carry, launcher_reaps=serve)
            async with contextlib.AsyncExitStack() as stack:
                if serve:
                    await stack.enter_async_context(self.sandboxes.serving())
                await root.run()
            if root.concluded_at is not None:
                # The root call has ended with its outcome; what came since (every sandbox
                # killed and reaped, the zygote exited) is the run's teardown.
                teardown = self.events.now() - root.concluded_at
        if root is None:  # cut off while compacting
            return RunOutcome(None, run.error or RunTimeout("the run ended before it began"))
        outcome = root.outcome
        answered = outcome is not None and outcome.status == "answered"
        timeout = parts.config.timeout
        if run.error is None and scope.cancelled_caught and not answered:
            run.error = RunTimeout(
                f"the run passed its {timeout:g} s {setting('timeout')} (raise it to let the "
                f"run go further; {setting('timeout', 'none')} lifts it)"
                if timeout else "the run passed its deadline"
            )
        extracted = None
        if (extract and isinstance(run.error, BudgetExceeded) and outcome is not None
                and not answered):
            # A fresh scope, so an interrupt during the extract step still stops it.
            with trio.CancelScope() as extract_scope:
                run.scope = extract_scope
                extracted = await self._extract_answer(parts.config, query, outcome, run)
        return RunOutcome(outcome, run.error, extracted, root.data, teardown)

    async def _extract_answer(
        self, config: RunConfig, query: str, outcome: CallOutcome, run: _RootRun
    ) -> str | None:
        """One last root request for the best answer, if the budget still allows one.

        The request is small (the query, the last output, the candidate), not
        the whole history, so a token budget that refused the next step may
        still fit it.  Returns None when the ledger refuses it or it fails.
        """
        facts = [f"Query: {query}"]
        if outcome.last_output:
            facts.append(f"What your code printed last:\n{outcome.last_output[-4000:]}")
        if outcome.candidate:
            facts.append(f"Your answer candidate so far: {outcome.candidate}")
        facts.append(
            "The run's budget is exhausted and no more code can run. Give your best final "
            "answer now, from what you have, as a line FINAL(your answer)."
        )
        request = CompletionRequest(
            messages=[
                {"role": "system", "content": _EXTRACT_SYSTEM},
                {"role": "user", "content": "\n\n".join(facts)},
            ],
            model=config.model,
            lane="root",
            max_tokens=config.max_tokens,
            call_id="root",
        )
        with trio.move_on_at(run.deadline):
            try:
                completion = await self.gate.complete(request)
            except RLMError:
                return None
            final = find_final(completion.text)
            if final is not None and final.answer is not None:
                return final.answer
        return None

    async def _compact(self, config: RunConfig, carry: SessionCarry) -> None:
        """Replace a session's older steps by a summary the root model writes.

        The system prompt and the first question stay; everything after them
        becomes one summary.  A failed summary request leaves the history as it
        was (the next query then runs with the long history).
        """
        history = carry.history
        if len(history) < 3:
            return
        transcript = "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in history[2:])
        request = CompletionRequest(
            messages=[
                {"role": "system", "content": _COMPACT_SYSTEM},
                {"role": "user", "content": transcript[-_COMPACT_INPUT_CHARS:]},
            ],
            model=config.model,
            lane="root",
            max_tokens=config.max_tokens,
            call_id="root",
        )
        try:
            summary = (await self.gate.complete(request)).text.strip()
        except RLMError as exc:
            if exc.ends_run:
                raise
            return
        before = sum(len(m["content"]) for m in history)
        count = len(history)
        history[2:] = [
            {"role": "assistant", "content": f"Summary of the session so far:\n{summary}"}
        ]
        self.events.emit(
            HistoryCompacted(
                call_id="root",
                parent_id=None,
                depth=0,
                messages_before=count,
                chars_before=before,
                chars_after=sum(len(m["content"]) for m in history),
                summary=summary,
            )
        )

    def kill_sandboxes(self) -> None:
        """Kill every live sandbox's process group now, synchronously."""
        self.sandboxes.kill_all()

    def interrupt(self) -> None:
        """Stop every root running now as if Ctrl-C was pressed: each ends ``interrupted``."""
        for run in list(self._live):
            run.abort(Interrupted("interrupted"))


@dataclasses.dataclass(eq=False)
class _RootRun:
    """One root's run: its deadline, the cancel scope it runs in, the error that ended it."""

    deadline: float
    scope: trio.CancelScope | None = None
    error: RLMError | None = None

    def abort(self, exc: RLMError) -> None:
        """End this root's run because of ``exc`` (the first such error wins)."""
        if self.error is None:
            self.error = exc
        if self.scope is not None:
            self.scope.cancel()


_COMPACT_SYSTEM = (
    "You are the root of a recursive language model in a long session: you answer queries "
    "about a large `context` by writing Python in a persistent REPL. Summarise the session "
    "below for your future self: the queries and their answers, what you found, and every "
    "REPL variable you defined with what it holds (they still exist). Be brief and exact."
)
_COMPACT_INPUT_CHARS = 400_000


def _too_long(carry: SessionCarry) -> bool:
    limit = carry.max_history_chars
    return limit is not None and sum(len(m["content"]) for m in carry.history) > limit
