"""When a request's bytes reached this host, not when the fixture server got round to them.

The fixture server's latency counts from a request's arrival, as a
provider's does.  Taken as the time its one thread reads the bytes, it
starts late whenever that thread is busy with other requests (parsing them,
building replies) or the process waits for a core that the client and its
sandboxes share: a fan-out of 16 on a loaded 2-core machine lost 1-5 ms per
request so, counted as the runtime's overhead.  On Linux the kernel stamps
each received packet (``SO_TIMESTAMPNS``), and the reader returns that stamp
on trio's clock with the bytes.  Elsewhere, or on a stream that is not a
socket (an in-memory stream in a test), the stamp is the time of the read.
"""

from __future__ import annotations

import contextlib
import platform
import socket
import struct
import sys
import time

import trio

__all__ = ["ArrivalReader", "stamps_arrivals"]

#: ``SO_TIMESTAMPNS`` (= ``SCM_TIMESTAMPNS``) where its value and its 64-bit
#: ``struct timespec`` are the generic ones; Python's socket module does not name it.
_SO_TIMESTAMPNS = (
    35 if sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64") else None
)
_TIMESPEC = struct.Struct("qq")
_ANCILLARY_BYTES = socket.CMSG_SPACE(_TIMESPEC.size) if _SO_TIMESTAMPNS is not None else 0
#: A stamp further back than this is a step of the wall clock, not a wait: not used.
_MAX_LAG = 1.0


def stamps_arrivals() -> bool:
    """Whether this platform's sockets can say when their bytes arrived."""
    return _SO_TIMESTAMPNS is not None


class ArrivalReader:
    """Reads ``stream`` and says when what it read arrived (trio's clock)."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._socket: trio.socket.SocketType | None = None
        if _SO_TIMESTAMPNS is not None and isinstance(stream, trio.SocketStream):
            with contextlib.suppress(OSError):  # then every stamp is the read's time
                stream.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                self._socket = stream.socket

    async def receive(self, max_bytes: int) -> tuple[bytes, float]:
        """Up to ``max_bytes`` (``b""`` at EOF) and when they reached this host."""
        if self._socket is None:
            # (bytes() of a bytes object is that object: no copy from a socket.)
            return bytes(await self._stream.receive_some(max_bytes)), trio.current_time()
        try:
            data, ancillary, _, _ = await self._socket.recvmsg(max_bytes, _ANCILLARY_BYTES)
        except OSError as exc:  # as SocketStream.receive_some says it
            raise trio.BrokenResourceError(str(exc)) from exc
        now = trio.current_time()
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                seconds, nanoseconds = _TIMESPEC.unpack_from(payload)
                lag = time.time() - (seconds + nanoseconds / 1e9)
                if 0.0 <= lag <= _MAX_LAG:
                    return data, now - lag
        return data, now
