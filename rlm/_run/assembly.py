"""How a run's parts are made from its configuration, once for every kind of run.

``rlm run``, ``RLM(...)``, a session's questions and a volley (its completion
tasks and its ``--rlm`` tasks) all build their budget ledger, gate and
sandbox launcher here, so a setting reaches the part that uses it the same
way whatever started the run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from rlm import prompts
from rlm._config import RunConfig
from rlm._events import EventBus
from rlm._run.tools import ToolBox
from rlm._sandbox.early import EarlyZygote
from rlm._sandbox.launcher import SandboxLauncher
from rlm._spelling import setting
from rlm._traffic.budget import Budget, BudgetLimits, SessionTotals
from rlm._traffic.gate import CompletionCache, Gate, SendCheck
from rlm._traffic.limiter import TieredLimiter
from rlm._traffic.pacer import Pacer
from rlm._traffic.prices import PriceTable
from rlm._traffic.retry import RetryPolicy
from rlm.errors import BudgetExceeded, SettingError
from rlm.providers.base import Lane, Provider

if TYPE_CHECKING:
    from rlm._otel.export import Telemetry

__all__ = [
    "build_gate", "default_launcher", "load_prices", "make_budget", "open_cache",
    "open_telemetry",
    "root_system_prompt",
]


def build_gate(
    config: RunConfig,
    *,
    providers: Mapping[Lane, Provider],
    events: EventBus,
    ledger: Budget,
    cache: CompletionCache | None = None,
    deadline: Callable[[], float] = lambda: float("inf"),
    before_send: SendCheck | None = None,
) -> Gate:
    """The one gate of a run (or a volley): permits with ``root_permits`` reserved for
    root steps, the rpm/tpm pacer, adaptive concurrency, the retry policy, the budget
    ledger every attempt is reserved in, the response cache, the run's deadline, and
    (a journaled volley) the check each request passes right before it is sent."""
    return Gate(
        limiter=TieredLimiter(config.max_concurrent, config.root_permits),
        providers=providers,
        events=events,
        pacer=Pacer(rpm=config.rpm, tpm=config.tpm, burst=config.burst),
        retry=RetryPolicy(max_retries=config.max_retries, base_s=config.retry_delay),
        adaptive=config.adaptive,
        deadline=deadline,
        ledger=ledger,
        cache=cache,
        before_send=before_send,
    )


@asynccontextmanager
async def open_cache(config: RunConfig) -> AsyncIterator[CompletionCache | None]:
    """The response cache ``cache_path`` names (None without one), open until the exit."""
    path = config.cache_path
    if path is None:
        yield None
        return
    from rlm.journal import ResponseCache, parse_cache_mode  # only runs that cache
    from rlm.journal.cache import open_cache_store

    mode = parse_cache_mode(config.cache_mode)
    store = await trio.to_thread.run_sync(open_cache_store, path, mode)
    try:
        yield ResponseCache(store, mode)
    finally:
        store.close()


def load_prices(config: RunConfig) -> PriceTable:
    """The shipped price table, with ``prices_path`` entries on top."""
    prices = PriceTable.default()
    if config.prices_path:
        prices = PriceTable.load(config.prices_path, base=prices, what=setting("prices_path"))
    return prices


def make_budget(
    config: RunConfig,
    prices: PriceTable | None = None,
    session: SessionTotals | None = None,
    models: Sequence[str] = (),
) -> Budget:
    """The run's ledger from its configuration; a model without a price under ``max_cost``
    (the run's, or one of ``models``: a volley's tasks may name their own) is refused.

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
    for model in sorted({config.model, config.effective_sub_model, *models}):
        try:
            budget.check_priced(model)
        except BudgetExceeded as exc:
            raise SettingError(
                f"model {model!r} has no price, so <max_cost> cannot be enforced for it; "
                "add it with <prices_path=FILE>"
            ) from exc
    return budget


def root_system_prompt(tools: ToolBox) -> str:
    """The root model's system prompt: the built-in one, then the host tools' list."""
    system = prompts.load("system")
    return f"{system}\n\n{tools.describe()}" if tools else system


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


def open_telemetry(config: RunConfig, *, session: bool = False) -> Telemetry | None:
    """The OpenTelemetry export of a run, a volley or (``session``) a session when
    ``otel`` is on, else None; its caller closes it when that ends."""
    if not config.otel:
        return None
    from rlm._otel.export import Telemetry  # the SDK is an extra: loaded only to export

    return Telemetry(content=config.trace_content == "full", session=session)
