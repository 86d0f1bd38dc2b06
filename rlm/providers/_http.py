"""HTTP plumbing shared by the providers: one client, one error translation.

A run's providers post through one ``httpx2.AsyncClient`` (:func:`make_http_client`),
which :func:`rlm.providers.open.open_providers` opens and closes.  One attempt per
call, no hidden retries: the client's transport retries nothing and the gate decides
what to do with a failure.
Every body is read through a cap (:class:`ResponseLimits`, the setting
``max_response_bytes``): nothing past it is read or kept, whatever the server sends;
and within a time limit (``request_timeout``) for the whole attempt, its response read
to the end, however slowly the server trickles it.
httpx2's exceptions are translated here into :mod:`rlm.errors` types that name
the URL and what came back.  API keys travel only in request headers; they are
never logged and never part of an error message.
"""

from __future__ import annotations

import datetime
import email.utils
import importlib
import json
import math
import os
import re
import socket
import ssl
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx2
import trio

from rlm._config import DEFAULTS, RunConfig
from rlm._sizes import format_size
from rlm._spelling import give_key, key_source, setting
from rlm._text import clean_text
from rlm._url_userinfo import redact_url, redacted
from rlm.errors import (
    AuthenticationError,
    ContextLengthError,
    ProviderConnectionError,
    ProviderResponseError,
    ProviderStatusError,
    ProviderTimeout,
    QuotaExceededError,
    RateLimitError,
)

__all__ = [
    "BAD_SHAPE",
    "ERROR_BODY_BYTES",
    "JSONProvider",
    "ResponseLimits",
    "bad_reply",
    "classify_status",
    "clean_text",
    "client_timeout",
    "count_tokens",
    "endpoint_url",
    "error_detail",
    "finished_within",
    "key_sent",
    "load_http_transport",
    "make_http_client",
    "parse_rate_limit_headers",
    "parse_retry_after",
    "post_json",
    "read_body",
    "send_once",
    "status_error",
    "too_large",
    "translated_errors",
    "unreachable_error",
]

#: What parsing a reply of the wrong shape raises (turned into ``bad_reply``).
BAD_SHAPE = (
    json.JSONDecodeError,
    UnicodeDecodeError,
    KeyError,
    IndexError,
    TypeError,
    AttributeError,
)

_E = TypeVar("_E", bound=BaseException)
_RETRYABLE_STATUS = frozenset({408, 409, 425, 500, 502, 503, 504, 529})
# OpenAI: 429 insufficient_quota; Anthropic: 400 "credit balance is too low".
_OUT_OF_CREDIT = re.compile(r"insufficient_quota|credit balance is too low", re.IGNORECASE)
# How servers say a request does not fit the model's context window: llama.cpp's server
# (both wordings), vLLM and llama-cpp-python ("maximum context length is N tokens"),
# OpenAI (context_length_exceeded), Anthropic ("prompt is too long").
_CONTEXT_OVERFLOW = re.compile(
    r"maximum context length|context_length_exceeded|prompt is too long|"
    r"exceeds? (?:the )?(?:available )?context (?:size|window|length)",
    re.IGNORECASE,
)
_CONTEXT_LIMIT = re.compile(r"maximum context length is (\d+) tokens")
_PROMPT_TOKENS = re.compile(r"\((\d+) in the messages")
_CONNECT_TIMEOUT = 30.0
# An error status's body is read for its message only (a few hundred characters shown).
ERROR_BODY_BYTES = 64 << 10


@dataclass(frozen=True, slots=True)
class ResponseLimits:
    """What one attempt may take of a response: the run settings of the same names.

    ``request_timeout`` bounds the whole attempt, its response read to the end;
    ``stream_idle_timeout`` each wait for the next bytes of a stream;
    ``max_response_bytes`` the body, streamed or whole: nothing past it is read.
    """

    request_timeout: float = DEFAULTS.request_timeout
    stream_idle_timeout: float = DEFAULTS.stream_idle_timeout
    max_response_bytes: int = DEFAULTS.max_response_bytes

    @classmethod
    def of(cls, config: RunConfig) -> ResponseLimits:
        return cls(config.request_timeout, config.stream_idle_timeout, config.max_response_bytes)


