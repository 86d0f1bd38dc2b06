"""A request in one write: the HTTP pool's connections hold writes until it reads.

httpcore2 writes a request's head and its body separately, so a small JSON
request costs two ``send`` calls, two trio checkpoints and two wake-ups of the
server, which reads the head, parses it and waits again for the body.  An
HTTP/1.1 client writes a whole request before it reads the answer, so these
streams keep what is written and send it in one write just before the first
read (or once it grows past :data:`FLUSH_BYTES`, so a large body is not held
in memory twice).

A write that fails then is swallowed, as httpcore2 swallows one while it
sends a request: the read that follows reports what the server said, or that
the connection is gone.  What is held is dropped when the stream closes.
"""

from __future__ import annotations

import contextlib

import httpcore2

from rlm.providers._wrapped_network import WrappedBackend, WrappedStream

__all__ = ["FLUSH_BYTES", "OneWriteBackend"]

#: Held writes are sent at once when they reach this size.
FLUSH_BYTES = 64 * 1024


class OneWriteBackend(WrappedBackend):
    """Dials through ``inner`` (:class:`~rlm.providers._trio_network.TrioNetwork` by
    default) and hands out streams that send each request in one write."""

    def wrap(self, stream: httpcore2.AsyncNetworkStream) -> httpcore2.AsyncNetworkStream:
        return OneWriteStream(stream)


class OneWriteStream(WrappedStream):
    """See the module docstring."""

    def __init__(self, stream: httpcore2.AsyncNetworkStream) -> None:
        super().__init__(stream)
        self._held: list[bytes] = []
        self._held_bytes = 0

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        self._held.append(buffer)
        self._held_bytes += len(buffer)
        if self._held_bytes >= FLUSH_BYTES:
            await self._send_held(timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        if self._held:
            # As httpcore2 does with a failed write: the read says what became of it.
            with contextlib.suppress(httpcore2.WriteError):
                await self._send_held(timeout)
        return await self._stream.read(max_bytes, timeout)

    async def _send_held(self, timeout: float | None) -> None:  # noqa: ASYNC109
        data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held.clear()
        self._held_bytes = 0
        await self._stream.write(data, timeout)

    async def aclose(self) -> None:
        self._held.clear()
        self._held_bytes = 0
        await self._stream.aclose()

    def wrap(self, stream: httpcore2.AsyncNetworkStream) -> httpcore2.AsyncNetworkStream:
        return OneWriteStream(stream)
