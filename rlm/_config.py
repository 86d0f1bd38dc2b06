"""Run configuration: every knob of one run, validated in one place."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlm._sandbox.isolation import parse_layers
from rlm.errors import UsageError

__all__ = ["ProviderName", "RunConfig", "TraceContent"]

ProviderName = Literal["openai", "anthropic", "fixture"]
#: What the trace file keeps: ``full`` content (prompts, replies, code, outputs) or ``meta``
#: (sizes and timings only, for sensitive inputs).
TraceContent = Literal["full", "meta"]


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs to know.  ``validate()`` names the offending flag.

    ``api_key`` is held here (never logged, never sent to a sandbox); the CLI
    reads it from ``RLM_API_KEY`` / ``OPENAI_API_KEY``, never from argv.
    """

    model: str = "fixture"
    base_url: str | None = None
    sub_model: str | None = None
    sub_base_url: str | None = None
    provider: ProviderName = "openai"
    api_key: str | None = field(default=None, repr=False)
    max_depth: int = 1
    max_iterations: int = 20
    max_concurrent: int = 8
    root_permits: int = 1
    timeout: float | None = None
    exec_timeout: float = 60.0
    max_output_chars: int = 10_000
    max_tokens: int | None = None
    request_timeout: float = 600.0
    stream_idle_timeout: float = 60.0
    stream: bool = False
    max_llm_calls: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    max_cost: float | None = None
    prices_path: str | None = None
    rpm: float | None = None
    tpm: float | None = None
    burst: int = 1
    max_retries: int = 3
    retry_delay: float = 1.0  # base of the exponential back-off (s); Retry-After wins
    adaptive: bool = True
    fixture_root_latency: float = 0.0
    fixture_sub_latency: float = 0.0
    fixture_chunk_chars: int = 16
    fixture_chunk_delay: float = 0.0
    require_isolation: tuple[str, ...] = ()
    cache_path: str | None = None
    trace_content: TraceContent = "full"
    cache_mode: str = "read-write"

    @property
    def effective_sub_model(self) -> str:
        return self.sub_model or self.model

    def validate(self) -> RunConfig:
        """Return self, or raise UsageError naming the flag that is wrong."""
        _positive("--max-depth", self.max_depth)
        _positive("--max-iterations", self.max_iterations)
        _positive("--max-concurrent", self.max_concurrent)
        if self.root_permits < 0:
            raise UsageError("--root-permits must be 0 or more")
        if self.root_permits >= self.max_concurrent:
            raise UsageError(
                f"--root-permits ({self.root_permits}) must be less than --max-concurrent "
                f"({self.max_concurrent}), or sub-queries could never run"
            )
        if self.timeout is not None and self.timeout <= 0:
            raise UsageError("--timeout must be a positive number of seconds")
        if self.exec_timeout <= 0:
            raise UsageError("--exec-timeout must be a positive number of seconds")
        if self.stream_idle_timeout <= 0:
            raise UsageError("--stream-idle-timeout must be a positive number of seconds")
        _positive("--max-output-chars", self.max_output_chars)
        _positive("fixture_chunk_chars", self.fixture_chunk_chars)
        latencies = (self.fixture_root_latency, self.fixture_sub_latency, self.fixture_chunk_delay)
        if min(latencies) < 0:
            raise UsageError("the fixture model's latencies and chunk delay must not be negative")
        for flag, rate in (("--rpm", self.rpm), ("--tpm", self.tpm)):
            if rate is not None and rate <= 0:
                raise UsageError(f"{flag} must be a positive rate per minute, got {rate:g}")
        _positive("--burst", self.burst)
        for flag, limit in (
            ("--max-llm-calls", self.max_llm_calls),
            ("--max-input-tokens", self.max_input_tokens),
            ("--max-output-tokens", self.max_output_tokens),
            ("--max-total-tokens", self.max_total_tokens),
        ):
            if limit is not None:
                _positive(flag, limit)
        if self.max_cost is not None and self.max_cost <= 0:
            raise UsageError(f"--max-cost must be a positive amount of USD, got {self.max_cost:g}")
        if self.max_retries < 0:
            raise UsageError(f"--max-retries must be 0 or more, got {self.max_retries}")
        if not self.retry_delay > 0:
            raise UsageError(f"--retry-delay must be a positive duration, got {self.retry_delay:g}")
        if self.max_tokens is not None:
            _positive("--max-tokens", self.max_tokens)
        if self.cache_mode not in ("read-write", "read-only", "refresh"):
            raise UsageError(
                f"--cache-mode must be read-write, read-only or refresh, got {self.cache_mode!r}"
            )
        if self.trace_content not in ("full", "meta"):
            raise UsageError(
                f"--trace-content must be 'full' or 'meta', got {self.trace_content!r}"
            )
        try:
            parse_layers(self.require_isolation)
        except ValueError as exc:
            raise UsageError(f"--require-isolation: {exc}") from None
        return self

    def validate_endpoint(self) -> RunConfig:
        """Return self, or raise UsageError when ``provider`` cannot be reached as configured.

        Only for runs whose providers are made from this configuration: a
        caller that brings its own providers needs no endpoint.
        """
        if self.provider in ("openai", "anthropic"):
            if self.base_url and not self.base_url.startswith(("http://", "https://")):
                raise UsageError(
                    f"--base-url must start with http:// or https://, got {self.base_url!r}"
                )
            if self.sub_base_url and not self.sub_base_url.startswith(("http://", "https://")):
                raise UsageError(
                    f"--sub-base-url must start with http:// or https://, got {self.sub_base_url!r}"
                )
            if not self.model:
                raise UsageError(
                    "no model: pass --model M (or set RLM_MODEL), or use --provider fixture "
                    "for the built-in fixture model"
                )
        elif self.provider != "fixture":
            raise UsageError(
                f"--provider must be 'openai', 'anthropic' or 'fixture', got {self.provider!r}"
            )
        return self


def _positive(flag: str, value: int) -> None:
    if value <= 0:
        raise UsageError(f"{flag} must be a positive integer, got {value}")
