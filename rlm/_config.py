"""The settings table: every setting of rlm, declared once.

Each setting is a field below, declared with :func:`rlm._settings.setting`:
its name, type and default are the field's; its help, flag, environment
variable, parser, bounds and the commands that offer it as a flag are the
rest of its row.  :class:`RunConfig` holds one run's settings (``rlm run``,
``RLM(...)``, each question of a session, each task of a volley),
:class:`SessionOptions` a session's, :class:`VolleyOptions` a volley's.
Everything else (click options, ``RLM``'s keyword arguments, config files,
``rlm config show``, ``docs/settings.md``) is made from these rows: see
``rlm/_settings.py``.

Errors name settings through :class:`rlm.errors.SettingError`, so the Python
API says ``max_depth`` and the CLI says ``--max-depth``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Literal, get_args

from rlm._durations import parse_duration
from rlm._settings import (
    Setting,
    check_fields,
    lifted,
    positive,
    setting,
    settings_of,
    whole,
)
from rlm._sizes import parse_size
from rlm._url_userinfo import redact_url, redacted, redacted_params
from rlm.errors import SettingError, UsageError

__all__ = [
    "DEFAULTS",
    "DEFAULT_MAX_CONTEXT_BYTES",
    "DEFAULT_MAX_HISTORY_CHARS",
    "DEFAULT_MAX_LLM_CALLS",
    "DEFAULT_MAX_REPLY_CHARS",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_SANDBOX_MEMORY",
    "DEFAULT_STALE_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "PROVIDERS",
    "SETTINGS",
    "CacheMode",
    "EvalOptions",
    "ProviderName",
    "RunConfig",
    "SessionOptions",
    "TraceContent",
    "VolleyMode",
    "VolleyOptions",
    "check_sub_endpoint",
    "public_settings",
    "shown_settings",
]

ProviderName = Literal["openai", "anthropic", "fixture"]
#: Every provider, in the order help texts list them.
PROVIDERS: tuple[ProviderName, ...] = get_args(ProviderName)
#: What the trace file keeps: ``full`` content (prompts, replies, code, outputs) or ``meta``
#: (sizes and timings only, for sensitive inputs).
TraceContent = Literal["full", "meta"]
CacheMode = Literal["read-write", "read-only", "refresh"]
#: A volley's tasks: one completion each, or (``rlm``) a whole RLM call each.
VolleyMode = Literal["completion", "rlm"]

# Bounded by default: ceilings a normal analysis never reaches but a runaway loop does.
# 5,000 requests is several batched passes over thousands of chunks (a long analysis
# makes tens to hundreds); at sub-model prices it stays in the dollars, not hundreds of
# them.  An hour is many times a long run, short enough that nobody leaves one paying
# overnight.  ``None`` (``none`` on the command line) lifts either.
DEFAULT_MAX_LLM_CALLS = 5_000
DEFAULT_TIMEOUT = 3600.0
#: Address space of one sandbox: room for a context of a few hundred MB and its copies.
DEFAULT_SANDBOX_MEMORY = 2 << 30
#: The largest context read: a few hundred MB fit a sandbox of the default size with room.
DEFAULT_MAX_CONTEXT_BYTES = 512 << 20
#: Past this many characters of conversation, a session's older steps are compacted.
DEFAULT_MAX_HISTORY_CHARS = 200_000
#: Bytes of one HTTP response: many times a long reply, streamed (each token of a stream
#: comes wrapped in an event of a few hundred bytes), far from what fills memory.
DEFAULT_MAX_RESPONSE_BYTES = 8 << 20
#: Characters of one reply kept in the conversation, which every later step sends again.
DEFAULT_MAX_REPLY_CHARS = 100_000
#: Output tokens per request: far more than a step's code or a sub-query's answer, and a
#: bound on a reply that runs on (a small local model can write pages of newlines until
#: its context is full).
DEFAULT_MAX_TOKENS = 4_096
#: A volley task whose worker sent no heartbeat for this long is reopened for others.
DEFAULT_STALE_TIMEOUT = 600.0

# Which commands offer a setting as a flag.  Every setting of a command's scopes applies
# to it all the same from the environment, a profile or a config file.
_RUN = ("run", "chat", "mcp")  # `rlm mcp` runs as `rlm run` does, per tool call
_VOLLEY = ("volley", "volley create")
_WORK = ("volley work",)
_EVAL = ("eval",)  # an eval is a volley: it takes a volley's flags where they apply
_SEND = (*_RUN, *_VOLLEY, *_WORK, *_EVAL)  # where and how to send: every command that sends
_VOLLEY_DEFAULT = ("volley", "volley create", "volley work", *_EVAL)


def _duration(text: str) -> float:
    try:
        return parse_duration(text, "the value")
    except UsageError as exc:
        raise ValueError(str(exc)) from None


def _size(text: str) -> int:
    return parse_size(text)


def _layers(text: str) -> tuple[str, ...]:
    from rlm._sandbox.isolation import parse_layers  # the sandbox package: only when asked

    return parse_layers(text)


def _tiers(text: str) -> tuple[int, ...]:
    from rlm.eval.items import parse_tiers  # the eval package: only when asked

    return parse_tiers(text)


def _memory(name: str, value: Any) -> None:
    if value < _MIN_SANDBOX_MEMORY:
        raise SettingError(f"<{name}> must be at least 256 MiB, got {value:,} bytes")
    if value > 1 << 40:
        raise SettingError(f"<{name}> must be at most 1 TiB, got {value:,} bytes")


def _otel_installed(name: str, value: Any) -> None:
    if not value:
        return
    from rlm._otel import otel_missing  # found, not imported: the SDK loads only to export

    if (missing := otel_missing()) is not None:
        raise SettingError(f"<{name}> needs the OpenTelemetry SDK and its OTLP exporter "
                           f"({missing} is not installed): pip install 'rlm[otel]'")


_MIN_SANDBOX_MEMORY = 256 << 20  # below this a sandbox cannot even import its own package
_DAY = 86_400.0
_TOKENS = 10**13


@dataclass(frozen=True)
class RunConfig:
    """Everything one run needs to know.  ``validate()`` names the offending setting.

    ``api_key`` is held here (never logged, never sent to a sandbox, never stored);
    the CLI reads it from ``RLM_API_KEY`` / ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``,
    never from argv.
    """

    SCOPE: ClassVar[str] = "run"

    model: str = setting(
        "fixture", "Root model (in a volley, every task's). The default is the fixture "
        "model's name: with provider openai or anthropic, name one.",
        commands=_SEND, env="RLM_MODEL", metavar="NAME", shown="",
    )
    base_url: str | None = setting(
        None, "Endpoint (default: OpenAI's or Anthropic's, by provider); user:password@ in "
        "it is sent as HTTP Basic auth and shown nowhere.",
        commands=(*_SEND, "volley cancel"), env="RLM_BASE_URL", metavar="URL",
    )
    sub_model: str | None = setting(
        None, "Model for sub-queries and child calls (default: the root's model).",
        commands=_SEND, metavar="NAME",
    )
    sub_base_url: str | None = setting(
        None, "Endpoint for sub-queries and child calls (default: base URL).",
        commands=_SEND, metavar="URL",
    )
    provider: ProviderName = setting(
        "openai", "openai: any OpenAI-compatible endpoint; anthropic: the Messages API; "
        "fixture: the built-in scripted model, no key needed.",
        commands=_SEND, env="RLM_PROVIDER",
    )
    api_key: str | None = setting(
        None, "Read by the command line from RLM_API_KEY (or OPENAI_API_KEY / "
        "ANTHROPIC_API_KEY), never from argv; never logged, stored or sent to a sandbox.",
        secret=True,
    )
    max_depth: int = setting(
        1, "Depth of the call tree: 1 makes every llm_query a one-shot sub-query; 2 makes "
        "sub-calls child RLM calls with their own sandbox.",
        commands=_SEND, check=whole(1, 16),
    )
    max_iterations: int = setting(
        20, "Steps per call before it is asked for its final answer.",
        commands=_SEND, check=whole(1, 1_000),
    )
    max_concurrent: int = setting(
        8, "LLM requests in flight at once, all lanes together (in a volley: for every "
        "worker on its journal together).",
        commands=_SEND, check=whole(1, 4_096), defaults=dict.fromkeys(_VOLLEY_DEFAULT, 16),
    )
    root_permits: int = setting(
        1, "Permits reserved for root steps, so sub-queries never stall them.",
        commands=_RUN, check=whole(0, 4_095),
    )
    timeout: float | None = setting(
        DEFAULT_TIMEOUT, "Wall-clock limit of the whole run (in a volley, of each task; a "
        "task's own timeout wins): 90, 30s, 5m, 2h; none lifts it.",
        commands=_SEND, parse=lifted(_duration), metavar="DURATION|none",
        check=positive("seconds", 30 * _DAY),
    )
    exec_timeout: float = setting(
        60.0, "Limit for one code execution in the sandbox; waiting for served llm_query "
        "answers does not count, calls the budget refused do.",
        commands=_SEND, parse=_duration, metavar="DURATION", check=positive("seconds", _DAY),
    )
    max_output_chars: int = setting(
        20_000, "Printed output shown to the model per code block.",
        commands=_SEND, check=whole(1, 4_000_000),
    )
    max_reply_chars: int = setting(
        DEFAULT_MAX_REPLY_CHARS, "Characters of one model reply kept in its call's "
        "conversation; the rest is cut, with a note the model reads (its code still runs "
        "whole).", commands=_SEND, check=whole(1_000, 100_000_000),
    )
    max_tokens: int | None = setting(
        DEFAULT_MAX_TOKENS, "Output tokens per request, sent to the provider: a bound on a "
        "reply that runs on (a reasoning model's thinking counts in it); none sends no cap.",
        commands=_SEND, metavar="N|none", check=whole(1, 10_000_000),
    )
    context_window: int | None = setting(
        None, "Tokens the model takes, prompt and answer together: a completion task "
        "estimated longer (four characters a token) fails without being sent, never cut; "
        "one that fits has its max_tokens lowered to the room left (an eval's direct arm: "
        "default from the price table's context_window).",
        commands=(*_VOLLEY, *_EVAL), metavar="N|none", check=whole(1, 100_000_000),
    )
    request_timeout: float = setting(
        600.0, "Limit for one HTTP attempt, its whole response included.",
        commands=_SEND, parse=_duration, metavar="DURATION", check=positive("seconds", _DAY),
    )
    stream_idle_timeout: float = setting(
        60.0, "A streamed reply with no bytes for this long fails its attempt.",
        commands=_SEND, parse=_duration, metavar="DURATION", check=positive("seconds", _DAY),
    )
    max_response_bytes: int = setting(
        DEFAULT_MAX_RESPONSE_BYTES, "Bytes one HTTP response may have, streamed or whole "
        "(8MiB, 512KiB, bytes); a longer one fails its request, and nothing past it is read.",
        commands=_SEND, parse=_size, metavar="SIZE", check=whole(64 << 10, 1 << 30), shown="8MiB",
    )
    stream: bool = setting(
        False, "Stream every step and run its code blocks as they close, even with no live "
        "consumer (the commands' --stream also shows the text).",
    )
    max_llm_calls: int | None = setting(
        DEFAULT_MAX_LLM_CALLS, "Requests sent to providers, retries and batch items included: "
        "a ceiling a normal analysis never reaches but a runaway loop does; none lifts it.",
        commands=_SEND, metavar="N|none", check=whole(1, 10**9),
        defaults=dict.fromkeys(_VOLLEY_DEFAULT, None),
    )
    max_input_tokens: int | None = setting(
        None, "Input tokens for the whole run.",
        commands=_SEND, metavar="N|none", check=whole(1, _TOKENS),
    )
    max_output_tokens: int | None = setting(
        None, "Output tokens for the whole run.",
        commands=_SEND, metavar="N|none", check=whole(1, _TOKENS),
    )
    max_total_tokens: int | None = setting(
        None, "Input + output tokens for the whole run.",
        commands=_SEND, metavar="N|none", check=whole(1, _TOKENS),
    )
    max_cost: float | None = setting(
        None, "USD for the whole run (prices from rlm/data/prices.json, or --prices).",
        commands=_SEND, metavar="USD|none", check=positive("USD", 1e6),
    )
    prices_path: str | None = setting(
        None, "JSON price table (model: input/output/cached_input USD per token) on top of "
        "ours.", commands=_SEND, flag="--prices", metavar="PATH",
    )
    rpm: float | None = setting(
        None, "Requests per minute the provider allows (paced with a margin; a rate 429 "
        "slows the pace).", commands=_SEND, metavar="N|none", check=positive("per minute", 1e7),
    )
    tpm: float | None = setting(
        None, "Tokens per minute the provider allows.",
        commands=_SEND, metavar="N|none", check=positive("per minute", 1e11),
    )
    burst: int = setting(
        1, "Requests that may go back to back before rpm spacing applies.",
        commands=_SEND, check=whole(1, 10_000),
    )
    max_retries: int = setting(
        3, "Retries per request (429, 5xx, network); Retry-After is honoured.",
        commands=_SEND, check=whole(0, 100),
    )
    retry_delay: float = setting(
        0.5, "The first retry waits a random time up to this (full jitter), doubling per "
        "retry up to 30 s; a provider's Retry-After wins.", commands=_SEND, parse=_duration,
        metavar="DURATION", check=positive("seconds", 600.0),
    )
    adaptive: bool = setting(
        True, "Shrink sub-query concurrency when the provider pushes back; grow it back after.",
        commands=_SEND, flag="--adapt", off_flag="--no-adapt",
    )
    auto_batch: bool = setting(
        True, "Run a sequential loop's independent llm_query calls concurrently (its "
        "meaning kept; at most one window of sub slots sent ahead); --no-auto-batch runs "
        "each call when the code reaches it.",
        commands=_SEND, flag="--auto-batch", off_flag="--no-auto-batch",
    )
    require_isolation: tuple[str, ...] = setting(
        (), "Refuse to run unless these sandbox layers are active ('all'; see `rlm doctor`).",
        commands=(*_RUN, *_VOLLEY, *_EVAL), parse=_layers, metavar="LAYER,...",
    )
    cache_path: str | None = setting(
        None, "Replay answers to identical requests from this journal (a file, or a "
        "postgresql:// URL) and store new ones: a re-run sends nothing.",
        commands=(*_RUN, *_EVAL), flag="--cache", metavar="PATH",
    )
    trace_content: TraceContent = setting(
        "full", "full: the trace keeps prompts, replies, code and outputs (`rlm view` shows "
        "them); meta: sizes and timings only, for sensitive inputs.", commands=_SEND,
    )
    otel: bool = setting(
        False, "Export each run, volley or chat session as one OpenTelemetry trace over "
        "OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318; the SDK's "
        "other OTEL_* variables apply); prompts and replies are in it only with "
        "--trace-content full. Needs pip install 'rlm[otel]' (docs/otel.md).",
        commands=_SEND, env="RLM_OTEL", off_flag="--no-otel", check=_otel_installed,
    )
    cache_mode: CacheMode = setting(
        "read-write", "read-only: replay, never store; refresh: never replay, store what is "
        "sent.", commands=(*_RUN, *_EVAL),
    )
    max_context_bytes: int = setting(
        DEFAULT_MAX_CONTEXT_BYTES, "The context's size, all files together (2GiB, 512MiB, "
        "bytes): a larger one is refused before it is read (from Python, its length in "
        "characters is held to it).",
        commands=(*_RUN, *_VOLLEY, *_EVAL), parse=_size, metavar="SIZE",
        check=whole(1, 1 << 40),
        shown="512MiB",
    )
    sandbox_memory: int = setting(
        DEFAULT_SANDBOX_MEMORY, "Memory of one sandbox (2GiB, 512MiB, bytes).",
        commands=(*_RUN, *_VOLLEY, *_EVAL), parse=_size, metavar="SIZE", check=_memory,
        shown="2GiB",
    )

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

    @property
    def over_http(self) -> bool:
        """Whether a request goes over HTTP: every one, unless the provider is the fixture
        model; then sub-queries only, when ``sub_base_url`` names an endpoint for them."""
        return self.provider != "fixture" or self.sub_base_url is not None

    def validate(self) -> RunConfig:
        """Return self, or raise SettingError naming the setting that is wrong."""
        check_fields(self)
        if self.root_permits >= self.max_concurrent:
            raise SettingError(
                f"<root_permits> ({self.root_permits}) must be less than <max_concurrent> "
                f"({self.max_concurrent}), or sub-queries could never run"
            )
        return self

    def validate_endpoint(self) -> RunConfig:
        """Return self, or raise SettingError when ``provider`` cannot be reached as configured.

        Only for runs whose providers are made from this configuration: a
        caller that brings its own providers needs no endpoint.
        """
        if not self.over_http:
            return self
        urls: tuple[tuple[str, str | None], ...] = (
            ("base_url", self.base_url), ("sub_base_url", self.sub_base_url)
        )
        if self.provider == "fixture":
            if not self.sub_model:
                raise SettingError(
                    "<sub_base_url> with <provider=fixture> sends every sub-query to that "
                    "endpoint (the fixture writes the root's steps): name the model it serves "
                    "with <sub_model>"
                )
            urls = urls[1:]  # the root is the fixture: base_url is not used
        for name, url in urls:
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


@dataclass(frozen=True)
class SessionOptions:
    """A session's own settings (``RLM(...).session(context, **options)``, ``rlm chat``).

    Each question is still bounded by the run settings, as one run is.
    """

    SCOPE: ClassVar[str] = "session"

    max_history_chars: int | None = setting(
        DEFAULT_MAX_HISTORY_CHARS, "Past this many characters of conversation, older steps "
        "are summarised by the root model before the next question (the REPL's variables "
        "stay); none never compacts.",
        commands=("chat",), metavar="N|none", check=whole(1_000, 10**9),
    )
    max_total_llm_calls: int | None = setting(
        None, "Requests for the whole session, every question together.",
        commands=("chat",), metavar="N|none", check=whole(1, 10**9),
    )
    max_total_cost: float | None = setting(
        None, "USD for the whole session, every question together.",
        commands=("chat",), metavar="USD|none", check=positive("USD", 1e6),
    )

    def validate(self) -> SessionOptions:
        check_fields(self)
        return self


@dataclass(frozen=True)
class VolleyOptions:
    """A volley's own settings (``RLM(...).volley(tasks, **options)``, ``rlm volley``).

    Each task is bounded by the run settings as one run is (``timeout`` is each
    task's); ``max_concurrent``, ``rpm`` and ``tpm`` are the volley's, shared by
    every worker on its journal.
    """

    SCOPE: ClassVar[str] = "volley"

    mode: VolleyMode = setting(
        "completion", "Run each task as a whole RLM call over the shared context (its own "
        "sandbox, llm_query_batched, FINAL); the context is loaded once for all.",
        commands=_VOLLEY, flag="--rlm", switch="rlm",
    )
    cache_warm: bool = setting(
        True, "Send the first task alone when the shared prefix is long enough to be cached, "
        "then fan out reading the provider's prompt cache.",
        commands=_VOLLEY, flag="--cache-warm", off_flag="--no-cache-warm",
    )
    window: int | None = setting(
        None, "Tasks claimed at once (default: twice max_concurrent; max_concurrent for rlm "
        "tasks, each of which holds a sandbox).", check=whole(1, 100_000),
    )
    journal: str | None = setting(
        None, "The journal: a SQLite file, or postgresql://... for workers on several "
        "machines (default: journal.sqlite3 in your state directory).",
        commands=(*_VOLLEY, *_WORK, "volley list", "volley show", "volley cancel",
                  "volley watch", *_EVAL,
                  "eval show", "eval compare"), env="RLM_JOURNAL",
        metavar="PATH|URL",
    )
    stale_timeout: float = setting(
        DEFAULT_STALE_TIMEOUT, "Reopen a task whose worker sent no heartbeat for this long "
        "(90s, 10m, 2h; at least 1s).", commands=("volley", *_WORK, *_EVAL), parse=_duration,
        metavar="DURATION", check=positive("seconds", 7 * _DAY),
    )

    batch_api: bool = setting(
        False, "Send the tasks through the provider's batch service (OpenAI's Batch API, "
        "Anthropic's Message Batches): about half the price, answered within 24 h; "
        "--resume collects them after any stop. Not for --rlm tasks.",
        commands=_VOLLEY, flag="--batch-api", off_flag="--no-batch-api",
    )
    retry_live: bool = setting(
        False, "With --batch-api: once the batches have ended, run the tasks they failed "
        "(errored, expired, cancelled) again as live requests.",
        commands=("volley", *_WORK), flag="--retry-live", off_flag="--no-retry-live",
    )
    batch_poll: float = setting(
        30.0, "With --batch-api: the first wait between two looks at a batch's status; each "
        "wait is half as long again as the last, up to 12 times this (a Retry-After wins).",
        commands=(*_VOLLEY, *_WORK), parse=_duration, metavar="DURATION",
        check=positive("seconds", _DAY),
    )
    batch_size: int | None = setting(
        None, "With --batch-api: the most tasks in one provider batch (default: the "
        "provider's limit, 50,000 for OpenAI, 100,000 for Anthropic); a larger volley is "
        "split.", commands=_VOLLEY, metavar="N|none", check=whole(1, 100_000),
    )

    def validate(self) -> VolleyOptions:
        check_fields(self)
        if self.batch_api and self.mode == "rlm":
            raise SettingError(
                "<batch_api> cannot send RLM tasks (<mode>): each is many requests, each "
                "waiting on the one before, which a provider batch cannot hold; run them "
                "live (without <batch_api>)"
            )
        if self.stale_timeout < 1.0:
            raise SettingError(
                f"<stale_timeout> must be at least 1s, got {self.stale_timeout:g} s: workers "
                "heartbeat every quarter of it, so a shorter one would reopen tasks whose "
                "workers are alive and run them twice"
            )
        return self

    def stored(self) -> dict[str, Any]:
        """What a journal keeps of these options (not where the journal is)."""
        return {k: v for k, v in asdict(self).items() if k != "journal"}


@dataclass(frozen=True)
class EvalOptions:
    """An eval's own settings (``rlm eval``): the dataset a generator makes, and scoring.

    Its arms run as tasks of one volley, each bounded by the run settings.
    """

    SCOPE: ClassVar[str] = "eval"

    tiers: tuple[int, ...] = setting(
        (2_000, 20_000, 200_000), "Context sizes in characters (2k, 200k, 1M): a generated "
        "dataset makes its items at each, and a report groups items by them.",
        commands=_EVAL, parse=_tiers, metavar="SIZE,...", shown="2k,20k,200k",
    )
    per_tier: int = setting(
        20, "Items a generated dataset makes at each tier.", commands=_EVAL,
        check=whole(1, 100_000),
    )
    seed: int = setting(
        1, "Seed of a generated dataset (the same seed, the same items).", commands=_EVAL,
        check=whole(0, 2**31),
    )
    scorer: str = setting(
        "exact", "How an output is scored when its item names no scorer: exact, contains, "
        "numeric[:TOLERANCE], regex, set_f1, judge, or module:function (your own).",
        commands=(*_EVAL, "eval show"), metavar="NAME",
    )
    judge_model: str | None = setting(
        None, "The judge scorer's model (default: the eval's model); its verdicts are kept in "
        "the journal, so a report read again pays for none.",
        commands=(*_EVAL, "eval show"), metavar="NAME",
    )
    judge_prompt: str | None = setting(
        None, "A file with the judge's prompt, {question}, {answer} and {expected} filled in "
        "(default: rlm's).", commands=(*_EVAL, "eval show"), metavar="PATH",
    )

    def validate(self) -> EvalOptions:
        check_fields(self)
        return self


#: The whole table, in the order docs and ``--help`` list it.
SETTINGS: tuple[Setting, ...] = (
    *settings_of(RunConfig), *settings_of(SessionOptions), *settings_of(VolleyOptions),
    *settings_of(EvalOptions),
)

#: Every setting at its default: what the CLI's flags and ``RLM(...)`` start from.
DEFAULTS = RunConfig()


def check_sub_endpoint(config: RunConfig, options: VolleyOptions) -> None:
    """Raise SettingError for a volley of completions with the fixture as its provider and
    a real ``sub_base_url``: that pairing scripts the root of RLM calls, and a completion
    task has no root step and no sub-query."""
    if config.provider == "fixture" and config.over_http and options.mode != "rlm":
        raise SettingError(
            "<sub_base_url> with <provider=fixture> pairs the scripted root with a real "
            "sub-model, and only whole RLM calls make sub-queries: run the tasks as RLM "
            '(rlm volley --rlm; mode="rlm" from Python), or give the endpoint as <base_url> '
            "with <provider=openai> for plain completions"
        )


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
