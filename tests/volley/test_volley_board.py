"""A volley's board read from its journal (SQLite and PostgreSQL, on a fake clock): who
holds what and how long ago it heartbeat, who did what, and how busy the pool was."""

from __future__ import annotations

import pytest

from rlm.journal import JournalStore, Owner, Spend
from rlm.volley.board import read_board
from tests.journal_store_fixtures import A, B, FakeClock, task_specs

SETTINGS = {"config": {"max_concurrent": 4}, "options": {"stale_timeout": 100.0}}


def _usage(request_sec: float | None, duration: float, tokens: tuple[int, int]) -> dict[str, float]:
    usage = {"duration_sec": duration, "tokens_input": tokens[0], "tokens_output": tokens[1]}
    if request_sec is not None:
        usage["request_sec"] = request_sec
    return usage


def _two_workers(store: JournalStore, clock: FakeClock) -> float:
    """Six tasks: A claims 1-2, B 3-4; 10 s later A answers 1 and B fails 3."""
    store.create_volley("v", SETTINGS, task_specs(6))
    start = store.now()
    store.claim("v", A, 2)
    store.claim("v", B, 2)
    clock.now += 10
    store.finish_rows("v", [
        (1, "done", "one", _usage(8.0, 9.0, (100, 20)), 0.01, None),
        (3, "failed", None, _usage(4.0, 5.0, (30, 0)), 0.002, "HTTP 500"),
    ], Spend(calls=2, input_tokens=130, output_tokens=20, cost=0.012))
    return start


def test_the_board_tallies_each_holder_and_the_pool(store: JournalStore, clock: FakeClock) -> None:
    start = _two_workers(store, clock)
    clock.now += 70
    board = read_board(store, "v")
    assert (board.total, board.done, board.failed, board.in_progress, board.open) == (6, 1, 1, 2, 2)
    assert board.max_concurrent == 4 and board.stale_timeout == 100.0
    by_worker = {w.tally.holder.worker: w for w in board.workers}
    a, b = by_worker["wa"], by_worker["wb"]
    assert (a.tally.holder.host, a.tally.holder.pid) == (A.host, A.pid)
    assert (a.tally.done, a.tally.failed, a.tally.in_progress) == (1, 0, 1)
    assert (b.tally.done, b.tally.failed, b.tally.in_progress) == (0, 1, 1)
    assert (a.tally.tokens, b.tally.tokens) == (120, 30)
    assert a.tally.cost == pytest.approx(0.01) and b.tally.cost == pytest.approx(0.002)
    # Busy is the time at the provider, not the time in a worker (permit waits).
    assert (a.tally.busy_s, b.tally.busy_s) == pytest.approx((8.0, 4.0))
    assert a.share == pytest.approx(8 / 12) and b.share == pytest.approx(4 / 12)
    # Still running: from the first claim until now.
    assert board.span_s == pytest.approx(store.now() - start)
    assert board.parallelism == pytest.approx(12 / 80)
    assert board.efficiency == pytest.approx(12 / 80 / 4)
    assert board.to_dict()["workers"][0]["share"] == pytest.approx(8 / 12, abs=1e-3)


def test_a_holding_nears_stale_then_is_stale_by_its_heartbeat(
    store: JournalStore, clock: FakeClock
) -> None:
    _two_workers(store, clock)
    clock.now += 50
    store.heartbeat(B, "v")  # B is alive; A has sent nothing since its claim, 60 s ago
    clock.now += 10
    states = {h.index: (h.holder, h.state) for h in read_board(store, "v").holdings}
    assert states == {2: (A, "ok"), 4: (B, "ok")}  # A's at 70 s of 100: not yet 3/4
    clock.now += 10
    states = {h.index: (h.holder, h.state) for h in read_board(store, "v").holdings}
    assert states == {2: (A, "near stale"), 4: (B, "ok")}
    clock.now += 25
    holdings = {h.index: h for h in read_board(store, "v").holdings}
    assert holdings[2].state == "stale" and holdings[2].heartbeat_age_s == pytest.approx(105)
    assert holdings[4].heartbeat_age_s == pytest.approx(45)
    assert holdings[2].in_progress_s == pytest.approx(105)


def test_a_finished_volley_spans_first_claim_to_last_verdict_and_old_verdicts_count(
    store: JournalStore, clock: FakeClock
) -> None:
    store.create_volley("v", SETTINGS, task_specs(2))
    store.claim("v", A, 2)
    clock.now += 4
    # A verdict written before the time at the provider was kept: its time in the worker.
    store.finish_rows("v", [(1, "done", "x", _usage(None, 3.0, (1, 1)), 0.0, None),
                            (2, "done", "y", _usage(2.0, 3.0, (1, 1)), 0.0, None)], Spend())
    clock.now += 1000  # long after: a finished volley's span does not grow
    board = read_board(store, "v")
    assert board.finished and board.holdings == ()
    assert board.span_s == pytest.approx(4.0)
    assert board.busy_s == pytest.approx(5.0)
    assert board.efficiency == pytest.approx(5.0 / 4.0 / 4)


def test_a_volley_nobody_has_worked_on_has_an_empty_board(
    store: JournalStore, clock: FakeClock
) -> None:
    store.create_volley("v", {}, task_specs(3))
    board = read_board(store, "v")
    assert (board.open, board.workers, board.holdings) == (3, (), ())
    assert board.parallelism is None and board.efficiency is None and board.max_concurrent is None
    assert Owner("h", 1, "w") not in {w.tally.holder for w in board.workers}
