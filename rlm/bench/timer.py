"""Sleeping exactly as long as a simulated provider's latency, for ``rlm bench``.

``trio.sleep(0.5)`` wakes 0.5–1.5 ms late on Linux: epoll takes its timeout in
whole milliseconds (rounded up), and the kernel adds a slack of 0.1 % of the
timeout.  A real provider's answer arrives on a socket, which wakes the loop at
once, so that lateness is the simulator's error, not the runtime's; at every
step and wave of a run it would be counted as overhead (T* uses the nominal
latency).  A Linux timerfd wakes within the task's timer slack (50 µs).
Elsewhere, or when the timerfd cannot be made, this is ``trio.sleep``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

import trio

__all__ = ["precise_sleep"]

_CLOCK_MONOTONIC = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [
            ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p,
        ]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


async def precise_sleep(seconds: float) -> None:
    """Sleep ``seconds`` of the monotonic clock, waking within the timer slack of the end."""
    fd = -1 if _LIBC is None or seconds <= 0 else _LIBC.timerfd_create(
        _CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        await trio.sleep(seconds)
        return
    try:
        whole = int(seconds)
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(whole, int((seconds - whole) * 1e9)))
        if _LIBC is None or _LIBC.timerfd_settime(fd, 0, ctypes.byref(spec), None) != 0:
            await trio.sleep(seconds)
            return
        await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)
