"""The run's own HTTP client, and a JSON POST that goes below httpx2's client layer.

A sub-query's POST through ``httpx2.AsyncClient.post`` builds and merges its
URL, headers and cookies, walks the auth, redirect and event-hook layers, and
converts the request and response between httpx2's and httpcore2's models:
~0.3 ms of the run's CPU per request (of ~0.9 ms), on the loop that
dispatches a fan-out's other requests and reads their answers.  A provider
on the run's client (:class:`PooledClient`, made by
:func:`rlm.providers._http.make_http_client`) instead builds what httpx2
would send once (:class:`DirectPost`: the same head, the same JSON encoding,
the client's timeouts) and sends each request straight on the client's
:class:`~rlm.providers._pool.ConnectionPool` as one exchange (head and body in,
status, headers and whole body out: no httpcore2 request or response models,
no body iterator; ~0.3 M fewer instructions a request than through the
pool's httpcore2 interface); h11 still speaks HTTP.  The client sets no auth,
redirects, hooks or proxies that this skips; its cookie jar is not used (API
providers need none).  The answer comes back as a :class:`Reply`, the few
things a provider reads of a response, as an ``httpx2.Response`` costs ~0.1 ms
a request to build and read (its headers are searched by lower-casing each
name on every look-up); one whose body is compressed comes back as an
``httpx2.Response``, which decodes it.  A provider
given any other client (say one with ``transport=httpx2.MockTransport(...)``)
posts through it as before; streaming always goes through httpx2's client.

Errors below httpx2 are httpcore2's own: :data:`TIMEOUTS` and
:data:`TRANSPORT_ERRORS` list them for the caller's translation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

import httpcore2
import httpx2

from rlm.providers._pool import ConnectionPool

__all__ = ["TIMEOUTS", "TRANSPORT_ERRORS", "DirectPost", "HTTPReply", "PooledClient", "Reply"]

#: httpcore2's timeouts (httpx2 turns them into ``httpx2.TimeoutException``).
TIMEOUTS = (httpcore2.TimeoutException,)
#: The rest of what httpcore2 raises for a request that did not get an answer.
TRANSPORT_ERRORS = (
    httpcore2.NetworkError,
    httpcore2.ProtocolError,
    httpcore2.ProxyError,
    httpcore2.UnsupportedProtocol,
)


class HTTPReply(Protocol):
    """What the providers read of an HTTP response: an ``httpx2.Response`` or a :class:`Reply`."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


class Reply:
    """A whole, uncompressed response: its status, headers (looked up by lower-case
    name; a repeated one's values joined by ", ", as httpx2 does) and body."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], content: bytes) -> None:
        self.status_code = status
        self.content = content
        found: dict[str, str] = {}
        for raw_name, raw_value in headers:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            found[name] = f"{found[name]}, {value}" if name in found else value
        self.headers: Mapping[str, str] = found

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


class PooledClient(httpx2.AsyncClient):
    """An ``httpx2.AsyncClient`` over ``pool`` whose providers may post on the pool directly."""

    def __init__(self, pool: ConnectionPool, **options: Any) -> None:
        # A client given a transport ignores its own `verify` and `limits`.
        super().__init__(transport=_PoolTransport(pool), **options)
        self.pool = pool


class _PoolTransport(httpx2.AsyncHTTPTransport):
    """httpx2's transport over ``pool``, which serves the same httpcore2 request
    interface as the pool httpx2 would make.  httpx2's ``__init__`` is not run: it
    only makes that pool (and an SSL context for it, ~0.2 ms of the run's start);
    every other method reads ``_pool`` alone."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool  # type: ignore[assignment]


class DirectPost:
    """POSTs JSON to ``url`` with ``headers`` on ``client``'s pool, as ``client.post``
    would send it (see the module docstring); raises httpcore2's errors."""

    def __init__(self, client: PooledClient, url: httpx2.URL, headers: dict[str, str]) -> None:
        # What httpx2 sends for this URL and these headers (Host, its defaults, ours).
        model = client.build_request("POST", url, headers=headers)
        self._head = [
            (name, value) for name, value in model.headers.raw if name.lower() != b"content-length"
        ]
        self._origin = httpcore2.URL(
            scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
        ).origin
        self._target = url.raw_path
        self._timeouts = client.timeout.as_dict()
        self._pool = client.pool

    async def __call__(self, body: dict[str, Any]) -> HTTPReply:
        # httpx2's own JSON encoding (httpx2._content.encode_json), so the bytes are the same.
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        content = data.encode("utf-8")
        status, headers, content = await self._pool.exchange(
            self._origin,
            self._target,
            [*self._head, (b"Content-Length", b"%d" % len(content))],
            content,
            self._timeouts,
        )
        if any(name.lower() == b"content-encoding" for name, _ in headers):
            # httpx2's response decodes the body (gzip, ...) as the client's would.
            return httpx2.Response(status, headers=headers, content=content)
        return Reply(status, headers, content)