@contextmanager
def finished_within(
    url: str, seconds: float, received: Callable[[], str] = lambda: ""
) -> Iterator[None]:
    """Raise a retryable ProviderConnectionError naming ``request_timeout`` when the block
    (an attempt, its response read to the end) takes longer than ``seconds`` on trio's
    clock.  httpx2's own timeouts bound each read, so a server that sends a byte now and
    then would pass every one of them for ever; this bounds the whole.  ``received``
    says what had come by then."""
    try:
        with trio.fail_after(seconds):
            yield
    except trio.TooSlowError as exc:
        name = setting("request_timeout")
        raise ProviderTimeout(
            f"{url} did not finish its response within {seconds:g} s ({name}{received()}); "
            f"raise {name} if this endpoint's answers are really that slow (a local server "
            f"works on one request at a time: lower {setting('max_concurrent')} too)",
            url=url,
            seconds=seconds,
            brief=f"timed out after {seconds:g}s ({name})",
        ) from exc


def load_http_transport() -> None:
    """Import what a run over HTTP uses, so that a caller can load it before the run's
    clock starts: the run's duration then counts the run, not the loading of the HTTP
    stack (httpx2 imports its transport, httpcore2, when the first client is made, and the
    first connection encodes its host name with the ``idna`` codec)."""
    for module in ("httpcore2", "encodings.idna", "rlm.providers.anthropic",
                   "rlm.providers.openai"):
        importlib.import_module(module)


def make_http_client(
    *,
    max_connections: int,
    request_timeout: float,
    transport: httpx2.AsyncBaseTransport | None = None,
    urls: Sequence[str] = (),
) -> httpx2.AsyncClient:
    """The one HTTP client a run's providers share.

    Its pool keeps up to ``max_connections`` connections (one per request the run may
    have in flight) and keeps them all alive between requests.  It follows no
    redirects and makes one attempt per request: retries belong to the gate.  It reads
    the environment as any httpx2 client does: ``HTTP_PROXY``/``HTTPS_PROXY``/
    ``ALL_PROXY``/``NO_PROXY``, and ``SSL_CERT_FILE``/``SSL_CERT_DIR`` for the CA
    bundle.  ``transport`` replaces the network under it (tests pass an
    ``httpx2.MockTransport``); everything above the transport stays the same.

    When every URL it is for (``urls``) is plain ``http://`` and no proxy is set in
    the environment, it never opens a TLS connection: it gets a TLS context that
    trusts no certificate (any TLS connection would fail verification) instead of
    loading the CA bundle, which every run against a local server paid at its start.
    """
    return httpx2.AsyncClient(
        verify=_trusting_nothing() if _plain_http_only(urls) else True,
        timeout=httpx2.Timeout(request_timeout, connect=_CONNECT_TIMEOUT),
        limits=httpx2.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
        follow_redirects=False,
        transport=transport,
    )


_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")


def _plain_http_only(urls: Sequence[str]) -> bool:
    """Whether a client for ``urls`` can never need TLS: all plain http, no proxy set."""
    if not urls or not all(url.lower().startswith("http://") for url in urls):
        return False
    return not any(name in _PROXY_VARIABLES and value for name, value in
                   ((key.lower(), value) for key, value in os.environ.items()))


def _trusting_nothing() -> ssl.SSLContext:
    """A client TLS context that verifies and trusts no certificate authority."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class JSONProvider:
    """What every HTTP provider shares: the run's client, one URL, fixed headers, and the
    limits every response is read under."""

    name = "http"

    def __init__(
        self,
        client: httpx2.AsyncClient,
        url: str,
        headers: dict[str, str],
        limits: ResponseLimits | None = None,
    ) -> None:
        self._client = client
        self.limits = limits or ResponseLimits()
        self._target = httpx2.URL(url)
        self._headers = {"Content-Type": "application/json", **headers}
        if self._target.userinfo:
            # user:password in the URL is Basic auth, as httpx2's client.post makes it
            # (replacing a bearer key); requests go to the URL without them, so no
            # request, error or trace carries them, and errors name it as
            # http://***@host/... (rlm._url_userinfo).
            self._headers["Authorization"] = _basic_authorization(self._target)
            self._target = self._target.copy_with(username=None, password=None)
        self.url = redact_url(url)

    async def aclose(self) -> None:
        """The shared client is closed by its owner, :func:`rlm.providers.open.open_providers`."""

    async def post(self, body: dict[str, Any]) -> httpx2.Response:
        return await post_json(
            self._client, self.url, body, self._headers, limits=self.limits, target=self._target
        )


def _basic_authorization(url: httpx2.URL) -> str:
    """The Authorization header httpx2 sends for ``url``'s user:password."""
    request = httpx2.Request("POST", url)
    return next(httpx2.BasicAuth(url.username, url.password).sync_auth_flow(request)).headers[
        "Authorization"
    ]


