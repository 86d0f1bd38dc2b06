"""Zygote, warm pool and shared contexts: behaviour, not speed (see benchmarks/sandbox_bench.py)."""

from __future__ import annotations

import os

import pytest
import trio

from rlm._events import EventBus, SandboxExited, SandboxStarted
from rlm._sandbox.isolation import IsolationUnavailable, check_required, parse_layers
from rlm._sandbox.launcher import SandboxLauncher
from rlm._sandbox.spawn import SHARED_CONTEXT_CHARS
from tests.sandbox.security_harness import OWNER, echo_bridge, open_sandbox, sandbox_descendants


async def test_pool_sandboxes_are_forked_hardened_and_replaced() -> None:
    bus = EventBus()
    launcher = SandboxLauncher(events=bus, max_output_chars=100, pool_size=2)
    async with launcher.serving(), trio.open_nursery() as nursery:
        await launcher.wait_pool_full()
        assert launcher.pooled == 2 and launcher.zygote is not None
        boxes = [await launcher.open(nursery, context=f"c{i}", owner=OWNER) for i in range(3)]
        outputs = [(await b.execute("print(context)", echo_bridge, limit=5)).output for b in boxes]
        assert outputs == ["c0\n", "c1\n", "c2\n"]
        await launcher.wait_pool_full()
        assert launcher.pooled == 2
        for box in boxes:
            await box.aclose()
    started = [e for e in bus.events if isinstance(e, SandboxStarted)]
    assert len(started) == 3 and len({e.pid for e in started}) == 3
    assert all("parent-death-signal" in e.isolation for e in started)
    assert sandbox_descendants() == []


async def test_sandboxes_left_to_the_launcher_are_reaped_by_the_zygote_on_its_way_out() -> None:
    # A run's root call only kills its sandbox: the launcher reaps it when it stops serving,
    # with the pool's, by closing the zygote, which reaps every sandbox it forked and exits.
    bus = EventBus()
    launcher = SandboxLauncher(events=bus, max_output_chars=100, pool_size=1)
    async with trio.open_nursery() as nursery, launcher.serving():
        box = await launcher.open(nursery, context="root", owner=OWNER)
        await launcher.wait_pool_full()
        assert launcher.pooled == 1 and launcher.zygote is not None
        zygote = launcher.zygote.pid
        box.kill("closed")
    assert not _exists(box.pid) and not _exists(zygote)
    assert sandbox_descendants() == []
    exited = [e for e in bus.events if isinstance(e, SandboxExited)]
    assert [(e.pid, e.reason) for e in exited] == [(box.pid, "closed")]


def _exists(pid: int) -> bool:
    """Whether ``pid`` is any process at all, a zombie included."""
    return os.path.exists(f"/proc/{pid}")


@pytest.mark.parametrize("context", [
    "x" * SHARED_CONTEXT_CHARS + "é-tail",
    ["doc"] * 10 + ["y" * SHARED_CONTEXT_CHARS],
])
async def test_large_contexts_arrive_through_shared_memory_as_plain_str(
    context: str | list[str],
) -> None:
    async with open_sandbox(context) as box:
        out = await box.ok("print(len(context), isinstance(context, (str, list)))")
        assert out == f"{len(context)} True\n"
        if isinstance(context, str):
            assert await box.ok("print(context[-6:], type(context) is str)") == "é-tail True\n"
        else:
            assert await box.ok("print(all(type(d) is str for d in context))") == "True\n"


async def test_pool_sandboxes_do_not_share_random_state() -> None:
    outputs = set()
    for _ in range(2):
        async with open_sandbox() as box:
            outputs.add(await box.ok("import random\nprint(random.random())"))
    assert len(outputs) == 2


async def test_direct_spawn_without_serving_still_works() -> None:
    launcher = SandboxLauncher(events=EventBus(), max_output_chars=100)
    async with trio.open_nursery() as nursery:
        box = await launcher.open(nursery, context="direct", owner=OWNER)
        try:
            assert (await box.execute("print(context)", echo_bridge, limit=5)).output == "direct\n"
            assert "seccomp" in box.isolation and "parent-death-signal" not in box.isolation
        finally:
            await box.aclose()
    assert sandbox_descendants() == []


def test_required_layers_are_parsed_and_checked() -> None:
    assert parse_layers("seccomp, landlock") == ("seccomp", "landlock")
    assert "uid" in parse_layers("all")
    with pytest.raises(ValueError, match="unknown isolation layer 'selinux'"):
        parse_layers("selinux")
    check_required({"seccomp": "active"}, ["seccomp", "scrubbed-env"])
    with pytest.raises(IsolationUnavailable, match=r"landlock \(unavailable: ENOSYS\)"):
        check_required({"landlock": "unavailable: ENOSYS"}, ["landlock"])


async def test_a_launcher_refuses_a_sandbox_missing_a_required_layer() -> None:
    # Spawned directly (no zygote), a sandbox has no parent-death signal.
    launcher = SandboxLauncher(events=EventBus(), max_output_chars=100, use_zygote=False,
                               require_isolation=("seccomp", "parent-death-signal"))
    async with launcher.serving(), trio.open_nursery() as nursery:
        with pytest.raises(IsolationUnavailable, match="parent-death-signal"):
            await launcher.open(nursery, context="c", owner=OWNER)
    assert sandbox_descendants() == []


async def test_a_pool_on_demand_fills_only_once_a_second_sandbox_is_asked_for() -> None:
    # A run at depth 1 opens its root's sandbox only: no fork is spent on a pool.
    launcher = SandboxLauncher(events=EventBus(), max_output_chars=100, pool_size=2,
                               pool_on_demand=True)
    async with trio.open_nursery() as nursery, launcher.serving():
        first = await launcher.open(nursery, context="root", owner=OWNER)
        await trio.sleep(0.5)  # time enough to fork two, were the pool filling
        assert launcher.pooled == 0
        second = await launcher.open(nursery, context="child", owner=OWNER)
        with trio.fail_after(30):
            while launcher.pooled < 2:  # noqa: ASYNC110 (the launcher's own count)
                await trio.sleep(0.01)
        for box in (first, second):
            await box.aclose()
    assert sandbox_descendants() == []


async def test_a_pool_that_does_not_refill_forks_its_sandboxes_once() -> None:
    # A run with child calls: the pool forks the first children's sandboxes while the
    # root's first step is generated; those taken are not replaced, so the run does not
    # end with sandboxes forked for nobody (later children fork theirs during their step).
    bus = EventBus()
    launcher = SandboxLauncher(events=bus, max_output_chars=100, pool_size=2,
                               pool_refills=False)
    async with trio.open_nursery() as nursery, launcher.serving():
        await launcher.wait_pool_full()
        pooled = [await launcher.open(nursery, context=f"p{i}", owner=OWNER) for i in range(2)]
        forked = await launcher.open(nursery, context="f", owner=OWNER)
        await trio.sleep(0.5)  # time enough to fork two, were the pool refilling
        assert launcher.pooled == 0
        with trio.fail_after(1):
            await launcher.wait_pool_full()  # filled once: nothing more to wait for
        outputs = [(await b.execute("print(context)", echo_bridge, limit=5)).output
                   for b in (*pooled, forked)]
        assert outputs == ["p0\n", "p1\n", "f\n"]
        for box in (*pooled, forked):
            await box.aclose()
    started = [e.pid for e in bus.events if isinstance(e, SandboxStarted)]
    assert len(set(started)) == 3
    assert sandbox_descendants() == []
