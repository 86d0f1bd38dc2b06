"""The zygote started at process start (rlm._sandbox.early): adopted by a run, reaped always."""

from __future__ import annotations

import functools
import os
from typing import Any

from rlm import RLM
from rlm._run.assembly import default_launcher
from rlm._sandbox.early import EarlyZygote
from rlm.fixtures.needle import generate_needle
from tests.run.test_invariants import sandbox_descendants

FIXTURE = generate_needle(20_000, seed=5)


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(") ", 1)[1].split()[1])


def exists(pid: int) -> bool:
    """Whether ``pid`` is still a process (a zombie counts: it was not reaped)."""
    return os.path.exists(f"/proc/{pid}")


def model_with(early: EarlyZygote, parents: list[int]) -> RLM:
    def watch(event: Any) -> None:
        if event.kind == "sandbox_started":
            parents.append(parent_of(event.pid))

    launcher = functools.partial(default_launcher, early_zygote=early)
    return RLM(provider="fixture", sinks=[watch], sandboxes=launcher)


async def test_a_run_forks_its_sandboxes_from_the_early_zygote_and_reaps_it() -> None:
    early = EarlyZygote.begin()
    zygote = early.pid
    assert zygote is not None and zygote in sandbox_descendants()
    parents: list[int] = []
    result = await model_with(early, parents).acompletion(FIXTURE.question, FIXTURE.text)
    assert result.answer == FIXTURE.answer
    assert parents and set(parents) == {zygote}
    assert early.take() is None  # the run took it over ...
    early.close()  # ... so closing it again is harmless
    assert not exists(zygote)  # ... and reaped it with everything else
    assert sandbox_descendants() == set()


async def test_a_second_run_starts_its_own_zygote() -> None:
    early = EarlyZygote.begin()
    zygote = early.pid
    first: list[int] = []
    second: list[int] = []
    for parents in (first, second):
        model = model_with(early, parents)
        result = await model.acompletion(FIXTURE.question, FIXTURE.text)
        assert result.answer == FIXTURE.answer
    assert set(first) == {zygote}
    assert second and zygote not in second
    assert sandbox_descendants() == set()


def test_an_early_zygote_no_run_took_is_stopped_and_reaped_on_close() -> None:
    with EarlyZygote.begin() as early:
        zygote = early.pid
        assert zygote is not None and exists(zygote)
    assert early.pid is None
    assert not exists(zygote)


async def test_a_zygote_begun_with_reap_at_close_is_reaped_by_close_not_by_the_run() -> None:
    early = EarlyZygote.begin(reap_at_close=True)  # as the `rlm` command begins it
    zygote = early.pid
    assert zygote is not None
    parents: list[int] = []
    result = await model_with(early, parents).acompletion(FIXTURE.question, FIXTURE.text)
    assert result.answer == FIXTURE.answer
    assert set(parents) == {zygote}
    assert exists(zygote)  # exited or exiting, but nobody reaped it: the run did not wait
    early.close()
    assert not exists(zygote)
    assert sandbox_descendants() == set()
