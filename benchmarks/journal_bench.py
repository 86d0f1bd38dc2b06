"""What the journal costs a volley: 10,000 zero-latency tasks with and without it.

Run: ``python benchmarks/journal_bench.py [--tasks N] [--rounds R] [--postgresql URL]``.

Each round runs the same volley through the same gate on the in-process
fixture model (no latency, so the runtime itself is the bottleneck): once with
the in-memory store, once with a SQLite journal (a fresh file: claims in
batches, verdicts group-committed, ``synchronous=FULL``, the writes in a writer
process as ``rlm volley`` makes them), and optionally once with a PostgreSQL
journal; every other round runs them in the reverse order.  It prints tasks per
second (best and median of the rounds) and the journal's cost as a share of
the in-memory throughput (the target is ≤ 5 %).  Not a test: nothing here
asserts.

The machine's speed drifts between rounds (other load, the VM), by more than
the target: so the figure is each round's journaled run against the same
round's in-memory run, the median of those ratios over the rounds (default 12).
The bench also prints the event loop's own figures per task (medians of the
rounds): its thread's CPU time, and the time it sat idle (nothing runnable:
every task waiting for the journal).  Their sum is the loop's critical path:
what wall time per task comes to when the writer process has a core of its own.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlm._config import RunConfig
from rlm.journal import open_store
from rlm.journal._writer import writes_for
from rlm.journal.volleys import record_volley, stored_settings
from rlm.journal.worker import JournalWorker, fewer_collections
from rlm.volley.engine import Volley
from rlm.volley.records import VolleyTask, new_volley_id


def _tasks(n: int) -> list[VolleyTask]:
    return [VolleyTask(i, f"task {i}: say hello") for i in range(1, n + 1)]


def _config() -> RunConfig:
    # No call ceiling: the default (5,000) would stop a 10,000-task volley halfway.
    return RunConfig(
        provider="fixture", model="fixture", max_concurrent=32, root_permits=0, max_llm_calls=None
    )


#: How long each writer process took to start and open the journal (seconds).
_STARTS: list[float] = []

#: tasks per wall second, tasks per CPU second (all threads and the writer process), and
#: per task: the event loop's thread CPU, its idle time, the other threads' CPU (a journal
#: in a thread), the writer process's CPU, and the collector's time (seconds)
Rates = tuple[float, float, float, float, float, float, float]


class _Collector:
    """Time the cyclic garbage collector spends (gc.callbacks), on every thread."""

    def __init__(self) -> None:
        self.spent = 0.0
        self._since = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._since = time.perf_counter()
        else:
            self.spent += time.perf_counter() - self._since


_COLLECTOR = _Collector()


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
    def __init__(self, n: int, writer: int | None = None) -> None:
        self.n = n
        self.idle = _Idle()
        trio.lowlevel.add_instrument(self.idle)
        self.writer = writer
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        self.loop = time.thread_time()
        self.writer_cpu = _process_cpu(writer)
        self.collecting = _COLLECTOR.spent

    def rates(self) -> Rates:
        n = self.n
        cpu, loop = time.process_time() - self.cpu, time.thread_time() - self.loop
        writer = _process_cpu(self.writer) - self.writer_cpu
        return (
            n / (time.perf_counter() - self.wall),
            n / (cpu + writer),
            loop / n,
            self.idle.idle / n,
            (cpu - loop) / n,
            writer / n,
            (_COLLECTOR.spent - self.collecting) / n,
        )


def _process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (0 for None)."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _plain(n: int) -> Rates:
    run = Volley(_config(), _tasks(n))
    meter = _Meter(n)
    result = await run.run()
    rates = meter.rates()
    assert result.summary.succeeded == n, result.summary
    return rates


async def _journaled(n: int, spec: str, thread: bool = False) -> Rates:
    store = await trio.to_thread.run_sync(open_store, spec)
    try:
        tasks, volley_id = _tasks(n), new_volley_id()
        record_volley(store, volley_id, stored_settings(_config(), {}), tasks, [])
        worker = JournalWorker(store, volley_id, claim_batch=64)
        worker.know(tasks)  # as `rlm volley` does: claims read indices, not specs
        run = Volley(_config(), tasks, volley_id=volley_id, source=worker, sink=worker)
        worker.capacity = lambda: run.concurrency  # as the CLI does: it holds what it runs soon
        worker.follow_ledger(run.ledger)  # as the CLI does: it records the ledger's growth
        # As the CLI does: a SQLite journal's claims and verdicts go to a writer process
        # (--thread: to a thread of this process, as before). Its start (once per worker,
        # a fixed cost, not a per-task one) is timed apart.
        async with (nullcontext(None) if thread else writes_for(store)) as writes:
            if writes is not None:
                started = time.perf_counter()
                await writes.ready()
                _STARTS.append(time.perf_counter() - started)
            meter = _Meter(n, writes.pid if writes is not None else None)
            async with worker.running(writes):
                result = await run.run()
            rates = meter.rates()
        assert result.summary.succeeded == n, result.summary
        counts = store.volley(volley_id).counts
        assert counts["done"] == n, counts
        return rates
    finally:
        store.close()


def _round(fn: Callable[..., Awaitable[Rates]], *args: Any) -> Rates:
    """One measured run, under the collector's setting ``rlm volley`` runs every volley with
    (the same for every row: the cost measured is the journal's, not the setting's)."""
    gc.collect()
    with fewer_collections():
        return trio.run(fn, *args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--postgresql", metavar="URL", help="also measure a PostgreSQL journal")
    parser.add_argument(
        "--thread", action="store_true",
        help="also measure SQLite with its writes in a thread of this process (no writer process)",
    )
    args = parser.parse_args()
    rates: dict[str, list[Rates]] = {"memory": [], "sqlite": [], "sqlite-thread": [],
                                     "postgresql": []}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for round_no in range(args.rounds):
            runs: list[tuple[str, Callable[..., Awaitable[Rates]], tuple[Any, ...]]] = [
                ("memory", _plain, (args.tasks,)),
                ("sqlite", _journaled, (args.tasks, str(Path(tmp) / f"j{round_no}.sqlite3"))),
            ]
            if args.thread:
                thread_path = str(Path(tmp) / f"t{round_no}.sqlite3")
                runs.append(("sqlite-thread", _journaled, (args.tasks, thread_path, True)))
            if args.postgresql:
                runs.append(("postgresql", _journaled, (args.tasks, args.postgresql)))
            # Every other round in the reverse order: whatever the run before leaves
            # behind (a warm or a fragmented heap, a core just taken) falls on each alike.
            for name, fn, fn_args in runs if round_no % 2 == 0 else reversed(runs):
                rates[name].append(_round(fn, *fn_args))
    load_after = os.getloadavg()[0]
    print(
        f"{args.tasks:,} zero-latency tasks, C=32, {args.rounds} interleaved rounds"
        f" (load average {load_before:.1f} before, {load_after:.1f} after, {os.cpu_count()} CPUs)"
    )
    print("  wall: best of the rounds (other load only ever slows a round down) and their")
    print("  median; CPU counts every thread's and the writer process's CPU time")
    wall = max(r[0] for r in rates["memory"])
    median = statistics.median(r[0] for r in rates["memory"])
    cpu = max(r[1] for r in rates["memory"])
    for name, values in rates.items():
        if not values:
            continue
        w, m = max(r[0] for r in values), statistics.median(r[0] for r in values)
        c = max(r[1] for r in values)
        note = "" if name == "memory" else (
            f"  journal cost {1 - w / wall:+.1%} best, {1 - m / median:+.1%} median,"
            f" {1 - c / cpu:+.1%} CPU"
        )
        print(f"  {name:<13} {w:7,.0f} best {m:7,.0f} median tasks/s wall"
              f" {c:7,.0f} tasks/CPU-s{note}")
    if _STARTS:
        print(f"  (a writer process starts and opens the journal in"
              f" {statistics.median(_STARTS) * 1e3:.0f} ms, median; before the clock starts)")
    path = statistics.median(r[2] + r[3] for r in rates["memory"])
    print("event loop per task, medians: its thread's CPU + its idle wait = its critical path;")
    print("  the CPU per task of the other threads and of the writer process; the collector's")
    print("  time per task (part of the loop's CPU)")
    for name, values in rates.items():
        if not values:
            continue
        loop = statistics.median(r[2] for r in values)
        idle = statistics.median(r[3] for r in values)
        other = statistics.median(r[4] for r in values)
        writer = statistics.median(r[5] for r in values)
        collecting = statistics.median(r[6] for r in values)
        note = "" if name == "memory" else f"  journal cost {1 - path / (loop + idle):+.1%}"
        print(
            f"  {name:<13} {loop * 1e6:4.0f} us CPU + {idle * 1e6:3.0f} us idle"
            f" = {(loop + idle) * 1e6:4.0f} us{note}; other threads {other * 1e6:3.0f} us,"
            f" writer {writer * 1e6:3.0f} us CPU; collector {collecting * 1e6:4.1f} us"
        )
    # The machine's speed drifts by more than the target between rounds a minute apart:
    # each round's journaled run is compared with that round's in-memory one, and the
    # median of those ratios is the figure (the target: wall ≤ 5 %).
    print("journal cost, round by round against the same round's in-memory run (median of")
    print(f"  the {args.rounds} rounds; the spread is the middle half of them): throughput")
    print("  lost in wall time, and the event loop's extra CPU per task")
    for name, values in rates.items():
        if name == "memory" or not values:
            continue
        wall_cost = [1 - r[0] / m[0] for r, m in zip(values, rates["memory"], strict=True)]
        loop_cost = [r[2] / m[2] - 1 for r, m in zip(values, rates["memory"], strict=True)]
        print(f"  {name:<13} wall {_spread(wall_cost)}; loop CPU {_spread(loop_cost)}")
        # Every round's figure, in the order run: a drift of the machine shows as a run of
        # outliers, which the median above leaves out and this line does not.
        print(f"  {'':<13} rounds: " + " ".join(f"{c:+.1%}" for c in wall_cost))


def _spread(values: list[float]) -> str:
    """The median of ``values`` and their middle half, as percentages."""
    if len(values) < 4:
        return f"{statistics.median(values):+.1%}"
    low, _, high = statistics.quantiles(values, n=4)
    return f"{statistics.median(values):+.1%} (middle half {low:+.1%} to {high:+.1%})"


if __name__ == "__main__":
    main()
