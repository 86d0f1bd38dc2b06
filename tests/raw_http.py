"""A raw HTTP/1.1 server on loopback for tests that must control every byte of an answer
and see every byte of the request's head (one request per connection)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import trio

__all__ = ["Answer", "header", "raw_server", "read_head", "reply", "self_signed"]

Answer = Callable[[bytes], bytes]  # the request's head -> the whole response


def reply(status: str, body: bytes, *extra: bytes) -> bytes:
    head = [b"HTTP/1.1 " + status.encode(), b"content-type: application/json",
            b"content-length: %d" % len(body), b"connection: close", *extra]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


@asynccontextmanager
async def raw_server(
    answer: Answer, tls: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[int, list[bytes]]]:
    """A one-request-per-connection server on loopback; yields its port and the heads seen."""
    heads: list[bytes] = []

    async def handle(stream: trio.abc.Stream) -> None:
        try:
            head = await read_head(stream)
            if head is None:
                return
            heads.append(head)
            await stream.send_all(answer(head))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client hung up (a refused certificate)
        finally:
            await stream.aclose()

    async with trio.open_nursery() as nursery:
        if tls is None:
            listeners = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
            port = listeners[0].socket.getsockname()[1]
        else:
            listeners = await nursery.start(
                partial(trio.serve_ssl_over_tcp, handle, 0, tls, host="127.0.0.1")
            )
            port = listeners[0].transport_listener.socket.getsockname()[1]
        yield port, heads
        nursery.cancel_scope.cancel()


async def read_head(stream: trio.abc.Stream) -> bytes | None:
    """A request's head (its body, if any, is left unread), or None when the client closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        data += chunk
    return data.partition(b"\r\n\r\n")[0]


def header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def self_signed(folder: Path, *extra: str) -> tuple[Path, Path] | None:
    """A fresh self-signed certificate for CN 127.0.0.1 (``extra``: more ``openssl req``
    arguments) and its key, in ``folder``; None when openssl is not installed."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1", *extra, "-keyout", str(key),
         "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key
