"""One HTTP/1.1 connection of the run's pool, spoken by h11 over httpcore2's network layer.

httpcore2's ``AsyncHTTPConnection`` wraps an ``AsyncHTTP11Connection``: each
request takes two trio locks (two checkpoints), opens four ``Trace`` async
context managers, and reads its body through two async generators.  A
sub-query fan-out pays that per request on the loop that dispatches the
others (~0.3 ms of the run's CPU a request here, of ~0.9).  This connection
does the same exchange directly: it is dialled on its first request through
the pool's network backend (so pre-opened and one-write connections,
:mod:`rlm.providers._warm` and :mod:`rlm.providers._one_write`, work as
before; TLS with the pool's SSL context and ALPN ``http/1.1`` for https),
then serves one request at a time.

What the pool relies on, as httpcore2's connection does it: the request's
timeouts (``connect``, ``write``, ``read``) bound each network operation and
raise httpcore2's timeout errors; a write that fails is left to the read,
which reports what the server said or that it is gone; a server that closes
without answering is ``httpcore2.RemoteProtocolError``, as is a malformed
answer.  After a response read to its end the connection is idle until
``keepalive_expiry`` passes; a request that fails or is cancelled, or a
response closed before its end, closes it.
"""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from typing import Literal

import h11
import httpcore2
import httpx2
import trio
from httpcore2._models import ByteStream

__all__ = ["H11Connection"]

_READ_BYTES = 64 * 1024
_MAX_INCOMPLETE_EVENT_SIZE = 100 * 1024  # as httpcore2's

_State = Literal["new", "active", "idle", "closed"]


