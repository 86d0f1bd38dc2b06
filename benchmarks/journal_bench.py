"""What the journal costs a volley: 10,000 zero-latency tasks with and without it.

Run: ``python benchmarks/journal_bench.py [--tasks N] [--rounds R] [--postgresql URL]``.

Each round runs the same volley through the same gate on the in-process
fixture model (no latency, so the runtime itself is the bottleneck): once with
the in-memory store, once with a SQLite journal (a fresh file: claims in
batches, verdicts group-committed, ``synchronous=FULL``), and optionally once
with a PostgreSQL journal.  It prints tasks per second (best of the interleaved
rounds) and the journal's cost as a share of the in-memory throughput (the
target is ≤ 5 %).  Not a test: nothing here asserts.

The journal's SQLite work runs in a thread (sqlite3 releases the GIL while it
steps and commits), so on a machine with a free core it overlaps the event
loop and the wall figure is the one a user sees; on a busy machine it is not
free.  So the bench also prints the event loop's own figures per task
(medians of the rounds): its thread's CPU time, and the time it sat idle
(nothing runnable: every task waiting for the journal).  Their sum is the
loop's critical path: what wall time per task comes to when the journal's
thread has a core of its own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlm._config import RunConfig
from rlm.journal import open_store
from rlm.journal.volleys import record_volley, stored_settings
from rlm.journal.worker import JournalWorker
from rlm.volley.engine import Volley
from rlm.volley.records import VolleyTask, new_volley_id


def _tasks(n: int) -> list[VolleyTask]:
    return [VolleyTask(i, f"task {i}: say hello") for i in range(1, n + 1)]


def _config() -> RunConfig:
    # No call ceiling: the default (5,000) would stop a 10,000-task volley halfway.
    return RunConfig(
        provider="fixture", model="fixture", max_concurrent=32, root_permits=0, max_llm_calls=None
    )


#: tasks per wall second, tasks per CPU second (all threads), and per task: the event
#: loop's thread CPU, its idle time, and the other threads' CPU (the journal's) (seconds)
Rates = tuple[float, float, float, float, float]


class _Idle(trio.abc.Instrument):
    """Time the event loop spends waiting with nothing to run."""

    def __init__(self) -> None:
        self.idle = 0.0
        self._since: float | None = None

    def before_io_wait(self, timeout: float) -> None:
        self._since = time.perf_counter() if timeout > 0 else None

    def after_io_wait(self, timeout: float) -> None:
        if self._since is not None:
            self.idle += time.perf_counter() - self._since


class _Meter:
    def __init__(self, n: int) -> None:
        self.n = n
        self.idle = _Idle()
        trio.lowlevel.add_instrument(self.idle)
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        self.loop = time.thread_time()

    def rates(self) -> Rates:
        n = self.n
        cpu, loop = time.process_time() - self.cpu, time.thread_time() - self.loop
        return (
            n / (time.perf_counter() - self.wall),
            n / cpu,
            loop / n,
            self.idle.idle / n,
            (cpu - loop) / n,
        )


async def _plain(n: int) -> Rates:
    run = Volley(_config(), _tasks(n))
    meter = _Meter(n)
    result = await run.run()
    rates = meter.rates()
    assert result.summary.succeeded == n, result.summary
    return rates


async def _journaled(n: int, spec: str) -> Rates:
    store = await trio.to_thread.run_sync(open_store, spec)
    try:
        tasks, volley_id = _tasks(n), new_volley_id()
        record_volley(store, volley_id, stored_settings(_config(), {}), tasks, [])
        worker = JournalWorker(store, volley_id, claim_batch=64)
        worker.know(tasks)  # as `rlm volley` does: claims read indices, not specs
        run = Volley(_config(), tasks, volley_id=volley_id, source=worker, sink=worker)
        worker.capacity = lambda: run.concurrency  # as the CLI does: it holds what it runs soon
        meter = _Meter(n)
        async with worker.running():
            result = await run.run()
        rates = meter.rates()
        assert result.summary.succeeded == n, result.summary
        counts = store.volley(volley_id).counts
        assert counts["done"] == n, counts
        return rates
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--postgresql", metavar="URL", help="also measure a PostgreSQL journal")
    args = parser.parse_args()
    rates: dict[str, list[Rates]] = {"memory": [], "sqlite": [], "postgresql": []}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for round_no in range(args.rounds):
            rates["memory"].append(trio.run(_plain, args.tasks))
            path = str(Path(tmp) / f"j{round_no}.sqlite3")
            rates["sqlite"].append(trio.run(_journaled, args.tasks, path))
            if args.postgresql:
                rates["postgresql"].append(trio.run(_journaled, args.tasks, args.postgresql))
    wall = max(r[0] for r in rates["memory"])
    cpu = max(r[1] for r in rates["memory"])
    load_after = os.getloadavg()[0]
    print(
        f"{args.tasks:,} zero-latency tasks, C=32, best of {args.rounds} interleaved rounds"
        f" (load average {load_before:.1f} before, {load_after:.1f} after, {os.cpu_count()} CPUs)"
    )
    print("  (best of: other load only ever slows a round down; per CPU second counts")
    print("   every thread's CPU time, steadier than wall time on a shared machine)")
    for name, values in rates.items():
        if not values:
            continue
        w = max(r[0] for r in values)
        c = max(r[1] for r in values)
        note = "" if name == "memory" else (
            f"  journal cost {1 - w / wall:+.1%} wall, {1 - c / cpu:+.1%} CPU"
        )
        print(f"  {name:<10} {w:8,.0f} tasks/s wall {c:8,.0f} tasks/CPU-s{note}")
    path = statistics.median(r[2] + r[3] for r in rates["memory"])
    print("event loop per task, medians: its thread's CPU + its idle wait = its critical path;")
    print("  and the other threads' CPU per task (the journal's store thread)")
    for name, values in rates.items():
        if not values:
            continue
        loop = statistics.median(r[2] for r in values)
        idle = statistics.median(r[3] for r in values)
        other = statistics.median(r[4] for r in values)
        note = "" if name == "memory" else f"  journal cost {1 - path / (loop + idle):+.1%}"
        print(
            f"  {name:<10} {loop * 1e6:6.0f} us CPU + {idle * 1e6:4.0f} us idle"
            f" = {(loop + idle) * 1e6:6.0f} us{note}; other threads {other * 1e6:4.0f} us CPU"
        )


if __name__ == "__main__":
    main()