async def post_json(
    client: httpx2.AsyncClient,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    *,
    limits: ResponseLimits | None = None,
    target: httpx2.URL | None = None,
) -> httpx2.Response:
    """POST ``body`` once to ``target`` (``url`` when not given; ``url`` is what errors
    name) and read the answer whole, through ``limits``' cap; network failures become
    ProviderConnectionError, error statuses ProviderStatusError subclasses that name
    ``url``, a body past the cap ProviderResponseError."""
    return await send_once(client, "POST", url, headers, limits=limits, target=target,
                           json=body)


async def send_once(
    client: httpx2.AsyncClient,
    method: str,
    url: str,
    headers: dict[str, str],
    *,
    limits: ResponseLimits | None = None,
    target: httpx2.URL | None = None,
    **content: Any,
) -> httpx2.Response:
    """:func:`post_json` for any ``method`` and request ``content`` (httpx2's ``json``,
    ``content``, ``data``, ``files``, ``params``): one attempt, read whole."""
    limits = limits or ResponseLimits()
    with translated_errors(url), finished_within(url, limits.request_timeout):
        async with client.stream(method, target or url, headers=headers, **content) as streamed:
            failed = streamed.status_code >= 400
            cap = ERROR_BODY_BYTES if failed else limits.max_response_bytes
            response = await read_body(streamed, url, cap, keep_head=failed)
    if response.status_code >= 400:
        raise status_error(url, response, key_sent=key_sent(headers))
    return response


@contextmanager
def translated_errors(url: str) -> Iterator[None]:
    """httpx2's exceptions raised in the block, as :mod:`rlm.errors` types naming ``url``:
    timeouts and network failures ProviderConnectionError, a body that cannot be
    decoded ProviderResponseError."""
    try:
        yield
    except httpx2.TimeoutException as exc:
        raise client_timeout(url, exc) from exc
    except httpx2.TransportError as exc:
        raise unreachable_error(url, exc) or ProviderConnectionError(
            f"cannot reach {url}: {reason(exc)} (is the server running, and "
            f"is {setting('base_url')} right?)",
            url=url,
        ) from exc
    except httpx2.DecodingError as exc:  # a compressed body that does not decompress
        raise ProviderResponseError(
            f"{url} sent a body that cannot be decoded: {reason(exc)}", url=url
        ) from exc


async def read_body(
    response: httpx2.Response, url: str, cap: int, *, keep_head: bool = False
) -> httpx2.Response:
    """``response`` read to its end as a whole response, never holding more than ``cap``
    bytes of its body (decoded): past them, :func:`too_large` is raised, or with
    ``keep_head`` (an error's body, read for its message) the first ``cap`` bytes are kept
    and the rest is not read."""
    declared = response.headers.get("content-length", "")
    if not keep_head and declared.isdigit() and int(declared) > cap:
        raise too_large(url, cap, int(declared))
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > cap:
            if not keep_head:
                raise too_large(url, cap)
            del body[cap:]
            break
    headers = response.headers.copy()
    headers.pop("content-encoding", None)  # the body kept is decoded already
    return httpx2.Response(
        response.status_code, headers=headers, content=bytes(body), request=response.request
    )


def client_timeout(url: str, exc: httpx2.TimeoutException) -> ProviderTimeout:
    """The error for one of the HTTP client's own limits (connecting, or a read under
    ``request_timeout``), which can pass before the whole attempt's."""
    kind = type(exc).__name__
    return ProviderTimeout(f"{url} timed out ({kind})", url=url, brief=f"timed out ({kind})")


def too_large(url: str, cap: int, declared: int | None = None) -> ProviderResponseError:
    """The error for a response past ``max_response_bytes`` (``declared``: its announced size)."""
    size = f"larger than {format_size(cap)}" if declared is None else f"of {format_size(declared)}"
    name = setting("max_response_bytes")
    return ProviderResponseError(
        f"{url} sent a response {size}, past {name} ({format_size(cap)}); nothing more of it "
        f"was read. Raise {name} if this endpoint's answers are really that long",
        url=url,
    )


def endpoint_url(base_url: str, path: str) -> str:
    """``base_url`` with ``path`` added to the end of its path; its query (a gateway's
    ``?api-version=...&api_key=...``) and everything else stay as they were.  The path is
    taken still percent-encoded, so that ``%2F`` in it stays one segment."""
    url = httpx2.URL(base_url)
    base_path = url.raw_path.partition(b"?")[0].decode("ascii").rstrip("/")
    return str(url.copy_with(path=base_path + path))


