"""The journal store's semantics, the same on SQLite and PostgreSQL, on a fake clock."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from pathlib import Path

import pytest

from rlm.errors import JournalError, UnknownVolleyError, UsageError
from rlm.journal._open import open_store
from rlm.journal.records import (
    Owner,
    Spend,
    TaskRow,
    Verdict,
    VerdictRow,
    local_host,
    pid_alive,
    process_started,
)
from rlm.journal.store import JournalStore
from rlm.volley.output import format_summary
from rlm.volley.readback import stored_result
from tests.journal_store_fixtures import A, B, FakeClock, RecordingSQLite, task_specs


def test_a_dead_worker_of_this_host_is_not_live_and_its_row_goes(
    store: JournalStore, clock: FakeClock
) -> None:
    store.create_volley("v1", {}, task_specs(3))
    here = local_host()
    dead, survivor = Owner(here, 101, "dead"), Owner(here, 102, "survivor")
    for owner in (dead, survivor, A):
        store.register_worker("v1", owner)
    gone = {101, A.pid}  # A's pid on this host means nothing: A is another host's

    def alive(pid: int, started: int | None) -> bool:
        return pid not in gone

    assert store.live_workers("v1", 60, alive) == 2  # survivor and A
    assert store.live_workers("v1", 60, lambda pid, _: True) == 2  # the dead one's row is gone
    clock.now += 90
    store.heartbeat(survivor, "v1")
    assert store.live_workers("v1", 60, alive) == 1  # A counted until its heartbeat went stale


def test_a_task_keeps_its_claim_time_apart_from_its_holders_process_start(
    store: JournalStore, clock: FakeClock
) -> None:
    """``started_at`` is when the task was claimed (the journal's clock); the holder's
    process start time (clock ticks since boot) goes only into ``claimed_by``."""
    store.create_volley("v1", {}, task_specs(2))
    worker = Owner.here("w")  # a live process: the volley shows as running
    store.register_worker("v1", worker)
    claimed = store.claim("v1", worker, 2)
    at = store.now()  # on PostgreSQL, the server's clock
    assert [t.started_at for t in claimed] == [at, at]
    rows = store.tasks("v1")
    assert [t.started_at for t in rows] == [at, at]
    assert [t.claimed_by for t in rows] == [worker, worker]
    clock.now += 3
    assert stored_result(store, "v1").summary.duration_sec == 0.0  # nothing finished yet
    store.finish("v1", [Verdict(1, "done", output="one")])
    running = stored_result(store, "v1")
    assert running.status == "running" and running.summary.duration_sec == 3.0
    clock.now += 2
    store.leave("v1", worker, [2], Spend())  # its row goes: finished volleys show it too
    store.claim("v1", A, 1)
    clock.now += 1
    store.finish("v1", [Verdict(2, "done", output="two")])
    done = stored_result(store, "v1")
    assert done.status == "succeeded" and done.summary.duration_sec == 6.0
    assert " in 6s" in format_summary(done).splitlines()[1]


def test_a_claim_returns_each_task_as_a_later_read_of_it(store: JournalStore) -> None:
    """What claim() returns is the row tasks() reads right after, the holder's process
    start time included (``Owner.started`` takes no part in comparing owners)."""
    store.create_volley("v1", {}, task_specs(3))
    registered = Owner("host-a", 11, "wa", started=777)
    store.register_worker("v1", registered)

    def starts(rows: Sequence[TaskRow]) -> list[int | None]:
        return [None if t.claimed_by is None else t.claimed_by.started for t in rows]

    claimed = store.claim("v1", registered, 2)
    assert starts(claimed) == [777, 777]
    assert claimed == store.tasks("v1")[:2] and starts(store.tasks("v1")[:2]) == [777, 777]
    # A worker that registered no start time (or none at all) has None, read either way.
    unregistered = Owner("host-b", 22, "wb", started=888)
    assert starts(store.claim("v1", unregistered, 1)) == [None] == starts(store.tasks("v1")[2:])


def test_a_dead_worker_holding_claims_keeps_its_row_until_they_are_reopened(
    store: JournalStore,
) -> None:
    store.create_volley("v1", {}, task_specs(3))
    here = local_host()
    dead = Owner(here, 101, "dead", started=777)
    live = Owner(here, 102, "live", started=888)
    for owner in (dead, live):
        store.register_worker("v1", owner)
    store.claim("v1", dead, 1)

    def alive(pid: int, started: int | None) -> bool:
        return pid != dead.pid

    assert store.live_workers("v1", 60, alive) == 1
    assert store.live_workers("v1", 60, alive) == 1
    # Its row, with its start time, is still there for the claim it holds ...
    assert store.tasks("v1")[0].claimed_by == dead
    assert store.live_workers("v1", 60, lambda pid, started: True) == 2
    assert [r.index for r in store.recover_dead_local("v1", alive)] == [1]
    store.register_worker("v1", dead)  # back, as recover_dead_local removed it
    store.claim("v1", dead, 1)
    store.release("v1", dead, [1])
    # ... and goes once it holds none.
    assert store.live_workers("v1", 60, alive) == 1
    assert store.live_workers("v1", 60, lambda pid, started: True) == 1


def test_counting_live_workers_reads_no_task_while_every_worker_lives(tmp_path: Path) -> None:
    """It runs every second per worker under SQLite's write lock: with every worker
    alive it must not look at the volley's tasks at all."""
    backend = RecordingSQLite(tmp_path / "j.sqlite3")
    store = JournalStore(backend, clock=FakeClock())
    try:
        store.create_volley("v1", {}, task_specs(20))
        workers = [Owner(local_host(), 100 + i, f"w{i}") for i in range(4)]
        for owner in workers:
            store.register_worker("v1", owner)
            store.claim("v1", owner, 3)
        backend.statements.clear()
        assert store.live_workers("v1", 60, lambda pid, started: True) == 4
        assert backend.statements and not [s for s in backend.statements if "tasks" in s]
        # A dead one's claims are looked for: its row stays while it holds some.
        assert store.live_workers("v1", 60, lambda pid, started: pid != 100) == 3
        assert [s for s in backend.statements if "tasks" in s]
        assert store.live_workers("v1", 60, lambda pid, started: True) == 4
    finally:
        store.close()


def _reused(worker: str) -> Owner:
    """A worker of this host whose pid is this process's, but which started at another
    time: its process is gone and the pid was reused (by this test's process)."""
    me = os.getpid()
    started = process_started(me)
    if started is None:
        pytest.skip("no /proc/PID/stat here: a process's start time cannot be read")
    return Owner(local_host(), me, worker, started=started + 1)


def test_pid_alive_tells_a_reused_pid_by_its_start_time() -> None:
    me = os.getpid()
    started = process_started(me)
    if started is None:
        pytest.skip("no /proc/PID/stat here: a process's start time cannot be read")
    assert pid_alive(me) and pid_alive(me, started)
    assert not pid_alive(me, started + 1)


def test_a_claim_whose_pid_was_reused_is_reopened_at_once(store: JournalStore) -> None:
    """The holder's pid runs, but it is another process (its start time differs from
    the one its worker registered): the claim is reopened, the worker's row goes.  A
    live holder (the recorded start time matches) keeps its claim."""
    store.create_volley("v1", {}, task_specs(3))
    reused, live = _reused("reused"), Owner.here("live")
    for owner in (reused, live):
        store.register_worker("v1", owner)
    store.claim("v1", reused, 2)
    store.claim("v1", live, 1)
    assert store.live_workers("v1", 60) == 1  # the live one; the reused one holds claims
    recovered = store.recover_dead_local("v1", pid_alive)
    assert sorted(r.index for r in recovered) == [1, 2]
    assert {r.owner.worker for r in recovered if r.owner} == {"reused"}
    assert store.volley("v1").counts == {"open": 2, "in_progress": 1, "done": 0, "failed": 0}
    assert store.recover_dead_local("v1", pid_alive) == []
    # The reused worker's row went with its claims; the live one's stays.
    store.claim("v1", live, 2)
    assert store.recover_dead_local("v1", pid_alive) == []
    assert store.live_workers("v1", 60) == 1


def test_a_reused_pid_holding_no_claim_is_not_live_and_its_row_goes(
    store: JournalStore,
) -> None:
    store.create_volley("v1", {}, task_specs(1))
    store.register_worker("v1", _reused("reused"))
    store.register_worker("v1", Owner.here("live"))
    assert store.live_workers("v1", 60) == 1
    # Its row is gone: a count that takes every pid for alive finds only the live one.
    assert store.live_workers("v1", 60, lambda pid, started: True) == 1


def test_a_verdict_group_sent_again_adds_its_spend_once(store: JournalStore) -> None:
    """A worker retries a group whose writer died before answering: no row and no
    spend twice; a new group of the same worker adds its own."""
    store.create_volley("v1", {}, task_specs(3))
    store.register_worker("v1", A)
    store.claim("v1", A, 3)
    rows: list[VerdictRow] = [(1, "done", "x", {}, 0.25, None), (2, "done", "y", {}, 0.25, None)]
    assert store.finish_rows("v1", rows, Spend(0.5, 2, 3, 4), (A.worker, 1)) == 2
    assert store.finish_rows("v1", rows, Spend(0.5, 2, 3, 4), (A.worker, 1)) == 0
    assert store.spent("v1") == Spend(0.5, 2, 3, 4)
    third: list[VerdictRow] = [(3, "failed", None, {}, None, "e")]
    assert store.finish_rows("v1", third, Spend(0.0, 1, 0, 0), (A.worker, 2)) == 1
    assert store.spent("v1") == Spend(0.5, 3, 3, 4)


def test_claims_take_open_tasks_in_order_and_never_twice(store: JournalStore) -> None:
    store.create_volley("v1", {"model": "fixture"}, task_specs(5))
    first = store.claim("v1", A, 2)
    second = store.claim("v1", B, 10)
    assert [t.index for t in first] == [1, 2]
    assert [t.index for t in second] == [3, 4, 5]
    assert store.claim("v1", A, 1) == []
    assert first[0].claimed_by == A and first[0].attempts == 1 and first[0].status == "in_progress"
    assert first[0].spec == {"index": 1, "prompt": "task 1"}


def test_claims_of_indices_and_of_specs_take_the_lowest_opentask_specs(store: JournalStore) -> None:
    store.create_volley("v1", {}, task_specs(6))
    assert store.claim_indices("v1", A, 2) == [1, 2]
    assert store.claim_specs("v1", B, 3) == [
        {"index": i, "prompt": f"task {i}"} for i in (3, 4, 5)
    ]
    assert store.release("v1", A, [2]) == 1
    assert store.claim_indices("v1", B, 10) == [2, 6]
    assert store.claim_indices("v1", A, 10) == [] and store.claim_specs("v1", A, 10) == []
    rows = store.tasks("v1")
    assert [r.claimed_by for r in rows] == [A, B, B, B, B, B]
    assert [r.attempts for r in rows] == [1, 2, 1, 1, 1, 1]
    assert all(r.status == "in_progress" and r.heartbeat_at is not None for r in rows)


def test_finish_keeps_the_first_verdict_and_counts_spend(store: JournalStore) -> None:
    store.create_volley("v1", {}, task_specs(2))
    store.claim("v1", A, 2)
    done = Verdict(
        1, "done", output="one", cost=0.5, usage={"tokens_input": 3}, spend=Spend(0.5, 1, 5, 2)
    )
    assert store.finish("v1", [done]) == 1
    assert store.finish("v1", [Verdict(1, "failed", error="late")]) == 0
    rows = store.tasks("v1")
    assert (rows[0].status, rows[0].output, rows[0].usage) == ("done", "one", {"tokens_input": 3})
    assert rows[0].finished_at is not None and rows[0].claimed_by == A
    assert store.spent("v1") == Spend(0.5, 1, 5, 2)


def test_a_group_of_verdicts_keeps_every_character_and_number(store: JournalStore) -> None:
    # A group is written as one JSON document: nothing may be lost or changed on the way.
    texts = ['say "hi"\n\tand \\ back', "ünïcödé ✓ 😀", "", "'; DROP TABLE tasks; --", "[1]"]
    store.create_volley("v1", {}, task_specs(len(texts) + 1))
    store.claim("v1", A, 10)
    usage = {"tokens_input": 2**40, "nested": {"x": [1, 2.5, None, "é"]}}
    verdicts = [
        Verdict(i + 1, "done", output=text, cost=0.1 + 0.2 * i / 3, usage=usage)
        for i, text in enumerate(texts)
    ]
    verdicts.append(Verdict(len(texts) + 1, "failed", error="boom ✗ 'quoted'", cost=None))
    assert store.finish("v1", verdicts) == len(verdicts)
    rows = store.tasks("v1")
    assert [r.output for r in rows] == [*texts, None]
    assert [r.cost for r in rows] == [v.cost for v in verdicts]  # exactly, not approximately
    assert [r.error for r in rows] == [None] * len(texts) + ["boom ✗ 'quoted'"]
    assert [r.usage for r in rows] == [usage] * len(texts) + [{}]
    assert [r.status for r in rows] == ["done"] * len(texts) + ["failed"]


def test_the_first_verdict_wins_within_one_group(store: JournalStore) -> None:
    store.create_volley("v1", {}, task_specs(1))
    store.claim("v1", A, 1)
    group = [Verdict(1, "done", output="first"), Verdict(1, "failed", error="second")]
    assert store.finish("v1", group) == 1
    assert (store.tasks("v1")[0].status, store.tasks("v1")[0].output) == ("done", "first")


def test_release_reopens_only_the_owners_claims(store: JournalStore) -> None:
    store.create_volley("v1", {}, task_specs(2))
    store.claim("v1", A, 2)
    assert store.release("v1", B, [1, 2]) == 0
    assert store.release("v1", A, [2], Spend(0.1, 1, 0)) == 1
    assert [t.index for t in store.claim("v1", B, 5)] == [2]
    assert store.tasks("v1")[1].attempts == 2
    assert store.spent("v1").calls == 1


def test_a_heartbeating_claim_is_never_reclaimed(store: JournalStore, clock: FakeClock) -> None:
    store.create_volley("v1", {}, task_specs(2))
    store.claim("v1", A, 1)
    store.claim("v1", B, 1)
    for minute in range(20):  # both run for 10 minutes, heartbeating every 30 s; B dies at 5
        clock.now += 30
        assert store.heartbeat(A, "v1") == [1]
        if minute < 10:
            assert store.heartbeat(B, "v1") == [2]
        recovered = store.recover_stale("v1", 60)
        if minute == 12:  # B silent for 90 s > 60 s
            assert [(r.index, r.owner) for r in recovered] == [(2, B)]
            assert recovered[0].idle_s == pytest.approx(90)
        else:
            assert recovered == []
    assert store.tasks("v1")[1].status == "open"
    log = store.log("stale_recovery")
    assert len(log) == 1 and log[0][2:4] == ("v1", 2) and "host-b/22/wb" in log[0][4]
    # B's late verdict still lands if nobody finished the task first (first verdict wins).
    assert store.finish("v1", [Verdict(2, "done", output="late but first")]) == 1


def test_skewed_machine_clocks_agree_on_a_postgresql_heartbeat(pg_url: str) -> None:
    """Two machines an hour apart: B never reclaims A's live claim, and does reclaim a dead one."""
    clock_a, clock_b = FakeClock(), FakeClock()
    clock_b.now += 3600  # B's clock runs an hour ahead of A's
    a, b = open_store(pg_url, clock=clock_a), open_store(pg_url, clock=clock_b)
    try:
        a.create_volley("v1", {}, task_specs(2))
        a.claim("v1", A, 1)
        for _ in range(4):  # A heartbeats every 30 s; B sweeps with a 60 s timeout
            clock_a.now += 30
            clock_b.now += 30
            a.heartbeat(A, "v1")
            assert b.recover_stale("v1", 60) == []
        clock_a.now += 90  # A dies; 90 s pass on both machines
        clock_b.now += 90
        recovered = b.recover_stale("v1", 60)
        assert [r.index for r in recovered] == [1]
        assert recovered[0].idle_s == pytest.approx(90, abs=5)
    finally:
        a.close()
        b.close()


def test_dead_local_claims_are_recovered_at_once(store: JournalStore) -> None:
    here = Owner.here("dead")
    store.create_volley("v1", {}, task_specs(3))
    store.claim("v1", here, 2)
    store.claim("v1", A, 1)  # another host: left to the stale timeout
    recovered = store.recover_dead_local("v1", alive=lambda pid, started: False)
    assert sorted(r.index for r in recovered) == [1, 2]
    assert store.recover_dead_local("v1", alive=lambda pid, started: True) == []



def test_join_registers_and_reopens_orphans_and_leave_gives_back_and_retires(
    store: JournalStore, clock: FakeClock
) -> None:
    """A worker's start and end are one transaction each, with the same effects as the
    calls they stand for."""
    dead = Owner.here("dead")
    store.create_volley("v1", {}, task_specs(5))
    store.claim("v1", dead, 2)  # a process of this host that is gone: reopened at once
    store.claim("v1", A, 1)  # another host's, silent for 90 s: stale
    clock.now += 90
    store.claim("v1", B, 1)  # another host's, fresh: kept
    joined = store.join("v1", Owner.here("new"), lambda pid, started: False, 60)
    assert sorted((r.index, r.reason.startswith("its worker")) for r in joined) == [
        (1, True), (2, True), (3, False)
    ]
    assert store.volley("v1").counts == {"open": 4, "in_progress": 1, "done": 0, "failed": 0}
    assert store.join("v1", B, lambda pid, started: True, 60) == []
    assert store.live_workers("v1", 60) == 2
    assert store.leave("v1", B, [4, 5], Spend(0.25, 2, 3, 4)) == 1  # 5 was never B's
    assert store.live_workers("v1", 60) == 1  # B retired
    assert store.volley("v1").counts["open"] == 5
    assert store.spent("v1") == Spend(0.25, 2, 3, 4)
    assert [kind for _, kind, *_ in store.log()] == ["stale_recovery"] * 3


def test_reopen_failed_and_list(store: JournalStore, clock: FakeClock) -> None:
    store.create_volley("v1", {"model": "m"}, task_specs(3))
    clock.now += 1
    store.create_volley("v2", {}, task_specs(1))
    store.claim("v1", A, 3)
    store.finish("v1", [Verdict(1, "done", output="x"), Verdict(2, "failed", error="boom")])
    v1 = store.volley("v1")
    assert v1.counts == {"open": 0, "in_progress": 1, "done": 1, "failed": 1}
    assert v1.settings == {"model": "m"}
    assert [v.volley_id for v in store.volleys()] == ["v2", "v1"]
    assert store.resolve("last") == "v2"
    assert store.reopen_failed("v1") == 1
    assert store.tasks("v1")[1].status == "open" and store.tasks("v1")[1].error is None


def test_unknown_and_duplicate_volleys_are_clear_errors(store: JournalStore) -> None:
    with pytest.raises(UnknownVolleyError, match="holds no volley") as empty:
        store.resolve("last")
    assert empty.value.ref == "last" and empty.value.journal == store.where
    store.create_volley("v1", {}, task_specs(1))
    with pytest.raises(JournalError, match="already exists") as exists:
        store.create_volley("v1", {}, task_specs(1))
    assert not isinstance(exists.value, UnknownVolleyError)
    for ask in (store.resolve, store.volley, store.spent):
        with pytest.raises(UnknownVolleyError, match="no volley 'nope'") as unknown:
            ask("nope")
        # A library user can tell a mistyped id from a journal that failed: the
        # type says it, a usage error (exit 2) and still a JournalError.
        assert isinstance(unknown.value, UsageError) and isinstance(unknown.value, JournalError)
        assert unknown.value.exit_code == 2 and unknown.value.ref == "nope"
    with pytest.raises(ValueError, match="API key"):
        store.create_volley("v2", {"api_key": "sk-x"}, task_specs(1))


def test_response_cache_round_trip(store: JournalStore) -> None:
    assert store.cached("d1") is None
    store.cache([("d1", "openai", "m", '{"text": "a"}')])
    store.cache([("d1", "openai", "m", '{"text": "b"}')])
    assert store.cached("d1") == '{"text": "b"}'


def test_reopening_keeps_everything(journal_spec: str, clock: FakeClock) -> None:
    first = open_store(journal_spec, clock=clock)
    first.create_volley("v1", {}, task_specs(2))
    first.close()
    second = open_store(journal_spec, clock=clock)
    assert second.volley("v1").total == 2
    second.close()


def test_the_shared_context_is_kept_with_its_digest(store: JournalStore) -> None:
    store.create_volley("v1", {}, task_specs(1), context=["doc one", "doc two"])
    store.create_volley("v2", {}, task_specs(1))
    assert store.context("v1") == ["doc one", "doc two"] and store.context("v2") == []
    digest = store.volley("v1").context_digest
    assert digest is not None and len(digest) == 64 and store.volley("v2").context_digest is None


def test_the_local_host_name_tells_apart_machines_and_containers_that_share_a_host_name(
    store: JournalStore,
) -> None:
    """A claim of "this host" whose pid is gone is reopened at once, so a machine with the
    same host name, or a container sharing the host's name in its own PID namespace, must
    not count as this host: its live workers would lose their tasks."""
    init = 4026531836
    here = local_host("box", "2b7adfec-11dc", init)
    assert here == "box~2b7adfec"
    assert local_host("box", "9f00aa11-22bb", init) != here  # another machine named box
    assert local_host("box", "2b7adfec-11dc", 4026532999) == "box~2b7adfec~pidns4026532999"
    assert local_host("box", "", init) == "box"  # no boot id to read (not Linux)
    assert Owner.here().host == local_host()
    store.create_volley("v1", {}, task_specs(2))
    store.claim("v1", Owner(socket.gethostname(), 11, "same-name"), 1)  # not local_host()
    assert store.recover_dead_local("v1", alive=lambda pid, started: False) == []
