"""Large contexts arrive as a sealed memfd, mapped once, instead of inside a frame.

The host writes the msgpack encoding of the context (a str or a list of str)
into a memfd, seals it against writes and resizing, and passes the descriptor
over the sandbox's context socket (SCM_RIGHTS) next to an ``init`` frame that
says ``"context_fd": true``.  The sandbox maps it read-only, decodes it once
into ordinary ``str`` objects (so ``context`` stays a plain str) and closes
both the mapping and the descriptor: nothing shared stays behind.
"""

from __future__ import annotations

import mmap
import os
import socket

import msgpack

__all__ = ["ContextError", "receive_context"]


class ContextError(Exception):
    """The shared context was missing or not a str / list of str."""


def receive_context(ctx_fd: int | None) -> str | list[str]:
    """Receive one memfd on ``ctx_fd`` and decode the context it holds."""
    if ctx_fd is None:
        raise ContextError("init asked for a shared context, but there is no context socket")
    with socket.socket(fileno=os.dup(ctx_fd)) as channel:
        _, fds, _, _ = socket.recv_fds(channel, 1, 2)
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise ContextError(f"expected one context descriptor, got {len(fds)}")
    fd = fds[0]
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            raise ContextError("the shared context is empty")
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mapped:
            context = msgpack.unpackb(mapped, raw=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise ContextError(f"the shared context is not valid msgpack: {exc}") from exc
    finally:
        os.close(fd)
    if isinstance(context, str) or (
            isinstance(context, list) and all(isinstance(item, str) for item in context)):
        return context
    raise ContextError("the shared context must be a str or a list of str")
