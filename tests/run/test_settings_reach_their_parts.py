"""Each run setting reaches the part that uses it, through the one assembly path.

tests/api/test_settings_table.py walks every setting from each route (Python, each
command's flag, a config file, a profile, the environment) to the RunConfig; this walks
each RunConfig setting on to where it is used: the gate (limiter, pacer, retry policy,
adaptive control), the budget ledger, the sandbox launcher and the providers, all as
Runtime.build and open_providers make them for every kind of run.  Settings a call reads
from its parts' config when it uses them are named in READ_AT_USE: a row of the table
that is in neither fails this test, so a new setting cannot go unwired.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import httpx2
import pytest

from rlm._config import RunConfig
from rlm._events import EventBus
from rlm._run.runtime import Runtime
from rlm._settings import Setting, settings_of
from rlm.providers.open import open_providers
from rlm.testing.provider import FunctionProvider

Parts = dict[str, Any]

#: Where each setting is in use once a run's parts are built.
PROBES: dict[str, Callable[[Parts], Any]] = {
    "max_concurrent": lambda p: p["runtime"].gate.limiter.total,
    "root_permits": lambda p: p["runtime"].gate.limiter.reserved_root,
    "rpm": lambda p: p["runtime"].gate.pacer.rpm,
    "tpm": lambda p: p["runtime"].gate.pacer.tpm,
    "burst": lambda p: p["runtime"].gate.pacer.burst,
    "max_retries": lambda p: p["runtime"].gate.retry.max_retries,
    "retry_delay": lambda p: p["runtime"].gate.retry.base_s,
    "adaptive": lambda p: p["runtime"].gate.adaptive.enabled,
    "max_llm_calls": lambda p: p["runtime"].budget.limits.max_llm_calls,
    "max_input_tokens": lambda p: p["runtime"].budget.limits.max_input_tokens,
    "max_output_tokens": lambda p: p["runtime"].budget.limits.max_output_tokens,
    "max_total_tokens": lambda p: p["runtime"].budget.limits.max_total_tokens,
    "max_cost": lambda p: p["runtime"].budget.limits.max_cost,
    "max_output_chars": lambda p: p["runtime"].sandboxes._max_output_chars,
    "sandbox_memory": lambda p: p["runtime"].sandboxes._memory_bytes,
    "require_isolation": lambda p: p["runtime"].sandboxes._required,
    "max_depth": lambda p: not p["runtime"].sandboxes._pool_refills,  # children: fill once
    "base_url": lambda p: p["providers"]["root"].url.rsplit("/chat/", 1)[0],
    "sub_base_url": lambda p: p["providers"]["sub"].url.rsplit("/chat/", 1)[0],
    "request_timeout": lambda p: p["client"].timeout.read,
}

#: Read from the call parts' config (``CallParts.config``) at the moment they apply, or
#: before the run by the query runner: each is covered by the behaviour tests named.
READ_AT_USE = {
    "model": "run/test_loop.py (the root's requests name it)",
    "sub_model": "run/test_scheduler.py, test_loop.py (sub-queries name it)",
    "provider": "providers/test_open_providers.py (which provider is opened)",
    "api_key": "providers/test_provider_messages.py (sent, never shown)",
    "max_iterations": "run/test_loop.py (the forced final step)",
    "timeout": "run/test_bounded_by_default.py (the run's deadline)",
    "exec_timeout": "sandbox/test_security_limits.py (one execution's limit)",
    "max_tokens": "providers/test_openai_provider.py (sent with each request)",
    "stream_idle_timeout": "providers/test_provider_streaming.py",
    "stream": "run/test_pipelined.py (blocks run as they close)",
    "prices_path": "traffic/test_budget.py (the price table)",
    "cache_path": "e2e/test_cache_cli.py (the response cache)",
    "cache_mode": "journal/test_journal_cache.py",
    "trace_content": "api/test_event_conversion.py (what the trace keeps)",
    "otel": "otel/test_otlp_loopback.py (a run, a volley and a chat exported)",
    "max_context_bytes": "cli/test_context_input.py (what is read)",
    "max_response_bytes": "providers (what is read of one response)",
    "max_reply_chars": "run (what one reply adds to the conversation)",
    "context_window": "volley/test_volley_own_tasks.py (a completion task is held to it)",
    "auto_batch": "run/test_autobatch_host.py (a block's window: the sub lane's, or 0 when off)",
}


def _rows() -> list[Setting]:
    return [row for row in settings_of(RunConfig) if row.name in PROBES]


def test_every_run_setting_is_probed_or_read_at_use() -> None:
    names = {row.name for row in settings_of(RunConfig)}
    assert names == set(PROBES) | (set(READ_AT_USE) & names), (
        names - set(PROBES) - set(READ_AT_USE)
    )


async def _parts(config: RunConfig) -> Parts:
    provider = FunctionProvider.scripted(["FINAL(x)"])
    runtime = Runtime.build(config, providers={"root": provider, "sub": provider},
                            events=EventBus())
    http = dataclasses.replace(config, provider="openai", model="m", api_key="k")
    transport = httpx2.MockTransport(lambda request: httpx2.Response(500))
    async with open_providers(http, transport=transport) as providers:
        client = providers["root"]._client  # type: ignore[attr-defined]
        return {"runtime": runtime, "providers": providers, "client": client}


def _changed(row: Setting) -> Any:
    """A valid value of ``row`` other than its default, as its part shows it."""
    values: dict[str, Any] = {
        "max_concurrent": 12, "root_permits": 3, "rpm": 90.0, "tpm": 5000.0, "burst": 4,
        "max_retries": 7, "retry_delay": 2.5, "adaptive": False, "max_llm_calls": 9,
        "max_input_tokens": 100, "max_output_tokens": 101, "max_total_tokens": 102,
        "max_cost": 0.5, "max_output_chars": 777, "sandbox_memory": 1 << 30,
        "require_isolation": ("fds",), "max_depth": 2,
        "base_url": "http://127.0.0.1:9/v1", "sub_base_url": "http://127.0.0.1:9/other",
        "request_timeout": 42.0,
    }
    return values[row.name]


@pytest.mark.parametrize("row", _rows(), ids=lambda r: r.name)
async def test_each_setting_reaches_the_part_that_uses_it(row: Setting) -> None:
    value = _changed(row)
    config = RunConfig(provider="fixture", **{row.name: value})
    if row.name == "max_cost":  # a cost limit needs priced models
        config = dataclasses.replace(config, model="gpt-4.1-mini")
    parts = await _parts(config)
    shown = PROBES[row.name](parts)
    expected = True if row.name == "max_depth" else value
    assert shown == expected, (row.name, shown)
    default = await _parts(RunConfig(provider="fixture", model="gpt-4.1-mini"))
    assert PROBES[row.name](default) != shown  # the probe sees the setting, not a constant
