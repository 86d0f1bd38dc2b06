"""Wrappers around httpcore's network layer that pass everything through by default.

The run's HTTP client changes two small things about its connections (they
are dialled ahead of need, :mod:`rlm.providers._warm`; a request goes out in
one write, :mod:`rlm.providers._one_write`).  Each subclass overrides only the
calls it changes; the rest of httpcore's backend and stream interfaces is
written once here.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

import httpcore2

from rlm.providers._trio_network import TrioNetwork

__all__ = ["WrappedBackend", "WrappedStream"]


class WrappedBackend(httpcore2.AsyncNetworkBackend):
    """Dials through ``inner`` (:class:`~rlm.providers._trio_network.TrioNetwork` by default;
    tests pass a fake)."""

    def __init__(self, inner: httpcore2.AsyncNetworkBackend | None = None) -> None:
        self._inner = inner if inner is not None else TrioNetwork()

    def wrap(self, stream: httpcore2.AsyncNetworkStream) -> httpcore2.AsyncNetworkStream:
        """What a dialled stream is handed out as (itself, unless a subclass wraps it)."""
        return stream

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's backend interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return self.wrap(await self._inner.connect_tcp(
            host, port, timeout=timeout, local_address=local_address,
            socket_options=socket_options,
        ))

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's backend interface)
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return self.wrap(await self._inner.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options
        ))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class WrappedStream(httpcore2.AsyncNetworkStream):
    """Passes every call to ``stream``; :meth:`wrap` wraps the stream TLS starts on it."""

    def __init__(self, stream: httpcore2.AsyncNetworkStream) -> None:
        self._stream = stream

    def wrap(self, stream: httpcore2.AsyncNetworkStream) -> httpcore2.AsyncNetworkStream:
        """The same wrapper around ``stream`` (the TLS stream started on this one)."""
        raise NotImplementedError

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's stream interface)
    ) -> httpcore2.AsyncNetworkStream:
        return self.wrap(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)
