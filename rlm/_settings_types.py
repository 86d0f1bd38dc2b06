"""Keyword arguments of ``RLM(...)``, ``session(...)`` and ``volley(...)``.

Generated from the settings table (rlm/_config.py) by `python -m rlm._settings_gen`:
do not edit by hand."""

from __future__ import annotations

from typing import TypedDict

from rlm._config import CacheMode, ProviderName, TraceContent, VolleyMode

__all__ = ["RunSettings", "SessionSettings", "VolleySettings"]


class RunSettings(TypedDict, total=False):
    """The settings of :class:`rlm.RunConfig`, each optional."""

    model: str
    base_url: str | None
    sub_model: str | None
    sub_base_url: str | None
    provider: ProviderName
    api_key: str | None
    max_depth: int
    max_iterations: int
    max_concurrent: int
    root_permits: int
    timeout: float | None
    exec_timeout: float
    max_output_chars: int
    max_reply_chars: int
    max_tokens: int | None
    context_window: int | None
    request_timeout: float
    stream_idle_timeout: float
    max_response_bytes: int
    stream: bool
    max_llm_calls: int | None
    max_input_tokens: int | None
    max_output_tokens: int | None
    max_total_tokens: int | None
    max_cost: float | None
    prices_path: str | None
    rpm: float | None
    tpm: float | None
    burst: int
    max_retries: int
    retry_delay: float
    adaptive: bool
    auto_batch: bool
    require_isolation: tuple[str, ...]
    cache_path: str | None
    trace_content: TraceContent
    otel: bool
    cache_mode: CacheMode
    max_context_bytes: int
    sandbox_memory: int


class SessionSettings(TypedDict, total=False):
    """The settings of :class:`rlm.SessionOptions`, each optional."""

    max_history_chars: int | None
    max_total_llm_calls: int | None
    max_total_cost: float | None


class VolleySettings(TypedDict, total=False):
    """The settings of :class:`rlm.VolleyOptions`, each optional."""

    mode: VolleyMode
    cache_warm: bool
    window: int | None
    journal: str | None
    stale_timeout: float
    batch_api: bool
    retry_live: bool
    batch_poll: float
    batch_size: int | None