def key_sent(headers: dict[str, str]) -> bool:
    """Whether request ``headers`` carry an API key (so a 401 means it was refused)."""
    return any(name in headers for name in ("Authorization", "x-api-key"))


def reason(exc: BaseException) -> str:
    """What ``exc`` says, or its type's name when it says nothing (many httpx2 errors)."""
    return str(exc) or type(exc).__name__


def unreachable_error(url: str, exc: BaseException) -> ProviderConnectionError | None:
    """A not-retryable error when ``exc`` says no retry can help, else None: the host
    name does not exist, or the server's certificate is not trusted."""
    if _unknown_host(exc):
        return ProviderConnectionError(
            f"cannot reach {url}: the host name {httpx2.URL(url).host!r} does not resolve; "
            f"check {setting('base_url')}",
            url=url,
            retryable=False,
        )
    refused = _cause(exc, ssl.SSLCertVerificationError)
    if refused is not None:
        return ProviderConnectionError(
            f"cannot reach {url}: certificate verify failed ({refused.verify_message or refused}); "
            "set SSL_CERT_FILE to a CA bundle that trusts it",
            url=url,
            retryable=False,
        )
    return None


def _cause(exc: BaseException, kind: type[_E]) -> _E | None:
    """The first exception of ``kind`` in ``exc``'s cause (or context) chain."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
# getaddrinfo's "this name does not exist" (EAI_NONAME, and EAI_NODATA where
# defined); EAI_AGAIN, a resolver that did not answer in time, stays retryable.
_UNKNOWN_HOST_ERRNOS = frozenset(
    code for code in (getattr(socket, "EAI_NONAME", None), getattr(socket, "EAI_NODATA", None))
    if code is not None
)


def _unknown_host(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a DNS answer that the name does not exist."""
    found = _cause(exc, socket.gaierror)
    if found is not None and found.errno in _UNKNOWN_HOST_ERRNOS:
        return True
    return "Name or service not known" in str(exc) or "nodename nor servname" in str(exc)


def bad_reply(url: str, response: httpx2.Response) -> ProviderResponseError:
    """The error for a reply that is not the JSON shape the provider speaks."""
    kind = response.headers.get("content-type", "no content-type")
    return ProviderResponseError(
        f"{url} did not answer with a chat completion (HTTP {response.status_code}, "
        f"{kind}): {response.text[:200]!r}",
        url=url,
    )


def status_error(
    url: str,
    response: httpx2.Response,
    *,
    status: int | None = None,
    detail: str | None = None,
    where: str | None = None,
    key_sent: bool = True,
) -> ProviderStatusError:
    """The error for an HTTP error status (or ``status`` found inside a 200 body).

    ``key_sent`` says whether the request carried a key, so a 401 says either
    "set a key" or "the key was refused".
    """
    status = status or response.status_code
    detail = error_detail(response) if detail is None else detail
    where = where or f"{url} answered HTTP {status}"
    message = (f"{where}: {detail}" if detail else where).rstrip(". ")
    retry_after = parse_retry_after(response.headers)
    return classify_status(url, status, message, response.text, retry_after, key_sent=key_sent)


def classify_status(
    url: str,
    status: int,
    message: str,
    body: str,
    retry_after: float | None = None,
    *,
    key_sent: bool = True,
) -> ProviderStatusError:
    """The error type for ``status`` (``body`` is searched for out-of-credit wording).

    Also used for errors that arrive inside a stream, where there is no
    response body to read, only the error event's text.
    """
    # A provider's message may hold lone surrogates (JSON escapes): every trace,
    # journal and terminal it reaches must be able to write it.
    message = clean_text(message)
    if status == 401:
        advice = _credentials_advice(url, key_sent)
        return AuthenticationError(f"{message}. {advice}", url=url, status=status)
    if status == 403:
        return AuthenticationError(
            f"{message}. {_forbidden_advice(url, key_sent, said=bool(body.strip()))}",
            url=url,
            status=status,
        )
    if status == 402 or (status in (400, 429) and _OUT_OF_CREDIT.search(body)):
        return QuotaExceededError(
            f"{message}. The account is out of credit", url=url, status=status
        )
    if 400 <= status < 500 and _CONTEXT_OVERFLOW.search(f"{message}\n{body}"):
        advice = _context_advice(message)
        return ContextLengthError(f"{message}. {advice}", url=url, status=status)
    if status == 429:
        return RateLimitError(
            message, url=url, status=status, retryable=True, retry_after=retry_after
        )
    return ProviderStatusError(
        message,
        url=url,
        status=status,
        retryable=status in _RETRYABLE_STATUS,
        retry_after=retry_after,
    )


