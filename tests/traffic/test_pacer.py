"""The pacer alone, in virtual time: who waits for which slot, and what a slot costs."""

from __future__ import annotations

import pytest
import trio

from rlm._traffic.pacer import JITTER_MARGIN, Pacer, _Cell

SPACING = 1 + JITTER_MARGIN


async def test_a_rate_cut_while_requests_wait_applies_to_them(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Slots are taken in turn, not reserved ahead: a cut slows every request not yet
    # sent (reserved ahead, queued requests would still go at the old pace).
    pacer = Pacer(rpm=60)
    sent: list[float] = []

    async def one() -> None:
        await pacer.wait(10, "sub")
        sent.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(one)
        await trio.sleep(0.5)
        pacer.set_rpm(30)
    # The first at once; from the second on, two seconds (and the margin) apart.
    assert sent == pytest.approx([0.0, 2 * SPACING, 4 * SPACING, 6 * SPACING])


def test_lateness_the_margin_absorbs_moves_nothing_and_more_moves_the_next_slot() -> None:
    # A strict bucket counts from the moment a request arrives: one that went later than
    # its slot (a busy machine) by more than the margin would make the next one early.
    given = _Cell(60, 1, JITTER_MARGIN)
    given.charge(slot=0.0, went=0.04, units=1)  # within the 0.05 s margin
    assert given.start(0.0) == pytest.approx(SPACING)
    given.charge(slot=given.start(0.0), went=SPACING + 0.5, units=1)  # half a second late
    assert given.start(0.0) == pytest.approx(SPACING + 0.5 - 0.05 + SPACING)
    # An announced per-minute limit keeps its schedule whatever a request's lateness.
    announced = _Cell(60, 1, 0.0)
    announced.charge(slot=0.0, went=0.5, units=1)
    assert announced.start(0.0) == 1.0


async def test_a_request_cancelled_while_it_waits_is_not_charged(
    autojump_clock: trio.abc.Clock,
) -> None:
    pacer = Pacer(rpm=60)
    await pacer.wait(10, "sub")
    with trio.move_on_after(0.5):
        await pacer.wait(10, "sub")
    await pacer.wait(10, "sub")  # the slot the cancelled one waited for is still free
    assert trio.current_time() == pytest.approx(SPACING)
