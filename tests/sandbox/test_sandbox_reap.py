"""A sandbox slower to die than the reap cap is still reaped before aclose() returns."""

from __future__ import annotations

import os
import socket

import pytest
import trio

from rlm._events import EventBus
from rlm._sandbox.process import HostEnds, Sandbox


class SlowToDie:
    """A ChildProcess whose death takes ``dies_after`` seconds of (virtual) time."""

    def __init__(self, dies_after: float) -> None:
        self._dies_after = dies_after
        self._killed_at: float | None = None
        self.kills = 0
        self._returncode: int | None = None

    @property
    def pid(self) -> int:
        return 4242

    @property
    def returncode(self) -> int | None:
        return self._returncode

    @property
    def stderr(self) -> trio.abc.ReceiveStream | None:
        return None

    def kill(self) -> None:
        self.kills += 1
        if self._killed_at is None:
            self._killed_at = trio.current_time()

    async def wait(self) -> None:
        assert self._killed_at is not None, "waited on a sandbox that was never killed"
        await trio.sleep_until(self._killed_at + self._dies_after)
        self._returncode = -9


def host_ends() -> tuple[HostEnds, list[int], socket.socket]:
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    host_sock, child_sock = socket.socketpair(socket.AF_UNIX)
    ends = HostEnds(trio.lowlevel.FdStream(to_child_w), trio.lowlevel.FdStream(from_child_r),
                    host_sock)
    return ends, [to_child_r, from_child_w], child_sock


@pytest.mark.parametrize(
    ("dies_after", "kills"),
    [
        (8.0, 2),  # past the cap: killed again once the cap passed, and still reaped
        (0.5, 1),  # within the cap: killed once
    ],
)
async def test_a_reap_ends_reaped_whether_or_not_it_outlasts_the_cap(
    dies_after: float, kills: int, autojump_clock: trio.testing.MockClock
) -> None:
    process = SlowToDie(dies_after=dies_after)
    ends, child_fds, child_sock = host_ends()
    box = Sandbox(process, ends, EventBus(), reap_cap_s=5.0)
    try:
        await box.aclose()
    finally:
        for fd in child_fds:
            os.close(fd)
        child_sock.close()
    assert process.returncode == -9  # reaped, not left a zombie after the cap
    assert process.kills == kills