def _context_advice(message: str) -> str:
    """What to change when a request does not fit the model's context window: the output
    cap is named only when the prompt alone fits (as far as the message says)."""
    larger = (
        "give the server a larger context (llama-server: --ctx-size; llama_cpp.server: "
        "--n_ctx), or send fewer characters per sub-query (smaller chunks of the context)"
    )
    limit, prompt = _CONTEXT_LIMIT.search(message), _PROMPT_TOKENS.search(message)
    if limit and prompt and int(prompt[1]) >= int(limit[1]):
        return f"The prompt alone does not fit the model's context window: {larger}"
    return (
        "The prompt and the output cap together do not fit the model's context window: "
        f"lower {setting('max_tokens')} (the cap counts in the window), {larger}"
    )


def _credentials_advice(url: str, key_sent: bool) -> str:
    """What to check when the provider refused the credentials (a 401)."""
    if redacted(url):  # its user:password went as Basic auth, in place of any key
        return (
            "The provider refused the user:password in the base URL (shown as ***@): "
            f"check them, or take them out to send {key_source()} instead"
        )
    if key_sent:
        return (
            f"The provider refused the key: check {key_source()} and that it is valid for "
            "this endpoint"
        )
    return f"No API key was sent: {give_key()}"


def _forbidden_advice(url: str, key_sent: bool, *, said: bool) -> str:
    """A 403 is the server forbidding this request: the credentials may be why, but so
    may a policy, a region or a model the account may not use; what it said (shown
    before this) tells which."""
    why = "its message says why" if said else "it gave no reason"
    if redacted(url):
        sent = "the user:password in the base URL (shown as ***@)"
        fix = f"check them, or take them out to send {key_source()} instead"
    elif key_sent:
        sent = "the key"
        fix = f"check {key_source()}"
    else:
        return (
            f"The server forbade the request ({why}). No API key was sent: if it wants one, "
            f"{give_key()}; else the model, the region or the server's policy is not allowed"
        )
    return (
        f"The server forbade the request ({why}): it may not accept {sent} for it ({fix}), "
        "or not allow this model, region or use whatever the credentials"
    )


def count_tokens(value: object) -> int:
    """A token count from JSON, or 0 when it is missing or not a sane number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if not math.isfinite(value) or value < 0:
        return 0
    return int(value)


def error_detail(response: httpx2.Response) -> str:
    try:
        data = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return response.text[:200].strip()
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:300]
    if isinstance(error, str):
        return error[:300]
    return response.text[:200].strip()


def _header_number(headers: Mapping[str, str], *names: str) -> float | None:
    for name in names:
        raw = headers.get(name)
        if raw:
            try:
                return float(raw)
            except ValueError:
                continue
    return None


def parse_rate_limit_headers(headers: Mapping[str, str]) -> dict[str, float | str]:
    """Per-minute request and token limits announced by the provider, if any, and
    how many requests it would take now (``requests_remaining``).

    Understands OpenAI-style ``x-ratelimit-limit-*`` / ``x-ratelimit-remaining-requests``
    and Anthropic-style ``anthropic-ratelimit-*-limit`` /
    ``anthropic-ratelimit-requests-remaining`` headers.
    """
    found: dict[str, float | str] = {}
    requests = _header_number(
        headers, "x-ratelimit-limit-requests", "anthropic-ratelimit-requests-limit"
    )
    tokens = _header_number(headers, "x-ratelimit-limit-tokens", "anthropic-ratelimit-tokens-limit")
    remaining = _header_number(
        headers, "x-ratelimit-remaining-requests", "anthropic-ratelimit-requests-remaining"
    )
    if requests:
        found["requests_limit"] = requests
        if remaining is not None and math.isfinite(remaining) and remaining >= 0:
            found["requests_remaining"] = remaining
    if tokens:
        found["tokens_limit"] = tokens
    if found:
        found["source"] = "headers"
    return found


def parse_retry_after(
    headers: Mapping[str, str], now: Callable[[], float] = time.time
) -> float | None:
    """Seconds to wait from ``retry-after-ms``, or ``retry-after`` in seconds or as an
    HTTP date (RFC 9110; ``now`` is the wall clock it is measured from)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            seconds = float(raw_ms) / 1000.0
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds):
            return max(0.0, seconds)
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:  # an HTTP date is GMT; an obsolete form may omit the zone
            when = when.replace(tzinfo=datetime.UTC)
        seconds = when.timestamp() - now()
    return max(0.0, seconds) if math.isfinite(seconds) else None
