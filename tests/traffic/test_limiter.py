"""Tiered permits in virtual time: caps, the reserved root lane, FIFO, cancellation."""

from __future__ import annotations

import math

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from trio.testing import MockClock

from rlm._traffic.limiter import Permit, TieredLimiter
from rlm.providers.base import Lane


async def hold(
    limiter: TieredLimiter, lane: str, seconds: float, log: list[tuple[str, float]], name: str
) -> None:
    async with limiter.permit(lane):  # type: ignore[arg-type]
        log.append((name, trio.current_time()))
        await trio.sleep(seconds)


async def test_sub_lane_never_takes_reserved_root_permits(autojump_clock: trio.abc.Clock) -> None:
    limiter = TieredLimiter(total=4, reserved_root=1)
    peak = 0
    log: list[tuple[str, float]] = []

    async def sub(i: int) -> None:
        nonlocal peak
        async with limiter.permit("sub"):
            peak = max(peak, limiter.statistics().in_flight_sub)
            await trio.sleep(1)

    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(sub, i)
        await trio.sleep(0.5)
        # 50 sub-queries saturate their 3 permits; a root step still starts at once.
        nursery.start_soon(hold, limiter, "root", 1, log, "root")
    assert peak == 3
    assert log == [("root", 0.5)]
    assert trio.current_time() == pytest.approx(17.0)  # ceil(50 / 3) rounds of 1 s


async def test_total_cap_is_never_exceeded_and_fifo_within_lane(
    autojump_clock: trio.abc.Clock,
) -> None:
    limiter = TieredLimiter(total=2, reserved_root=0)
    log: list[tuple[str, float]] = []
    async with trio.open_nursery() as nursery:
        for i in range(6):
            nursery.start_soon(hold, limiter, "sub", 1, log, f"s{i}")
            await trio.sleep(0.01)  # arrive in order
    starts = [name for name, _ in log]
    assert starts == [f"s{i}" for i in range(6)]
    assert [round(t) for _, t in log] == [0, 0, 1, 1, 2, 2]


async def test_cancelled_waiter_leaves_queue_without_leaking(
    autojump_clock: trio.abc.Clock,
) -> None:
    limiter = TieredLimiter(total=1, reserved_root=0)
    log: list[tuple[str, float]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold, limiter, "sub", 2, log, "first")
        await trio.sleep(0.1)
        with trio.move_on_after(0.5):
            await limiter.acquire("sub")
        assert limiter.statistics().waiting_sub == 0
        nursery.start_soon(hold, limiter, "sub", 1, log, "second")
    assert log == [("first", 0.0), ("second", 2.0)]
    assert limiter.statistics().in_flight == 0


async def test_total_and_sub_limit_are_raised_at_run_time_each_alone(
    autojump_clock: trio.abc.Clock,
) -> None:
    limiter = TieredLimiter(total=2, reserved_root=1)
    log: list[tuple[str, float]] = []
    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(hold, limiter, "sub", 5, log, f"s{i}")
        await trio.sleep(1)
        limiter.total = 4  # more room in all: the sub lane's own limit is unchanged
        assert limiter.sub_limit == 1
        await trio.sleep(1)
        limiter.total = 3
        limiter.sub_limit = 3  # one more sub permit now: the total caps the lane at 2
        assert limiter.sub_limit == 2
    assert sorted(t for _, t in log) == [0.0, 2.0, 5.0]


async def test_a_permit_released_twice_is_refused_and_frees_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    limiter = TieredLimiter(total=2, reserved_root=0)
    first = await limiter.acquire("sub")
    second = await limiter.acquire("sub")
    assert first.lane == "sub" and first is not second
    limiter.release(first)
    with pytest.raises(RuntimeError, match=r"sub-lane permit .*released twice"):
        limiter.release(first)
    # The refused release freed nothing: the other holder still counts, and the
    # lane has exactly one free permit.
    assert limiter.statistics().in_flight == 1
    third = await limiter.acquire("sub")
    with trio.move_on_after(1) as waited:
        await limiter.acquire("sub")
    assert waited.cancelled_caught
    for permit in (second, third):
        limiter.release(permit)
    assert limiter.statistics().in_flight == 0


