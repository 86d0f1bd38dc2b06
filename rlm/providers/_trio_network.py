"""The run's HTTP connections on trio, with one cancel scope per read or write.

httpcore2's trio backend wraps every read and write in ``trio.fail_after``
and its own ``map_exceptions``: two generator-based context managers, a
cancel scope and an exception table built per call, ~17 us per operation
here (a 6.7 KB write through it costs 39 us, through trio's ``SocketStream``
22 us).  A sub-query does at least one write and one read, on the loop that
dispatches the fan-out's other requests.  This backend dials as httpcore2's
does (``trio.open_tcp_stream``; TLS through ``trio.SSLStream``) and hands out
streams that bound each operation with a bare cancel scope and translate
trio's errors to httpcore2's with ``except``: the same errors, timeouts and
extra info as httpcore2's streams, for less work.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any, NoReturn

import httpcore2
import trio

__all__ = ["TrioNetwork", "TrioNetworkStream"]

_BROKEN = (trio.BrokenResourceError, trio.ClosedResourceError)


def _scope(timeout: float | None) -> trio.CancelScope:
    """A cancel scope that ends ``timeout`` seconds from now (never, for None)."""
    if timeout is None:
        return trio.CancelScope()
    if timeout < 0:  # as trio.fail_after
        raise ValueError("timeout must be non-negative")
    return trio.CancelScope(deadline=trio.current_time() + timeout)


def _timed_out(
    kind: type[httpcore2.TimeoutException], timeout: float | None
) -> NoReturn:
    raise kind(f"no progress within {timeout} s")


class TrioNetwork(httpcore2.AsyncNetworkBackend):
    """Dials TCP and Unix sockets on trio; see the module docstring."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's backend interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        with _scope(timeout):
            try:
                # trio sets TCP_NODELAY on the streams it opens.
                stream = await trio.open_tcp_stream(host, port, local_address=local_address)
            except (OSError, trio.BrokenResourceError) as exc:
                raise httpcore2.ConnectError(exc) from exc
            return _configured(stream, socket_options)
        _timed_out(httpcore2.ConnectTimeout, timeout)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's backend interface)
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        with _scope(timeout):
            try:
                stream = await trio.open_unix_socket(path)
            except (OSError, trio.BrokenResourceError) as exc:
                raise httpcore2.ConnectError(exc) from exc
            return _configured(stream, socket_options)
        _timed_out(httpcore2.ConnectTimeout, timeout)

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


def _configured(
    stream: trio.SocketStream, options: Iterable[httpcore2.SOCKET_OPTION] | None
) -> TrioNetworkStream:
    for option in options or ():
        stream.setsockopt(*option)
    return TrioNetworkStream(stream)


class TrioNetworkStream(httpcore2.AsyncNetworkStream):
    """A connected trio stream (a socket, or TLS over one) behind httpcore2's stream interface."""

    def __init__(self, stream: trio.SocketStream | trio.SSLStream[trio.SocketStream]) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        with _scope(timeout):
            try:
                data = await self._stream.receive_some(max_bytes)
            except _BROKEN as exc:
                raise httpcore2.ReadError(exc) from exc
            return data if isinstance(data, bytes) else bytes(data)
        _timed_out(httpcore2.ReadTimeout, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        with _scope(timeout):
            try:
                await self._stream.send_all(buffer)
            except _BROKEN as exc:
                raise httpcore2.WriteError(exc) from exc
            return
        _timed_out(httpcore2.WriteTimeout, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's stream interface)
    ) -> httpcore2.AsyncNetworkStream:
        if not isinstance(self._stream, trio.SocketStream):
            raise httpcore2.ConnectError("TLS is already started on this stream")
        tls = trio.SSLStream(
            self._stream, ssl_context, server_hostname=server_hostname,
            https_compatible=True,
        )
        try:
            with _scope(timeout):
                try:
                    await tls.do_handshake()
                except trio.BrokenResourceError as exc:
                    raise httpcore2.ConnectError(exc) from exc
                return TrioNetworkStream(tls)
            _timed_out(httpcore2.ConnectTimeout, timeout)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.aclose()
            raise

    def get_extra_info(self, info: str) -> Any:
        tls = self._stream if isinstance(self._stream, trio.SSLStream) else None
        plain = tls.transport_stream if tls is not None else self._stream
        assert isinstance(plain, trio.SocketStream)
        if info == "ssl_object":
            return tls._ssl_object if tls is not None else None
        if info == "client_addr":
            return plain.socket.getsockname()
        if info == "server_addr":
            return plain.socket.getpeername()
        if info == "socket":
            return plain.socket
        if info == "is_readable":
            return plain.socket.is_readable()
        return None