class H11Connection:
    """See the module docstring.  The pool hands it one request at a time."""

    def __init__(
        self,
        origin: httpcore2.Origin,
        *,
        ssl_context: ssl.SSLContext | None,
        keepalive_expiry: float | None,
        network_backend: httpcore2.AsyncNetworkBackend,
    ) -> None:
        self.origin = origin
        self._ssl_context = ssl_context
        self._keepalive_expiry = keepalive_expiry
        self._network = network_backend
        self._stream: httpcore2.AsyncNetworkStream | None = None
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_INCOMPLETE_EVENT_SIZE)
        self._state: _State = "new"
        self._expire_at: float | None = None

    def is_idle(self) -> bool:
        return self._state == "idle"

    def is_closed(self) -> bool:
        return self._state == "closed"

    def has_expired(self) -> bool:
        """Whether an idle connection is past its keep-alive or the server closed it
        (an idle connection whose socket reads is at EOF: nothing else may come)."""
        if self._expire_at is not None and time.monotonic() > self._expire_at:
            return True
        return (
            self._state == "idle"
            and self._stream is not None
            and bool(self._stream.get_extra_info("is_readable"))
        )

    async def handle_async_request(self, request: httpcore2.Request) -> httpcore2.Response:
        self._begin()
        timeouts = request.extensions.get("timeout", {})
        try:
            stream = self._stream
            if stream is None:
                stream = self._stream = await self._connect(request, timeouts.get("connect"))
            await self._send(stream, request, timeouts.get("write"))
            head = await self._receive_head(stream, timeouts.get("read"))
        except BaseException:
            await self.aclose()
            raise
        return httpcore2.Response(
            status=head.status_code,
            headers=head.headers.raw_items(),
            content=_Body(self, stream, timeouts.get("read")),
            extensions={
                "http_version": b"HTTP/" + head.http_version,
                "reason_phrase": head.reason,
                "network_stream": stream,
            },
        )

    async def _connect(
        self, request: httpcore2.Request | None, timeout: float | None  # noqa: ASYNC109
    ) -> httpcore2.AsyncNetworkStream:
        host = self.origin.host.decode("ascii")
        stream = await self._network.connect_tcp(
            host=host, port=self.origin.port, timeout=timeout, local_address=None,
            socket_options=None,
        )
        if self.origin.scheme != b"https":
            return stream
        try:
            context = self._ssl_context or httpx2.create_ssl_context()
            context.set_alpn_protocols(["http/1.1"])
            sni = request.extensions.get("sni_hostname") if request is not None else None
            return await stream.start_tls(context, server_hostname=sni or host, timeout=timeout)
        except BaseException:
            with trio.CancelScope(shield=True):
                await stream.aclose()
            raise

    async def exchange(
        self, target: bytes, headers: list[tuple[bytes, bytes]], content: bytes,
        timeouts: Mapping[str, float | None],
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """POST ``content`` to ``target`` and read the whole answer: its status, headers
        and body.  The direct POST's path (:mod:`rlm.providers._direct`): the same
        exchange as :meth:`handle_async_request` without httpcore2's request and
        response models or a body iterator.  The connection is idle again after it,
        or closed if it failed or was cancelled."""
        self._begin()
        try:
            stream = self._stream
            if stream is None:
                stream = self._stream = await self._connect(None, timeouts.get("connect"))
            await self._send_whole(
                stream, _request_event(b"POST", target, headers), content, timeouts.get("write")
            )
            read = timeouts.get("read")
            head = await self._receive_head(stream, read)
            body: list[bytes] = []
            while True:
                event = await self._next_event(stream, read)
                if isinstance(event, h11.Data):
                    body.append(event.data)
                elif isinstance(event, h11.EndOfMessage) or event is h11.PAUSED:
                    break
        except BaseException:
            await self.aclose()
            raise
        await self._response_closed()
        return head.status_code, head.headers.raw_items(), b"".join(body)

    def _begin(self) -> None:
        if self._state not in ("new", "idle"):
            raise httpcore2.ConnectionNotAvailable()
        self._state = "active"
        self._expire_at = None

    async def _send_whole(
        self, stream: httpcore2.AsyncNetworkStream, event: h11.Request, content: bytes,
        timeout: float | None,  # noqa: ASYNC109
    ) -> None:
        """The request's head and whole body in one write."""
        # As httpcore2: a server may close early and still answer (say a 413); the
        # read that follows says which.
        with contextlib.suppress(httpcore2.WriteError):
            await stream.write(
                (self._h11.send(event) or b"")
                + (self._h11.send(h11.Data(data=content)) if content else b"")
                + (self._h11.send(h11.EndOfMessage()) or b""),
                timeout,
            )

    async def _send(
        self, stream: httpcore2.AsyncNetworkStream, request: httpcore2.Request,
        timeout: float | None,  # noqa: ASYNC109
    ) -> None:
        event = _request_event(request.method, request.url.target, request.headers)
        body = request.stream
        if isinstance(body, ByteStream):  # a whole body: one write
            await self._send_whole(stream, event, body._content, timeout)
            return
        with contextlib.suppress(httpcore2.WriteError):  # as in _send_whole
            await stream.write(self._h11.send(event) or b"", timeout)
            async for chunk in body:  # type: ignore[union-attr]
                if chunk:
                    await stream.write(self._h11.send(h11.Data(data=chunk)) or b"", timeout)
            await stream.write(self._h11.send(h11.EndOfMessage()) or b"", timeout)

    async def _receive_head(
        self, stream: httpcore2.AsyncNetworkStream, timeout: float | None  # noqa: ASYNC109
    ) -> h11.Response:
        while True:
            event = await self._next_event(stream, timeout)
            if isinstance(event, h11.Response):
                return event
            # An informational answer (100 Continue, 103 Early Hints): the real one follows.

    async def _next_event(
        self, stream: httpcore2.AsyncNetworkStream, timeout: float | None  # noqa: ASYNC109
    ) -> h11.Event | type[h11.PAUSED]:
        state = self._h11
        while True:
            try:
                event = state.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpcore2.RemoteProtocolError(exc) from exc
            if event is not h11.NEED_DATA:
                return event  # type: ignore[return-value]
            data = await stream.read(_READ_BYTES, timeout)
            if not data and state.their_state is h11.SEND_RESPONSE:
                raise httpcore2.RemoteProtocolError(
                    "Server disconnected without sending a response."
                )
            state.receive_data(data)

    async def _response_closed(self) -> None:
        """Idle again when the exchange is complete; otherwise closed."""
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
            self._state = "idle"
            if self._keepalive_expiry is not None:
                self._expire_at = time.monotonic() + self._keepalive_expiry
        else:
            await self.aclose()

    async def aclose(self) -> None:
        self._state = "closed"
        stream, self._stream = self._stream, None
        if stream is not None:
            with trio.CancelScope(shield=True):
                await stream.aclose()


def _request_event(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]]) -> h11.Request:
    try:
        return h11.Request(method=method, target=target, headers=headers)
    except h11.LocalProtocolError as exc:
        raise httpcore2.LocalProtocolError(exc) from exc


class _Body:
    """A response's body, read as it is iterated; closing it ends the exchange."""

    def __init__(
        self, connection: H11Connection, stream: httpcore2.AsyncNetworkStream,
        timeout: float | None,
    ) -> None:
        self._connection = connection
        self._stream = stream
        self._timeout = timeout
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            while True:
                event = await self._connection._next_event(self._stream, self._timeout)
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage) or event is h11.PAUSED:
                    return
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            with trio.CancelScope(shield=True):
                await self._connection._response_closed()
