"""Connections opened ahead of need: the sub lane's first wave finds them open.

A run's first fan-out sends up to one request per sub-lane permit at once.
Each would open its own connection just then, one after another on the
run's loop (a TCP handshake each, and the server's accept), on the path of
the whole wave.  While the root's first step is generated, nothing else
happens, so the run opens those connections then (:meth:`WarmConnections.open`)
and the HTTP pool takes them on its first connects instead of dialling.

They are opened once the run's first request is on the wire (the first
connection's first read), not before: dialling them takes the loop a few
milliseconds, which must not delay the root's own request.  Only
connections are opened: no request is sent, so nothing is asked of the
provider, counted or billed.  The number is bounded by the sub lane's
permits.  A pre-opened connection the server has closed meanwhile is closed
and replaced by a fresh one; those never used are closed with the client.
"""

from __future__ import annotations

from collections.abc import Iterable

import httpcore2
import trio

from rlm.providers._wrapped_network import WrappedBackend, WrappedStream

__all__ = ["MAX_WARM_CONNECTIONS", "WarmConnections"]

#: At most this many connections are opened ahead of need, whatever the permits.
MAX_WARM_CONNECTIONS = 32
_CONNECT_TIMEOUT = 30.0  # as the client's own connects


class WarmConnections(WrappedBackend):
    """A network backend for the HTTP pool that hands out pre-opened TCP connections.

    ``inner`` does the dialling (:class:`~rlm.providers._trio_network.TrioNetwork`
    by default; tests pass a fake).  Every connection it opened and did not hand
    out is closed by :meth:`aclose`.
    """

    def __init__(self, inner: httpcore2.AsyncNetworkBackend | None = None) -> None:
        super().__init__(inner)
        self._ready: dict[tuple[str, int], list[httpcore2.AsyncNetworkStream]] = {}
        self._closed = False
        self._first_sent = trio.Event()  # the first request is on the wire
        self._dialled = False
        #: How many pre-opened connections the pool took (for tests and the curious).
        self.taken = 0

    async def open(self, host: str, port: int, count: int) -> None:
        """Once the first request is sent, open up to ``count`` connections to
        ``host:port`` at once and keep them ready.

        One that fails is left out: the pool then dials as it would have anyway.
        """
        await self._first_sent.wait()

        async def one() -> None:
            try:
                stream = await self._inner.connect_tcp(host, port, timeout=_CONNECT_TIMEOUT)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout, OSError):
                return
            if self._closed:  # the client closed while this one was connecting
                await stream.aclose()
            else:
                self._ready.setdefault((host, port), []).append(stream)

        async with trio.open_nursery() as nursery:
            for _ in range(min(count, MAX_WARM_CONNECTIONS)):
                nursery.start_soon(one)

    def ready(self, host: str, port: int) -> int:
        """Pre-opened connections to ``host:port`` not taken yet."""
        return len(self._ready.get((host, port), ()))

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's backend interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        ready = self._ready.get((host, port))
        while ready and local_address is None and not socket_options:
            stream = ready.pop()
            if not stream.get_extra_info("is_readable"):
                self.taken += 1
                return stream
            await stream.aclose()  # readable while idle: the server closed it
        stream = await super().connect_tcp(
            host, port, timeout=timeout, local_address=local_address,
            socket_options=socket_options,
        )
        if self._dialled:
            return stream
        self._dialled = True
        return _FirstRequest(stream, self._first_sent)

    async def aclose(self) -> None:
        """Close every connection not handed out; any still connecting closes on arrival."""
        self._closed = True
        streams = [stream for ready in self._ready.values() for stream in ready]
        self._ready.clear()
        with trio.CancelScope(shield=True):
            for stream in streams:
                await stream.aclose()


class _FirstRequest(WrappedStream):
    """The first connection dialled: says when its first request is on the wire, i.e.
    when the client first reads (it reads a response only once the request is sent)."""

    def __init__(self, stream: httpcore2.AsyncNetworkStream, sent: trio.Event) -> None:
        super().__init__(stream)
        self._sent = sent

    def wrap(self, stream: httpcore2.AsyncNetworkStream) -> httpcore2.AsyncNetworkStream:
        return _FirstRequest(stream, self._sent)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        self._sent.set()
        return await super().read(max_bytes, timeout)

    async def aclose(self) -> None:
        self._sent.set()
        await super().aclose()