async def test_a_permit_this_limiter_never_handed_out_is_refused(
    autojump_clock: trio.abc.Clock,
) -> None:
    limiter, other = TieredLimiter(total=2, reserved_root=1), TieredLimiter(2, 1)
    foreign = await other.acquire("root")
    mine = await limiter.acquire("root")
    with pytest.raises(RuntimeError, match="root-lane permit"):
        limiter.release(foreign)
    with pytest.raises(RuntimeError, match="root-lane permit"):
        limiter.release(Permit("root", mine.number))  # the same number is not the holding
    assert limiter.statistics().in_flight == 1
    limiter.release(mine)


async def test_a_permit_handed_to_a_waiter_is_its_own(autojump_clock: trio.abc.Clock) -> None:
    """The FIFO hand-off gives the waiter a permit it alone may release."""
    limiter = TieredLimiter(total=1, reserved_root=0)
    first = await limiter.acquire("sub")
    got: list[Permit] = []

    async def wait_for_one() -> None:
        got.append(await limiter.acquire("sub"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_for_one)
        await trio.testing.wait_all_tasks_blocked()
        limiter.release(first)
    (handed,) = got
    assert handed is not first and limiter.statistics().in_flight == 1
    with pytest.raises(RuntimeError):
        limiter.release(first)
    limiter.release(handed)


async def test_a_held_back_permit_goes_to_no_waiter_until_given_back(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A request refused as overload holds its permit back while it backs off: the
    waiter next in line would only be refused too."""
    limiter = TieredLimiter(total=2, reserved_root=0)
    refused = await limiter.acquire("sub")
    got: list[float] = []

    async def waiter() -> None:
        limiter.release(await limiter.acquire("sub"))
        got.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        other = await limiter.acquire("sub")
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        limiter.hold_back()  # before its permit goes back
        limiter.release(refused)
        await trio.sleep(1.0)
        assert not got  # the freed permit was held back
        limiter.give_back()
    assert got == [1.0]
    limiter.release(other)
    with pytest.raises(RuntimeError, match="give_back without a hold_back"):
        limiter.give_back()


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        TieredLimiter(total=2, reserved_root=2)
    with pytest.raises(ValueError):
        TieredLimiter(total=0, reserved_root=0)


# -- cancellation safety: a cancelled acquire never keeps a permit ----------------


async def test_acquire_cancelled_at_its_first_checkpoint_takes_no_permit(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The free-permit fast path: cancelled before it could return, it holds nothing."""
    limiter = TieredLimiter(total=2, reserved_root=1)
    with trio.CancelScope() as scope:
        scope.cancel()
        await limiter.acquire("sub")
    assert scope.cancelled_caught
    assert limiter.statistics().in_flight == 0
    with trio.fail_after(1):  # the lane's only permit is still there
        async with limiter.permit("sub"):
            pass


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["root", "sub"]),
            st.integers(0, 6),  # arrival tick
            st.integers(0, 4),  # hold ticks
            st.one_of(st.none(), st.integers(0, 8)),  # cancel tick (None: never)
        ),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 3),
    st.integers(0, 2),
)
def test_permits_always_return_under_any_cancellation(
    plan: list[tuple[Lane, int, int, int | None]], sub_slots: int, reserved: int
) -> None:
    """Acquirers cancelled at every possible point (before, while waiting, at the
    hand-over, while holding) never leak a permit or exceed the caps."""
    total = sub_slots + reserved
    limiter = TieredLimiter(total=total, reserved_root=reserved)
    peak = 0

    async def acquirer(lane: Lane, arrive: int, hold_ticks: int, cancel: int | None) -> None:
        nonlocal peak
        await trio.sleep(arrive)
        deadline = math.inf if cancel is None else float(cancel)
        with trio.CancelScope(deadline=deadline):
            async with limiter.permit(lane):
                stats = limiter.statistics()
                peak = max(peak, stats.in_flight)
                assert stats.in_flight_sub <= sub_slots
                await trio.sleep(hold_ticks)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for lane, arrive, hold_ticks, cancel in plan:
                nursery.start_soon(acquirer, lane, arrive, hold_ticks, cancel)
        stats = limiter.statistics()
        assert (stats.in_flight, stats.waiting_root, stats.waiting_sub) == (0, 0, 0)
        for lane in ("root", "sub"):  # and every permit can be taken again
            held = [await limiter.acquire(lane)
                    for _ in range(total if lane == "root" else sub_slots)]
            assert limiter.statistics().in_flight == len(held)
            for permit in held:
                limiter.release(permit)

    trio.run(main, clock=MockClock(autojump_threshold=0))
    assert peak <= total
