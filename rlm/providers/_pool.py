"""The run's HTTP connection pool: a stack of idle connections per origin.

httpcore2's ``AsyncConnectionPool`` re-plans all its connections twice per
request (when it arrives and when its response closes), and in each pass asks
every idle connection whether it has expired, which polls its socket: with one
connection per permit, a fan-out of 16 paid ~30 polls and ~0.2 ms of the run's
CPU per request, on the loop that dispatches the others.  This pool does what
one run needs in O(1): a request takes the most recently used idle connection
to its origin (checking that one alone), or opens one; its response's close
gives it back.  The connections are :class:`~rlm.providers._h11_connection.H11Connection`
(dialling through the given network backend, TLS, HTTP/1.1 by h11), which
serve httpcore2's request interface as its own ``AsyncHTTPConnection`` does,
at less of the loop's time per request.

At most ``max_connections`` requests are in flight; more wait for a free one,
up to the request's pool timeout (``httpcore2.PoolTimeout``).  At most
``max_connections`` connections are open: opening one past that closes the
longest idle.  A connection whose request failed or was cancelled, or whose
response was not read to the end, is closed and forgotten; one that has
expired or that the server closed while idle is closed when found.  Every
connection still open is closed by :meth:`ConnectionPool.aclose`.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping

import httpcore2
import trio
from httpcore2._async.interfaces import AsyncRequestInterface

from rlm.providers._h11_connection import H11Connection
from rlm.providers._trio_network import TrioNetwork

__all__ = ["ConnectionPool"]

_Key = tuple[bytes, bytes, int]


class ConnectionPool(AsyncRequestInterface):
    """See the module docstring.  Trio only, as the runtime is."""

    def __init__(
        self,
        *,
        max_connections: int,
        keepalive_expiry: float | None,
        ssl_context: ssl.SSLContext | None = None,
        network_backend: httpcore2.AsyncNetworkBackend | None = None,
    ) -> None:
        self._max = max_connections
        self._slots = trio.Semaphore(max_connections)
        self._keepalive_expiry = keepalive_expiry
        self._ssl_context = ssl_context
        self._network = network_backend if network_backend is not None else TrioNetwork()
        self._idle: dict[_Key, list[H11Connection]] = {}
        self._open: set[H11Connection] = set()

    @property
    def connections(self) -> int:
        """Connections open or opening (for tests and the curious)."""
        return len(self._open)

    @property
    def in_flight(self) -> int:
        """Requests holding a connection now."""
        return self._max - self._slots.value

    async def exchange(
        self, origin: httpcore2.Origin, target: bytes, headers: list[tuple[bytes, bytes]],
        content: bytes, timeouts: Mapping[str, float | None],
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """POST ``content`` to ``origin`` and ``target``; the answer's status, headers and
        whole body (:meth:`H11Connection.exchange`).  The connection is given back
        before this returns or raises."""
        connection = await self._checkout(origin, timeouts.get("pool"))
        try:
            return await connection.exchange(target, headers, content, timeouts)
        finally:
            await self._give_back(connection)

    async def handle_async_request(self, request: httpcore2.Request) -> httpcore2.Response:
        connection = await self._checkout(
            request.url.origin, request.extensions.get("timeout", {}).get("pool")
        )
        try:
            response = await connection.handle_async_request(request)
        except BaseException:
            await self._give_back(connection)
            raise
        return httpcore2.Response(
            status=response.status,
            headers=response.headers,
            content=_GivesBack(self, connection, response),
            extensions=response.extensions,
        )

    async def _checkout(
        self, origin: httpcore2.Origin, timeout: float | None  # noqa: ASYNC109
    ) -> H11Connection:
        """A free slot and a connection to ``origin``; :meth:`_give_back` returns both."""
        if origin.scheme not in (b"http", b"https"):
            raise httpcore2.UnsupportedProtocol(
                f"Request URL has an unsupported protocol '{origin.scheme.decode()}://'."
            )
        await self._take_slot(timeout)
        try:
            return await self._connection_to(origin)
        except BaseException:
            self._slots.release()
            raise

    async def _take_slot(self, timeout: float | None) -> None:  # noqa: ASYNC109
        try:
            self._slots.acquire_nowait()  # the common case: no wait, no checkpoint
            return
        except trio.WouldBlock:
            pass
        with trio.move_on_after(float("inf") if timeout is None else timeout):
            await self._slots.acquire()
            return
        raise httpcore2.PoolTimeout(f"no connection came free within {timeout} s")

    async def _connection_to(self, origin: httpcore2.Origin) -> H11Connection:
        key = (origin.scheme, origin.host, origin.port)
        idle = self._idle.get(key)
        while idle:
            connection = idle.pop()
            if not connection.has_expired():  # keep-alive over, or the server closed it
                return connection
            await self._close(connection)
        if len(self._open) >= self._max:
            await self._close_longest_idle()
        connection = H11Connection(
            origin,
            ssl_context=self._ssl_context,
            keepalive_expiry=self._keepalive_expiry,
            network_backend=self._network,
        )
        self._open.add(connection)
        return connection

    async def _close_longest_idle(self) -> None:
        stacks = [stack for stack in self._idle.values() if stack]
        if stacks:  # each stack's oldest is at its bottom; any of them will do
            await self._close(stacks[0].pop(0))

    async def _give_back(self, connection: H11Connection) -> None:
        """Called once per request that took ``connection``, on every path."""
        self._slots.release()
        if connection.is_idle() and connection in self._open:
            origin = connection.origin
            self._idle.setdefault((origin.scheme, origin.host, origin.port), []).append(
                connection
            )
        else:
            await self._close(connection)

    async def _close(self, connection: H11Connection) -> None:
        self._open.discard(connection)
        with trio.CancelScope(shield=True):
            await connection.aclose()

    async def __aenter__(self) -> ConnectionPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        connections = list(self._open)
        self._open.clear()
        self._idle.clear()
        with trio.CancelScope(shield=True):
            for connection in connections:
                await connection.aclose()


class _GivesBack:
    """A response body that gives its connection back to the pool when closed."""

    def __init__(
        self,
        pool: ConnectionPool,
        connection: H11Connection,
        response: httpcore2.Response,
    ) -> None:
        self._pool = pool
        self._connection = connection
        self._stream = response.stream
        self._closed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream.__aiter__()  # type: ignore[union-attr]

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            with trio.CancelScope(shield=True):
                await self._stream.aclose()  # type: ignore[union-attr]
        finally:
            await self._pool._give_back(self._connection)
