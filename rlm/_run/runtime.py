"""The runtime: one trio nursery that owns every call, sandbox and request of a run.

Nothing outlives :meth:`Runtime.run`.  When the root call concludes, when an
error that ends the run is raised anywhere in the call tree (see
``RLMError.ends_run``), or when ``--timeout`` passes, the run's cancel scope is
cancelled: in-flight requests are abandoned, and every partition's ``aclose``
kills its call's sandbox before ``run`` returns.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import trio

from rlm import prompts
from rlm._config import RunConfig
from rlm._events import EventBus, HistoryCompacted
from rlm._run.bridge import Bridge
from rlm._run.call import Call, CallOutcome, CallParts, SessionCarry
from rlm._run.context import Context
from rlm._run.parsing import find_final
from rlm._run.schema import JsonSchema
from rlm._run.tools import ToolBox
from rlm._sandbox.early import EarlyZygote
from rlm._sandbox.interface import Launcher
from rlm._sandbox.launcher import SandboxLauncher
from rlm._spelling import setting
from rlm._traffic.budget import Budget, BudgetLimits, SessionTotals
from rlm._traffic.gate import CompletionCache, Gate
from rlm._traffic.limiter import TieredLimiter
from rlm._traffic.pacer import Pacer
from rlm._traffic.prices import PriceTable
from rlm._traffic.retry import RetryPolicy
from rlm._traffic.usage import Usage
from rlm.errors import (
    BudgetExceeded,
    Interrupted,
    LimitExceeded,
    RLMError,
    RunTimeout,
    SettingError,
)
from rlm.providers.base import CompletionRequest, Lane, Provider

__all__ = ["RunOutcome", "Runtime", "default_launcher", "root_system_prompt"]

# Short on purpose: the extract step must fit where a full step did not.
_EXTRACT_SYSTEM = (
    "You were the root of a recursive language model: you worked on a large `context` by "
    "writing Python in a REPL and calling sub-models with llm_query / llm_query_batched. "
    "No more code can run. Answer with one line: FINAL(your answer)."
)


@dataclass(frozen=True, slots=True, eq=False)
class RunOutcome:
    """How the run ended: the root call's outcome, or the error that stopped it."""

    root: CallOutcome | None
    error: RLMError | None
    extracted: str | None = None


class Runtime:
    """Runs one root call and everything it starts.

    It makes the run's parts (budget ledger, gate, bridge) from ``config`` and
    hands each call exactly those (:class:`CallParts`).  ``sandboxes`` is where
    calls get their sandboxes: by default real sandbox processes
    (:func:`default_launcher`); tests pass an in-process launcher.
    """

    def __init__(
        self,
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
    ) -> None:
        tools = tools or ToolBox()
        self.config = config
        self.events = events
        self.budget = make_budget(config, prices, session)
        self.gate = Gate(
            limiter=TieredLimiter(config.max_concurrent, config.root_permits),
            providers=providers,
            events=events,
            pacer=Pacer(rpm=config.rpm, tpm=config.tpm, burst=config.burst),
            retry=RetryPolicy(max_retries=config.max_retries, base_s=config.retry_delay),
            adaptive=config.adaptive,
            deadline=self._current_deadline,
            ledger=self.budget,
            cache=cache,
        )
        self.sandboxes = (
            sandboxes
            if sandboxes is not None
            else default_launcher(
                config, events, tools=tools.names, answer_json=answer_schema is not None
            )
        )
        bridge = Bridge(
            config=config,
            events=events,
            gate=self.gate,
            budget=self.budget,
            abort=self.abort,
            deadline=self._current_deadline,
            tools=tools,
        )
        self._parts = CallParts(
            config, events, self.gate, self.sandboxes, bridge, self.abort,
            system_prompt=root_system_prompt(tools), answer_schema=answer_schema,
        )
        #: The root call of the last run (its ``data`` holds a structured answer).
        self.root: Call | None = None
        self._run_scope: trio.CancelScope | None = None
        self._error: RLMError | None = None
        self._deadline = float("inf")
        #: How long the last run's teardown took, once its root call had ended (0 when
        #: the run was cut off: its duration then counts the teardown).
        self.teardown_s = 0.0

    @property
    def usage(self) -> Usage:
        """What the run has spent so far, from its budget ledger."""
        return self.budget.usage()

    def _current_deadline(self) -> float:
        return self._deadline

    async def run(
        self, query: str, context: Context, carry: SessionCarry | None = None
    ) -> RunOutcome:
        """Run the root call to its end, or until an error or the timeout stops it.

        With ``carry`` (a session's follow-up) the root continues the session's
        conversation in its sandbox; the session, not this run, keeps the
        launcher serving.
        """
        timeout = self.config.timeout
        self._deadline = trio.current_time() + timeout if timeout else float("inf")
        with trio.CancelScope(deadline=self._deadline) as run_scope:
            self._run_scope = run_scope
            if carry is not None and _too_long(carry):
                try:
                    await self._compact(carry)
                except LimitExceeded as exc:  # the query ends with that status, not an error
                    self._error = exc
                    return RunOutcome(None, exc)
            # Without a carry the launcher serves this root call alone and reaps its sandbox.
            root = self.root = Call.root(
                self._parts, query, context, carry, launcher_reaps=carry is None
            )
            concluded_at: float | None = None
            async with contextlib.AsyncExitStack() as stack:
                if carry is None:
                    await stack.enter_async_context(self.sandboxes.serving())
                await root.run()
                concluded_at = root.concluded_at
            if concluded_at is not None:
                # The root call has ended with its outcome; what came since (every sandbox
                # killed and reaped, the zygote exited) is the run's teardown.
                self.teardown_s = self.events.now() - concluded_at
        if self.root is None:  # cut off while compacting
            return RunOutcome(None, self._error or RunTimeout("the run ended before it began"))
        root = self.root
        outcome = root.outcome
        answered = outcome is not None and outcome.status == "answered"
        if self._error is None and run_scope.cancelled_caught and not answered:
            self._error = RunTimeout(
                f"the run passed its {timeout:g} s {setting('timeout')} (raise it to let the "
                f"run go further; {setting('timeout', 'none')} lifts it)"
            )
        extracted = None
        if isinstance(self._error, BudgetExceeded) and outcome is not None and not answered:
            # A fresh scope, so an interrupt during the extract step still stops it.
            with trio.CancelScope() as extract_scope:
                self._run_scope = extract_scope
                extracted = await self._extract_answer(query, outcome)
        return RunOutcome(outcome, self._error, extracted)

    async def _extract_answer(self, query: str, outcome: CallOutcome) -> str | None:
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
            model=self.config.model,
            lane="root",
            max_tokens=self.config.max_tokens,
            call_id="root",
        )
        with trio.move_on_at(self._deadline):
            try:
                completion = await self.gate.complete(request)
            except RLMError:
                return None
            final = find_final(completion.text)
            if final is not None and final.answer is not None:
                return final.answer
        return None

    async def _compact(self, carry: SessionCarry) -> None:
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
            model=self.config.model,
            lane="root",
            max_tokens=self.config.max_tokens,
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
        """Stop the run as if Ctrl-C was pressed: it ends with status ``interrupted``."""
        self.abort(Interrupted("interrupted"))

    def abort(self, exc: RLMError) -> None:
        """End the run because of ``exc`` (the first such error wins)."""
        if self._error is None:
            self._error = exc
        if self._run_scope is not None:
            self._run_scope.cancel()


