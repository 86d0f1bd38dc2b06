"""The budget: one ledger per root run, shared by every call in the tree.

Reserve before spending, settle after.  Every attempt the gate sends is
reserved first (``reserve`` is synchronous, so under trio it is atomic: two
requests can never both take the last call), and settled with the provider's
reported usage when it returns or fails.

Guarantees
----------
- ``max_llm_calls`` is never exceeded: a request is counted when reserved,
  retries and batch items included, and a batch that cannot fit in the calls
  left is refused whole before any of it is sent.
- Token and cost limits reserve an *estimate* (prompt chars / 4, plus
  ``max_tokens`` or 1,024 output tokens) and settle the real usage after.  They
  can therefore be passed only by the estimate error of the requests already
  in flight when the limit is reached: at most Σ (actual − estimate) over those
  requests.  Setting ``--max-tokens`` makes the output part of the estimate an
  upper bound.
- An answer whose provider sent no usage (llama.cpp's server streams none) is counted at
  an estimate (characters / 4, :func:`rlm._traffic.usage.usage_or_estimate`); the
  report's ``estimated_calls`` says how many, so every figure built on them is
  approximate.
- ``max_cost`` refuses models without a price (see ``rlm._traffic.prices``) instead of
  counting them as free.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from rlm._spelling import setting
from rlm._traffic.prices import PriceTable
from rlm._traffic.usage import Usage, estimate_io, prefix_tokens
from rlm.errors import BudgetExceeded
from rlm.providers.base import Completion, CompletionRequest

__all__ = ["Budget", "BudgetLimits", "SessionTotals", "Ticket", "UsageBreakdown"]


@dataclass(frozen=True, slots=True)
class BudgetLimits:
    """The hard limits of one run; ``None`` means unlimited."""

    max_llm_calls: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    max_cost: float | None = None


@dataclass(frozen=True, slots=True)
class SessionTotals:
    """A session's total limits that bound this query, and what its earlier queries spent.

    A session runs each query with the smaller of its own limit and what is left of
    the session's total; when the total is the smaller, a refusal must name the total
    (``max_total_llm_calls``), not the query's limit, whose value is then only what was
    left.  A field is ``None`` when that total does not bound the query.
    """

    max_total_llm_calls: int | None = None
    max_total_cost: float | None = None
    llm_calls_before: int = 0
    cost_before: float = 0.0


@dataclass(frozen=True, slots=True, eq=False)
class Ticket:
    """One reservation: what an attempt is expected to spend."""

    model: str
    lane: str
    depth: int
    input_tokens: int
    output_tokens: int
    cost: float


@dataclass(slots=True, eq=False)
class UsageBreakdown:
    """Usage of one model, lane or depth."""

    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    unpriced_calls: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "llm_calls": self.llm_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost": round(self.cost, 8),
            "unpriced_calls": self.unpriced_calls,
        }


@dataclass(slots=True, eq=False)
class _Totals:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0


@dataclass(slots=True, eq=False)
class Budget:
    """The shared ledger.  All methods are synchronous and so atomic under trio."""

    limits: BudgetLimits = field(default_factory=BudgetLimits)
    prices: PriceTable = field(default_factory=PriceTable.default)
    session: SessionTotals = field(default_factory=SessionTotals)
    spent: _Totals = field(default_factory=_Totals)
    reserved: _Totals = field(default_factory=_Totals)
    unpriced_calls: int = 0
    estimated_calls: int = 0  # answers whose provider sent no usage: tokens estimated
    breakdown: dict[str, dict[str, UsageBreakdown]] = field(
        default_factory=lambda: {
            "model": defaultdict(UsageBreakdown),
            "lane": defaultdict(UsageBreakdown),
            "depth": defaultdict(UsageBreakdown),
        }
    )

    # -- checks ----------------------------------------------------------------

    def calls_left(self) -> int | None:
        if self.limits.max_llm_calls is None:
            return None
        return self.limits.max_llm_calls - self.spent.calls - self.reserved.calls

    def check_batch(self, items: int) -> None:
        """Refuse a batch of ``items`` requests whole if the calls left cannot cover it."""
        left = self.calls_left()
        if left is not None and items > left:
            what = "1 sub-query needs 1 LLM call" if items == 1 else (
                f"{items} sub-queries needs {items} LLM calls"
            )
            total = self.session.max_total_llm_calls
            limit = (
                setting("max_llm_calls", self.limits.max_llm_calls)
                if total is None
                else setting("max_total_llm_calls", total)
            )
            raise BudgetExceeded(f"a batch of {what}, but only {left} of {limit} remain; "
                                 "nothing was sent")

    def check_priced(self, model: str) -> None:
        """With --max-cost, a model without a price cannot be used at all."""
        if self.limits.max_cost is not None and self.prices.lookup(model) is None:
            raise BudgetExceeded(
                f"model {model!r} has no price, so {setting('max_cost')} cannot be enforced "
                f"for it; add it with {setting('prices_path', 'FILE')}"
            )

    # -- reserve / settle ------------------------------------------------------

    def reserve(
        self, request: CompletionRequest, *, cache_writes: bool = False, sent: bool = False
    ) -> Ticket:
        """Reserve one attempt of ``request`` or raise BudgetExceeded naming the limit.

        ``cache_writes``: the provider bills writing the request's cacheable prefix
        (``cache_prefix``, or the whole conversation with ``cache_end``: at most all
        of it is written) at its cache-write rate (Anthropic: 1.25 times input), so
        the prefix is reserved at that rate; at the plain rate, requests in flight
        could pass ``--max-cost`` by a quarter of their prefixes' price.  ``sent``: the
        attempt went out already (a provider batch submitted before a stop): it is
        reserved whatever the limits say, so that it counts against what is sent next.
        """
        limits = self.limits
        input_est, output_est = estimate_io(request)
        price = self.prices.lookup(request.model)
        written_est = prefix_tokens(request) if cache_writes else 0
        cost_est = (
            price.cost(input_est, output_est, 0, written_est) if price is not None else 0.0
        )
        if sent:
            return self._hold(request, input_est, output_est, cost_est)
        if limits.max_cost is not None and price is None:
            self.check_priced(request.model)
        left = self.calls_left()
        if left is not None and left < 1:
            if self.session.max_total_llm_calls is not None:
                raise BudgetExceeded(self._session_calls_message(self.session.max_total_llm_calls))
            raise BudgetExceeded(
                f"{setting('max_llm_calls', limits.max_llm_calls)} reached "
                f"({self.spent.calls} sent, {self.reserved.calls} in flight; "
                f"{setting('max_llm_calls', 'none')} lifts it)"
            )
        committed_in = self.spent.input_tokens + self.reserved.input_tokens
        committed_out = self.spent.output_tokens + self.reserved.output_tokens
        self._check("max_input_tokens", limits.max_input_tokens, committed_in, input_est)
        self._check("max_output_tokens", limits.max_output_tokens, committed_out, output_est)
        self._check(
            "max_total_tokens",
            limits.max_total_tokens,
            committed_in + committed_out,
            input_est + output_est,
        )
        if limits.max_cost is not None:
            committed = self.spent.cost + self.reserved.cost
            if committed + cost_est > limits.max_cost:
                if self.session.max_total_cost is not None:
                    raise BudgetExceeded(
                        self._session_cost_message(self.session.max_total_cost, cost_est)
                    )
                raise BudgetExceeded(
                    f"{setting('max_cost', f'${limits.max_cost:g}')} reached (${committed:.4f} "
                    f"spent or reserved; this request would add about ${cost_est:.4f}; raise "
                    f"{setting('max_cost')} to go further)"
                )
        return self._hold(request, input_est, output_est, cost_est)

    def _hold(self, request: CompletionRequest, input_est: int, output_est: int,
              cost_est: float) -> Ticket:
        ticket = Ticket(request.model, request.lane, request.depth, input_est, output_est, cost_est)
        self._move(self.reserved, ticket, +1)
        return ticket

    def settle(self, ticket: Ticket, completion: Completion | None) -> float | None:
        """Replace the reservation by what was really spent (the call counts either way).

        Returns the attempt's cost in USD, or ``None`` when the model is unpriced.
        """
        self._move(self.reserved, ticket, -1)
        self.spent.calls += 1
        in_tokens = completion.input_tokens if completion else 0
        out_tokens = completion.output_tokens if completion else 0
        cost, priced = self._cost(ticket.model, completion)
        self.spent.input_tokens += in_tokens
        self.spent.output_tokens += out_tokens
        self.spent.cost += cost
        if not priced:
            self.unpriced_calls += 1
        if completion is not None and completion.metadata.get("usage") == "estimated":
            self.estimated_calls += 1
        for kind, key in (
            ("model", ticket.model),
            ("lane", ticket.lane),
            ("depth", str(ticket.depth)),
        ):
            entry = self.breakdown[kind][key]
            entry.llm_calls += 1
            entry.input_tokens += in_tokens
            entry.output_tokens += out_tokens
            entry.cost += cost
            entry.unpriced_calls += 0 if priced else 1
        return cost if priced else None

    def release(self, ticket: Ticket) -> None:
        """Give back a reservation whose request was never sent (a task a provider batch
        did not take after all): unlike :meth:`settle`, no call is counted."""
        self._move(self.reserved, ticket, -1)

    def preload(self, calls: int, input_tokens: int, output_tokens: int, cost: float) -> None:
        """Count what earlier attempts of the same work spent (a resumed volley's journal),
        so the limits cover the whole of it, not only this process's share."""
        self.spent.calls += calls
        self.spent.input_tokens += input_tokens
        self.spent.output_tokens += output_tokens
        self.spent.cost += cost

    # -- views -----------------------------------------------------------------

    def usage(self) -> Usage:
        """Requests settled so far (every attempt sent, retries included) and their tokens."""
        return Usage(self.spent.calls, self.spent.input_tokens, self.spent.output_tokens)

    def remaining(self) -> dict[str, Any]:
        """What is left of each limit (``None`` for unlimited), for ``budget()``."""
        limits, spent = self.limits, self.spent

        def left(limit: float | None, used: float) -> float | None:
            return None if limit is None else max(0, limit - used)

        return {
            "llm_calls": self.calls_left(),
            "input_tokens": left(limits.max_input_tokens, spent.input_tokens),
            "output_tokens": left(limits.max_output_tokens, spent.output_tokens),
            "total_tokens": left(limits.max_total_tokens, spent.input_tokens + spent.output_tokens),
            "cost": None
            if limits.max_cost is None
            else round(max(0.0, limits.max_cost - spent.cost), 6),
            "llm_calls_used": spent.calls,
            "tokens_used": spent.input_tokens + spent.output_tokens,
            "cost_used": round(spent.cost, 6),
        }

    def usage_report(self) -> dict[str, Any]:
        """Usage per model, per lane and per depth, plus cost totals."""
        return {
            "cost": round(self.spent.cost, 8),
            "unpriced_calls": self.unpriced_calls,
            "estimated_calls": self.estimated_calls,
            "by_model": {k: v.to_dict() for k, v in self.breakdown["model"].items()},
            "by_lane": {k: v.to_dict() for k, v in self.breakdown["lane"].items()},
            "by_depth": {k: v.to_dict() for k, v in self.breakdown["depth"].items()},
        }

    # -- internals -------------------------------------------------------------

    def _session_calls_message(self, total: int) -> str:
        return (
            f"{setting('max_total_llm_calls', total)} reached ({self.session.llm_calls_before} "
            f"sent by the session's earlier queries, {self.spent.calls} by this one, "
            f"{self.reserved.calls} in flight; raise {setting('max_total_llm_calls')} or "
            "leave it out to lift it)"
        )

    def _session_cost_message(self, total: float, cost_est: float) -> str:
        committed = self.spent.cost + self.reserved.cost
        return (
            f"{setting('max_total_cost', f'${total:g}')} reached "
            f"(${self.session.cost_before:.4f} spent by the session's earlier queries, "
            f"${committed:.4f} spent or reserved by this one; this request would add about "
            f"${cost_est:.4f}; raise {setting('max_total_cost')} or leave it out to lift it)"
        )

    @staticmethod
    def _check(name: str, limit: int | None, committed: int, estimate: int) -> None:
        if limit is not None and committed + estimate > limit:
            raise BudgetExceeded(
                f"{setting(name, f'{limit:,}')} reached ({committed:,} used or reserved; this "
                f"request needs about {estimate:,} more; raise {setting(name)} to go further)"
            )

    @staticmethod
    def _move(totals: _Totals, ticket: Ticket, sign: int) -> None:
        totals.calls += sign
        totals.input_tokens += sign * ticket.input_tokens
        totals.output_tokens += sign * ticket.output_tokens
        totals.cost += sign * ticket.cost

    def _cost(self, model: str, completion: Completion | None) -> tuple[float, bool]:
        if completion is None:
            return 0.0, True
        reported = completion.metadata.get("cost")
        if isinstance(reported, int | float):
            return float(reported), True
        price = self.prices.lookup(model)
        if price is None:
            return 0.0, False
        cached = completion.metadata.get("cached_tokens")
        cached_tokens = cached if isinstance(cached, int) else 0
        written = completion.metadata.get("cache_write_tokens")
        written_tokens = written if isinstance(written, int) else 0
        cost = price.cost(
            completion.input_tokens, completion.output_tokens, cached_tokens, written_tokens
        )
        return cost, True
