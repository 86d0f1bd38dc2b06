"""Retry waits: full jitter from an injected random source, Retry-After in every form
with a ceiling, messages a user can act on, and ``retry_delay`` reaching a run's gate."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
import trio

from rlm import RLM
from rlm._config import RunConfig
from rlm._events import EventBus, LLMRetry
from rlm._traffic.gate import Gate
from rlm._traffic.limiter import TieredLimiter
from rlm._traffic.retry import RetryPolicy
from rlm.errors import ProviderError, ProviderStatusError, RateLimitError, RunTimeout
from rlm.providers._http import parse_retry_after
from rlm.providers.base import Completion, CompletionRequest
from rlm.testing.provider import FunctionProvider
from rlm.testing.sandboxes import LineLauncher

BOOM = ProviderStatusError("boom", status=500, retryable=True)


class Draws(random.Random):
    """A random source that returns the given draws in order."""

    def __init__(self, *draws: float) -> None:
        super().__init__(0)
        self.draws = list(draws)

    def random(self) -> float:
        return self.draws.pop(0)


def test_backoff_is_full_jitter_under_a_ceiling_that_doubles_up_to_the_cap() -> None:
    policy = RetryPolicy(base_s=0.5, cap_s=3.0, rng=Draws(1.0, 0.5, 0.0, 1.0, 1.0))
    delays = [policy.delay(BOOM, attempt) for attempt in range(1, 6)]
    # Ceilings 0.5, 1, 2, 4 -> 3 (the cap), 3; each draw scales its ceiling.
    assert delays == [0.5, 0.5, 0.0, 3.0, 3.0]


def test_the_default_first_backoff_is_at_most_half_a_second() -> None:
    policy = RetryPolicy(rng=random.Random(1))
    assert RunConfig().retry_delay == 0.5
    assert all(0 <= policy.delay(BOOM, 1) <= 0.5 for _ in range(200))


def test_retry_after_wins_over_the_backoff_up_to_the_ceiling() -> None:
    policy = RetryPolicy(max_wait_s=300.0, rng=Draws())  # no draw is taken
    asked = RateLimitError("slow", status=429, retryable=True, retry_after=42.0)
    assert policy.delay(asked, 1) == 42.0 and policy.too_long(asked) is None
    far = RateLimitError("quota", status=429, retryable=True, retry_after=100_000.0)
    message = policy.too_long(far) or ""
    assert "asked to wait 27.8 h before retrying" in message
    assert "at most 5 min" in message and "run again once it resets" in message


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "0.25"}, 0.25),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # the finer one wins
        ({"retry-after-ms": "nan", "retry-after": "2"}, 2.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:30 GMT"}, 30.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:27:00 GMT"}, 0.0),  # a date passed: at once
        ({"retry-after": "soon"}, None),
        ({"retry-after": "inf"}, None),
        ({}, None),
    ],
)
def test_retry_after_is_read_in_seconds_milliseconds_and_http_date(
    headers: dict[str, str], seconds: float | None
) -> None:
    now = datetime(2015, 10, 21, 7, 28, 0, tzinfo=UTC).timestamp()
    assert parse_retry_after(headers, now=lambda: now) == seconds


def test_an_http_date_retry_after_counts_from_the_wall_clock() -> None:
    soon = datetime.now(UTC).timestamp() + 90
    parsed = parse_retry_after({"retry-after": format_datetime(datetime.fromtimestamp(soon, UTC),
                                                               usegmt=True)})
    assert parsed is not None and 80 < parsed <= 90


def _gate(provider: FunctionProvider, deadline: float = float("inf")) -> tuple[Gate, EventBus]:
    events = EventBus()
    gate = Gate(limiter=TieredLimiter(4, 0), providers={"root": provider, "sub": provider},
                events=events, retry=RetryPolicy(max_retries=3), deadline=lambda: deadline)
    return gate, events


def _refusing(retry_after: float) -> FunctionProvider:
    async def reply(request: CompletionRequest) -> Completion:
        raise RateLimitError("Rate limit reached for requests per day", url="http://p/v1",
                             status=429, retryable=True, retry_after=retry_after)

    return FunctionProvider(reply)


REQUEST = CompletionRequest(messages=[{"role": "user", "content": "q"}], model="m", lane="sub")


async def test_a_retry_after_past_the_ceiling_fails_at_once_saying_so(
    autojump_clock: trio.abc.Clock,
) -> None:
    provider = _refusing(100_000.0)
    gate, events = _gate(provider)
    with pytest.raises(RateLimitError) as caught:
        await gate.complete(REQUEST)
    message = str(caught.value)
    assert message.startswith("http://p/v1 asked to wait 27.8 h before retrying, longer than")
    assert "3600" not in message and "Rate limit reached for requests per day" in message
    assert not caught.value.retryable and caught.value.status == 429
    assert trio.current_time() == 0.0 and len(provider.times) == 1  # no wait, no second try
    assert not [e for e in events.events if isinstance(e, LLMRetry)]


async def test_a_retry_after_past_the_run_timeout_says_both_numbers(
    autojump_clock: trio.abc.Clock,
) -> None:
    gate, _ = _gate(_refusing(200.0), deadline=0.07)
    with pytest.raises(RunTimeout) as caught:
        await gate.complete(REQUEST)
    message = str(caught.value)
    assert "asked to wait 3 min before retrying, past the 0.07 s left of the run's timeout" in (
        message
    )
    assert "give a longer timeout" in message


def _failing_once_then_final(retry_delay: float | None) -> list[float]:
    """A run whose first root step gets a 500: the back-off before its retry."""
    failed: list[bool] = []

    def fail(request: CompletionRequest) -> ProviderError | None:
        if failed:
            return None
        failed.append(True)
        return BOOM

    provider = FunctionProvider.scripted(["FINAL(done)"], fail=fail)
    settings = {} if retry_delay is None else {"retry_delay": retry_delay}
    model = RLM(providers={"root": provider, "sub": provider},
                sandboxes=lambda config, events: LineLauncher(), **settings)  # type: ignore[arg-type]
    result = trio.run(model.acompletion, "q", "ctx", clock=trio.testing.MockClock(
        autojump_threshold=0))
    assert result.answer == "done"
    return [e["delay_s"] for e in result.trace if e["event"] == "llm_retry"]


def test_retry_delay_reaches_a_runs_gate() -> None:
    # Same seeded draw both times: the first back-off scales with retry_delay.
    (default,) = _failing_once_then_final(None)
    (slow,) = _failing_once_then_final(7.0)
    assert 0 < default <= 0.5
    assert slow == pytest.approx(default * 14)
