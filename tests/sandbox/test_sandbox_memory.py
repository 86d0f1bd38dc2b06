"""Sandbox memory: a per-sandbox limit (``sandbox_memory``) and a ceiling on what a run's live
sandboxes really use together, derived from the machine's memory, that waits (saying so in the
trace) or fails clearly."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio

from rlm import RLM
from rlm._config import DEFAULTS
from rlm._events import EventBus
from rlm._sandbox.launcher import DEFAULT_MEMORY_BYTES, SandboxLauncher
from rlm._sandbox.memory import (
    CEILING_SHARE,
    POLL_S,
    START_ESTIMATE,
    CgroupGauge,
    MemoryCeiling,
    MemoryWait,
    ProcGauge,
    machine_memory,
    memory_ceiling,
)
from rlm._sandbox.process import SandboxIdentity
from rlm.errors import SandboxError
from rlm.providers.base import CompletionRequest
from rlm.testing.provider import FunctionProvider, assistant_turns
from tests.helpers import repl

MIB = 1 << 20
GIB = 1 << 30
ROOT = SandboxIdentity("root", None, 0)


def child(name: str, parent: str = "root", depth: int = 1) -> SandboxIdentity:
    return SandboxIdentity(name, parent, depth)


class FakeGauge:
    """What the sandboxes use, as a test says it."""

    name = "fake"

    def __init__(self, used: int = 0) -> None:
        self.use = used
        self.pids: set[int] = set()

    def add(self, pid: int) -> None:
        self.pids.add(pid)

    def remove(self, pid: int) -> None:
        self.pids.discard(pid)

    def used(self) -> int:
        return self.use

    def close(self) -> None:
        self.pids.clear()


def test_the_defaults_fit_analysis_work_and_the_machine() -> None:
    assert GIB <= DEFAULTS.sandbox_memory <= 2 * GIB
    assert DEFAULTS.sandbox_memory == DEFAULT_MEMORY_BYTES
    assert machine_memory() > 0
    assert memory_ceiling() == int(machine_memory() * CEILING_SHARE)


async def test_sandboxes_are_admitted_on_what_they_use_not_on_their_caps() -> None:
    # Caps of 2 GiB under a 4 GiB ceiling would let 2 sandboxes in; they use 100 MiB.
    gauge = FakeGauge(100 * MIB)
    ceiling = MemoryCeiling(per_sandbox=2 * GIB, ceiling=4 * GIB, gauge=gauge)
    await ceiling.acquire(ROOT)
    for i in range(8):
        await ceiling.acquire(child(f"c{i}"))
        ceiling.attach(child(f"c{i}"), 1000 + i)
    assert ceiling.held == 9 and len(gauge.pids) == 8
    ceiling.release(child("c3"), 1003)
    assert ceiling.held == 8 and 1003 not in gauge.pids


async def test_an_unmeasured_sandbox_counts_as_a_start_estimate() -> None:
    gauge = FakeGauge(0)
    ceiling = MemoryCeiling(per_sandbox=GIB, ceiling=GIB, gauge=gauge)
    await ceiling.acquire(ROOT)
    assert ceiling.used() == START_ESTIMATE  # admitted, not up yet
    ceiling.attach(ROOT, 42)
    gauge.use = 10 * MIB
    assert ceiling.used() == START_ESTIMATE  # never below the estimate per sandbox
    gauge.use = 300 * MIB
    assert ceiling.used() == 300 * MIB


async def test_a_start_past_the_ceiling_waits_says_so_and_goes_when_use_falls(
    autojump_clock: Any,
) -> None:
    gauge = FakeGauge(0)
    waits: list[MemoryWait] = []
    ceiling = MemoryCeiling(per_sandbox=GIB, ceiling=GIB, gauge=gauge, on_wait=waits.append)
    await ceiling.acquire(ROOT)
    await ceiling.acquire(child("a"))
    ceiling.attach(ROOT, 1)
    ceiling.attach(child("a"), 2)
    gauge.use = 980 * MIB  # no room for another start's estimate
    got: list[str] = []

    async def start(owner: SandboxIdentity) -> None:
        await ceiling.acquire(owner)
        got.append(owner.call_id)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(start, child("b"))
        await trio.sleep(1)
        nursery.start_soon(start, child("c"))
        await trio.sleep(10)
        assert got == []
        assert [(w.owner.call_id, w.used, w.ceiling, w.sandboxes, w.gauge) for w in waits] == [
            ("b", 980 * MIB, GIB, 2, "fake"), ("c", 980 * MIB, GIB, 2, "fake")]
        gauge.use = 900 * MIB  # room for one more start, no sandbox closed
        await trio.sleep(POLL_S * 2)
        assert got == ["b"]  # first come, first served
        ceiling.release(child("a"))
        gauge.use = 500 * MIB
    assert got == ["b", "c"] and ceiling.held == 3 and len(waits) == 2


async def test_a_start_that_could_only_wait_forever_fails_clearly() -> None:
    gauge = FakeGauge(0)
    ceiling = MemoryCeiling(per_sandbox=GIB, ceiling=GIB, gauge=gauge)
    await ceiling.acquire(ROOT)
    await ceiling.acquire(child("a"))
    gauge.use = GIB
    # Both holders are ancestors of the grandchild: neither can close before it runs.
    with pytest.raises(SandboxError, match=r"no memory for another sandbox.*max_concurrent"):
        await ceiling.acquire(child("a.1", parent="a", depth=2))
    assert ceiling.held == 2


async def test_a_cancelled_wait_admits_nothing(autojump_clock: Any) -> None:
    gauge = FakeGauge(0)
    ceiling = MemoryCeiling(per_sandbox=GIB, ceiling=GIB, gauge=gauge)
    await ceiling.acquire(ROOT)
    await ceiling.acquire(child("a"))
    gauge.use = GIB
    with trio.move_on_after(5):
        await ceiling.acquire(child("b"))
    assert ceiling.held == 2
    ceiling.release(child("a"))
    gauge.use = 0
    await ceiling.acquire(child("c"))  # no one is waiting any more: at once
    assert ceiling.held == 2


async def test_one_sandbox_always_fits_however_small_the_machine() -> None:
    ceiling = MemoryCeiling(per_sandbox=2 * GIB, ceiling=GIB, gauge=FakeGauge(4 * GIB))
    await ceiling.acquire(ROOT)
    assert ceiling.held == 1


def test_pss_is_read_from_proc_and_rss_where_pss_is_not_kept(tmp_path: Path) -> None:
    real = ProcGauge()
    real.add(os.getpid())
    assert real.used() > 10 * MIB  # this interpreter, measured
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "smaps_rollup").write_text("Rss:  5000 kB\nPss:  3000 kB\n")
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "status").write_text("Name: python\nVmRSS:\t  2000 kB\n")
    fake = ProcGauge(tmp_path)
    for pid in (7, 8, 9):  # 9 is gone
        fake.add(pid)
    assert fake.used() == 5000 * 1024


def _cgroup_tree(tmp_path: Path, own: str) -> tuple[Path, Path]:
    """A /proc saying this process is in cgroup v2 ``own``, and where that hierarchy is."""
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(f"1:memory:/legacy\n0::{own}\n")
    root = tmp_path / "cgroup"
    (proc / "self" / "mountinfo").write_text(
        "30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        f"41 31 0:38 / {root} rw,relatime - cgroup2 cgroup2 rw\n")
    (root / own.strip("/")).mkdir(parents=True)
    return root, proc


def test_one_cgroup_holds_the_runs_sandboxes_where_the_kernel_allows(tmp_path: Path) -> None:
    root, proc = _cgroup_tree(tmp_path, "/user.slice/rlm")
    gauge = CgroupGauge.create(3 * GIB, proc=proc)
    assert gauge is not None
    assert gauge.path.parent == root / "user.slice" / "rlm"
    assert (gauge.path / "memory.max").read_text() == str(3 * GIB)
    gauge.add(1234)
    assert (gauge.path / "cgroup.procs").read_text() == "1234"
    (gauge.path / "memory.current").write_text(str(200 * MIB))
    assert gauge.used() == 200 * MIB
    (gauge.path / "cgroup.procs").unlink()
    (gauge.path / "cgroup.procs").mkdir()  # a move the kernel refuses: measured apart
    (proc / "4321").mkdir()
    (proc / "4321" / "smaps_rollup").write_text("Pss:  1024 kB\n")
    gauge.add(4321)
    assert gauge.used() == 201 * MIB
    (gauge.path / "cgroup.procs").rmdir()
    for name in ("memory.max", "memory.current"):  # the kernel's own files
        (gauge.path / name).unlink()
    gauge.close()
    assert not gauge.path.exists()


def test_no_cgroup_where_the_kernel_does_not_allow_one(tmp_path: Path) -> None:
    _, proc = _cgroup_tree(tmp_path, "/rlm")
    (proc / "self" / "cgroup").write_text("4:memory:/only-v1\n")  # cgroup v1: no 0:: line
    assert CgroupGauge.create(GIB, proc=proc) is None
    (proc / "self" / "cgroup").write_text("0::/missing\n")  # not there, or not writable
    assert CgroupGauge.create(GIB, proc=proc) is None
    (proc / "self" / "cgroup").write_text("0::/rlm\n")
    (proc / "self" / "mountinfo").write_text("25 1 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n")
    assert CgroupGauge.create(GIB, proc=proc) is None  # no cgroup2 mounted: only a tmpfs


async def test_sandbox_memory_is_each_sandboxs_limit() -> None:
    provider = FunctionProvider.scripted(
        [repl("try:\n    x = bytearray(700 * 2 ** 20)\nexcept MemoryError:\n    print('refused')"),
         "FINAL(done)"]
    )
    model = RLM(providers={"root": provider, "sub": provider}, sandbox_memory=512 << 20)
    result = await model.acompletion("q", "ctx")
    executed = next(e for e in result.trace if e["event"] == "code_executed")
    assert executed["output"] == "refused\n"


def _launcher_under(ceiling: int) -> Any:
    def launcher(config: Any, events: EventBus) -> SandboxLauncher:
        return SandboxLauncher(events=events, max_output_chars=config.max_output_chars,
                               memory_bytes=config.sandbox_memory, ceiling=ceiling)
    return launcher


def _query(request: CompletionRequest) -> str:
    """The question a call was asked (the last line of its first user message)."""
    first = next(m["content"] for m in request.messages if m["role"] == "user")
    return first.strip().splitlines()[-1].removeprefix("Query:").strip()


async def test_children_that_use_little_memory_all_run_at_once_under_the_default_cap() -> None:
    # Their caps (2 GiB each) would let 2 of 8 run at a time under a 4 GiB ceiling.
    children = 8
    second_steps = 0
    all_up = trio.Event()

    async def reply(request: CompletionRequest) -> str:
        nonlocal second_steps
        if request.depth == 0:
            if assistant_turns(request) == 0:
                names = [f"child {i}" for i in range(children)]
                return repl(f"print(llm_query_batched({names!r}))")
            return "FINAL(done)"
        if assistant_turns(request) == 0:
            return repl("print('small')")
        # Every child's code has run in its sandbox, which it holds until it answers.
        second_steps += 1
        if second_steps == children:
            all_up.set()
        with trio.fail_after(60):
            await all_up.wait()
        return "FINAL(ok)"

    provider = FunctionProvider(reply)
    model = RLM(providers={"root": provider, "sub": provider}, max_depth=2, max_concurrent=16,
                sandboxes=_launcher_under(4 * GIB))
    result = await model.acompletion("q", "ctx")
    assert result.answer == "done"
    kinds = [e["event"] for e in result.trace]
    assert "sandbox_memory_wait" not in kinds
    assert kinds.count("sandbox_started") == children + 1


async def test_a_run_whose_sandboxes_really_use_memory_is_held_back_and_says_so() -> None:
    # Under a 400 MiB ceiling: child A holds 350 MiB while B starts a grandchild, which
    # waits until A has answered and closed its sandbox.
    a_holds = trio.Event()
    b1_waits = trio.Event()

    def seen(event: Any) -> None:
        if event.kind == "sandbox_memory_wait":
            b1_waits.set()

    async def reply(request: CompletionRequest) -> str:
        query, step = _query(request), assistant_turns(request)
        if request.depth == 0:
            return repl("print(llm_query_batched(['A', 'B']))") if step == 0 else "FINAL(done)"
        with trio.fail_after(60):
            if query == "A":
                if step == 0:
                    return repl("x = b'x' * (350 * 2 ** 20)\nprint(len(x))")
                a_holds.set()
                await b1_waits.wait()
                return "FINAL(a)"
            if query == "B":
                if step == 0:
                    await a_holds.wait()
                    return repl("print(llm_query('deep'))")
                return "FINAL(b)"
        return repl("print('deep')") if step == 0 else "FINAL(b1)"  # B1 needs its sandbox

    provider = FunctionProvider(reply)
    model = RLM(providers={"root": provider, "sub": provider}, max_depth=3, max_concurrent=8,
                sandbox_memory=GIB, sandboxes=_launcher_under(400 * MIB), sinks=[seen])
    result = await model.acompletion("q", "ctx")
    assert result.answer == "done"
    [wait] = [e for e in result.trace if e["event"] == "sandbox_memory_wait"]
    assert wait["depth"] == 2 and wait["ceiling_bytes"] == 400 * MIB
    assert wait["used_bytes"] >= 350 * MIB and wait["sandboxes"] == 3 and wait["gauge"] == "pss"
    started = {e["call_id"]: e["t"] for e in result.trace if e["event"] == "sandbox_started"}
    a_done = next(e["t"] for e in result.trace
                  if e["event"] == "call_finished" and e["call_id"] == "root.1")
    assert started[wait["call_id"]] > a_done  # admitted once A was gone


async def test_a_child_call_that_could_only_wait_forever_fails_with_a_message_in_its_slot(
) -> None:
    def root(request: CompletionRequest) -> str:
        if assistant_turns(request) == 0:
            return repl("x = b'x' * (300 * 2 ** 20)\nprint(llm_query('look'))")
        return "FINAL(done)"

    provider = FunctionProvider.scripted(root)
    # The root's sandbox uses most of the ceiling while its code waits for the child.
    model = RLM(providers={"root": provider, "sub": provider}, max_depth=2, sandbox_memory=GIB,
                sandboxes=_launcher_under(320 * MIB))
    with trio.fail_after(60):
        result = await model.acompletion("q", "ctx")
    assert result.answer == "done"
    output = next(e for e in result.trace if e["event"] == "code_executed" and e["depth"] == 0)
    assert "no memory for another sandbox" in output["output"]
