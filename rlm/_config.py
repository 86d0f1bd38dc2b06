"""Run configuration: every knob of one run, its default and its checks, in one place.

The CLI's flag defaults, ``RLM(...)``'s keyword defaults and
``docs/settings.md`` all come from :class:`RunConfig` (tests check that they
agree).  Errors name settings through :class:`rlm.errors.SettingError`, so the
Python API says ``max_depth`` and the CLI says ``--max-depth``.
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, get_args, get_origin

from rlm._sandbox.isolation import parse_layers
from rlm._url_userinfo import redact_url, redacted, redacted_params
from rlm.errors import SettingError

__all__ = [
    "DEFAULTS", "DEFAULT_MAX_HISTORY_CHARS", "DEFAULT_MAX_LLM_CALLS", "DEFAULT_SANDBOX_MEMORY",
    "DEFAULT_TIMEOUT", "PROVIDERS", "ProviderName", "RunConfig", "TraceContent",
    "public_settings", "shown_settings",
]

ProviderName = Literal["openai", "anthropic", "fixture"]
#: Every provider, in the order help texts list them.
PROVIDERS: tuple[ProviderName, ...] = get_args(ProviderName)
#: What the trace file keeps: ``full`` content (prompts, replies, code, outputs) or ``meta``
#: (sizes and timings only, for sensitive inputs).
TraceContent = Literal["full", "meta"]

# Bounded by default: ceilings a normal analysis never reaches but a runaway loop does.
# 5,000 requests is several batched passes over thousands of chunks (a long analysis
# makes tens to hundreds); at sub-model prices it stays in the dollars, not hundreds of
# them.  An hour is many times a long run, short enough that nobody leaves one paying
# overnight.  ``None`` (``none`` on the command line) lifts either.
DEFAULT_MAX_LLM_CALLS = 5_000
DEFAULT_TIMEOUT = 3600.0
#: Address space of one sandbox: room for a context of a few hundred MB and its copies.
DEFAULT_SANDBOX_MEMORY = 2 << 30
_MIN_SANDBOX_MEMORY = 256 << 20  # below this a sandbox cannot even import its own package
#: A session's setting, not a run's (``RLM.session``, ``rlm chat --max-history-chars``): past
#: this many characters of conversation, older steps are compacted before the next query.
DEFAULT_MAX_HISTORY_CHARS = 200_000


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Everything a run needs to know.  ``validate()`` names the offending setting.

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
    timeout: float | None = DEFAULT_TIMEOUT
    exec_timeout: float = 60.0
    max_output_chars: int = 20_000
    max_tokens: int | None = None
    request_timeout: float = 600.0
    stream_idle_timeout: float = 60.0
    stream: bool = False
    max_llm_calls: int | None = DEFAULT_MAX_LLM_CALLS
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    max_cost: float | None = None
    prices_path: str | None = None
    rpm: float | None = None
    tpm: float | None = None
    burst: int = 1
    max_retries: int = 3
    retry_delay: float = 0.5  # the first retry waits up to this (s), full jitter; Retry-After wins
    adaptive: bool = True
    require_isolation: tuple[str, ...] = ()
    cache_path: str | None = None
    trace_content: TraceContent = "full"
    cache_mode: str = "read-write"
    sandbox_memory: int = DEFAULT_SANDBOX_MEMORY

    def __post_init__(self) -> None:
        if isinstance(self.require_isolation, list):  # from JSON or a caller's list
            object.__setattr__(self, "require_isolation", tuple(self.require_isolation))

    def __repr__(self) -> str:
        # The dataclass's repr, but with the base URLs' credentials taken out, as
        # everywhere else a setting is shown: a config reaches logs, tracebacks and
        # debuggers (the key is not shown at all: repr=False).
        shown = shown_settings(self)
        body = ", ".join(f"{f.name}={shown[f.name]!r}" for f in fields(self) if f.repr)
        return f"{type(self).__qualname__}({body})"

    @property
    def effective_sub_model(self) -> str:
        return self.sub_model or self.model

    def validate(self) -> RunConfig:
        """Return self, or raise SettingError naming the setting that is wrong."""
        _check_types(self)
        _positive("max_depth", self.max_depth)
        _positive("max_iterations", self.max_iterations)
        _positive("max_concurrent", self.max_concurrent)
        if self.root_permits < 0:
            raise SettingError("<root_permits> must be 0 or more")
        if self.root_permits >= self.max_concurrent:
            raise SettingError(
                f"<root_permits> ({self.root_permits}) must be less than <max_concurrent> "
                f"({self.max_concurrent}), or sub-queries could never run"
            )
        if self.timeout is not None and self.timeout <= 0:
            raise SettingError("<timeout> must be a positive number of seconds")
        # `not x > 0` and not `x <= 0`: NaN is refused here, not deep in trio's clock.
        if not self.exec_timeout > 0:
            raise SettingError("<exec_timeout> must be a positive number of seconds")
        if not self.stream_idle_timeout > 0:
            raise SettingError("<stream_idle_timeout> must be a positive number of seconds")
        _positive("max_output_chars", self.max_output_chars)
        if self.sandbox_memory < _MIN_SANDBOX_MEMORY:
            raise SettingError(
                f"<sandbox_memory> must be at least 256 MiB, got {self.sandbox_memory:,} bytes"
            )
        for name, rate in (("rpm", self.rpm), ("tpm", self.tpm)):
            if rate is not None and rate <= 0:
                raise SettingError(f"<{name}> must be a positive rate per minute, got {rate:g}")
        _positive("burst", self.burst)
        for name, limit in (
            ("max_llm_calls", self.max_llm_calls),
            ("max_input_tokens", self.max_input_tokens),
            ("max_output_tokens", self.max_output_tokens),
            ("max_total_tokens", self.max_total_tokens),
        ):
            if limit is not None:
                _positive(name, limit)
        if self.max_cost is not None and self.max_cost <= 0:
            raise SettingError(
                f"<max_cost> must be a positive amount of USD, got {self.max_cost:g}"
            )
        if self.max_retries < 0:
            raise SettingError(f"<max_retries> must be 0 or more, got {self.max_retries}")
        if not self.retry_delay > 0:
            raise SettingError(
                f"<retry_delay> must be a positive duration, got {self.retry_delay:g}"
            )
        if self.max_tokens is not None:
            _positive("max_tokens", self.max_tokens)
        if self.cache_mode not in ("read-write", "read-only", "refresh"):
            raise SettingError(
                f"<cache_mode> must be read-write, read-only or refresh, got {self.cache_mode!r}"
            )
        if self.trace_content not in ("full", "meta"):
            raise SettingError(
                f"<trace_content> must be 'full' or 'meta', got {self.trace_content!r}"
            )
        try:
            parse_layers(self.require_isolation)
        except ValueError as exc:
            raise SettingError(f"<require_isolation>: {exc}") from None
        if self.provider not in PROVIDERS:
            raise SettingError(
                f"<provider> must be 'openai', 'anthropic' or 'fixture', got {self.provider!r}"
            )
        return self

    def validate_endpoint(self) -> RunConfig:
        """Return self, or raise SettingError when ``provider`` cannot be reached as configured.

        Only for runs whose providers are made from this configuration: a
        caller that brings its own providers needs no endpoint.
        """
        if self.provider == "fixture":
            return self
        for name, url in (("base_url", self.base_url), ("sub_base_url", self.sub_base_url)):
            if url and not url.startswith(("http://", "https://")):
                raise SettingError(
                    f"<{name}> must start with http:// or https://, got {redact_url(url)!r}"
                )
            if url and (problem := _unparsable(url)):
                raise SettingError(
                    f"<{name}> is not a URL the HTTP client can use ({problem}), got "
                    f"{redact_url(url)!r}; check its host and port"
                )
            if redacted(url):  # read back from a journal or a saved session
                raise SettingError(
                    f"<{name}> was stored as {url}: the user:password it had are never "
                    f"written down; pass <{name}> again with them"
                )
            if hidden := redacted_params(url):  # a key in the query, likewise
                raise SettingError(
                    f"<{name}> was stored as {url}: the value of {', '.join(hidden)} is never "
                    f"written down; pass <{name}> again with it"
                )
        if not self.model:
            raise SettingError(
                "no model: pass <model=M>, or use <provider=fixture> for the built-in fixture model"
            )
        return self


#: Every setting at its default: what the CLI's flags and ``RLM(...)`` start from.
DEFAULTS = RunConfig()


def public_settings(config: RunConfig) -> dict[str, Any]:
    """``config`` as plain data that may be shown or stored (a trace, a journal, a saved
    session): never the API key, and the base URLs without their ``user:password`` or
    secret query values (``?api_key=***``)."""
    public = {k: v for k, v in asdict(config).items() if k != "api_key"}
    for name in ("base_url", "sub_base_url"):
        if public[name]:
            public[name] = redact_url(public[name])
    return public


def shown_settings(config: RunConfig) -> dict[str, Any]:
    """:func:`public_settings` for what is only shown (a trace's ``run_started``, a repr):
    the cache journal's URL without its credentials too (``postgresql://***@host/db``
    keeps the rest).  A saved session or a volley keeps the cache path as given, to use it
    again."""
    public = public_settings(config)
    if public["cache_path"]:
        public["cache_path"] = redact_url(public["cache_path"])
    return public


def _positive(name: str, value: int) -> None:
    if value <= 0:
        raise SettingError(f"<{name}> must be a positive integer, got {value}")


@functools.cache
def _setting_types() -> dict[str, Any]:
    return typing.get_type_hints(RunConfig)


def _check_types(config: RunConfig) -> None:
    """A value of the wrong type (``max_depth="3"`` from Python, a hand-edited saved
    session) is named here, not met later as a TypeError deep in a run."""
    hints = _setting_types()
    for setting in fields(config):
        value, kind = getattr(config, setting.name), hints[setting.name]
        if not _fits(value, kind):
            raise SettingError(f"<{setting.name}> must be {_spell(kind)}, got {value!r}")


def _fits(value: object, kind: Any) -> bool:
    origin = get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, option) for option in get_args(kind))
    if origin is Literal:
        return value in get_args(kind)
    if origin is tuple:
        (item, _) = get_args(kind)
        return isinstance(value, tuple | list) and all(_fits(v, item) for v in value)
    if kind is type(None):
        return value is None
    if kind is float:  # an int is a fine number of seconds; a bool is not
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _spell(kind: Any) -> str:
    origin = get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_spell(option) for option in get_args(kind))
    if origin is Literal:
        *others, last = (repr(v) for v in get_args(kind))
        return f"{', '.join(others)} or {last}" if others else last
    if origin is tuple:
        return f"a list of {get_args(kind)[0].__name__}"
    names = {type(None): "None", int: "an integer", float: "a number", str: "a string",
             bool: "True or False"}
    return names.get(kind, getattr(kind, "__name__", str(kind)))


def _unparsable(url: str) -> str | None:
    """Why the HTTP client could not send to ``url`` as it is written, or None.

    httpx2 parses the URL only when the first request is built; checked here, a
    bad port or host is a setting error before the run starts, not a failed run.
    """
    import httpx2  # only runs with an HTTP provider get here; they load it anyway

    try:
        parsed = httpx2.URL(url)
    except httpx2.InvalidURL as exc:
        return str(exc)
    return None if parsed.host else "it names no host"