def root_system_prompt(tools: ToolBox) -> str:
    """The root model's system prompt: the built-in one, then the host tools' list."""
    system = prompts.load("system")
    return f"{system}\n\n{tools.describe()}" if tools else system


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


def default_launcher(
    config: RunConfig,
    events: EventBus,
    *,
    tools: Sequence[str] = (),
    answer_json: bool = False,
    early_zygote: EarlyZygote | None = None,
) -> SandboxLauncher:
    """Real sandbox processes, as ``config`` asks for them (from ``early_zygote`` if given),
    with the host tools' names, and JSON answers from FINAL_VAR when the run wants
    structured data.  Without child calls the warm pool fills only once a second sandbox
    is asked for (a volley's tasks), not for a run whose root is the only call; with
    them it is filled once, for the first child calls, and not refilled."""
    return SandboxLauncher(
        events=events,
        max_output_chars=config.max_output_chars,
        require_isolation=config.require_isolation,
        memory_bytes=config.sandbox_memory,
        early_zygote=early_zygote,
        tools=tools,
        answer_json=answer_json,
        # Without child calls (depth 1) a run opens its root's sandbox only; with them, the
        # pool forks the first ones while the root's first step is generated, once: a child
        # forks its own while its first step is generated as quickly, and two sandboxes
        # refilled for nobody would be two more deaths at the end of every run.
        pool_on_demand=config.max_depth <= 1,
        pool_refills=config.max_depth <= 1,
    )


def load_prices(config: RunConfig) -> PriceTable:
    """The shipped price table, with ``--prices`` entries on top."""
    prices = PriceTable.default()
    if config.prices_path:
        prices = PriceTable.load(config.prices_path, base=prices)
    return prices


def make_budget(
    config: RunConfig, prices: PriceTable | None = None, session: SessionTotals | None = None
) -> Budget:
    """The run's ledger from its configuration; unpriced models under --max-cost are refused.

    ``session`` names a session's totals when they, not the query's own limits, bound it."""
    if prices is None:
        prices = load_prices(config)
    budget = Budget(
        limits=BudgetLimits(
            max_llm_calls=config.max_llm_calls,
            max_input_tokens=config.max_input_tokens,
            max_output_tokens=config.max_output_tokens,
            max_total_tokens=config.max_total_tokens,
            max_cost=config.max_cost,
        ),
        prices=prices,
        session=session or SessionTotals(),
    )
    for model in sorted({config.model, config.effective_sub_model}):
        try:
            budget.check_priced(model)
        except BudgetExceeded as exc:
            raise SettingError(
                f"model {model!r} has no price, so <max_cost> cannot be enforced for it; "
                "add it with <prices_path=FILE>"
            ) from exc
    return budget
