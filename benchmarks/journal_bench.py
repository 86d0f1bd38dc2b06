"""What the journal costs a volley: the same volley with a journal and with none, side by side.

Run: ``python benchmarks/journal_bench.py [--tasks N] [--rounds R] [--postgresql URL]``.

The default is the volley users run against a local model server: 5,000 tasks
over HTTP to the fixture server (``rlm fixture-server``, in a process of its
own) answering each in 0.4 s, 64 requests in flight.  The target is a journal
costing at most 5 % of wall time against no journal.  ``--zero-latency``
instead runs 10,000 tasks on the in-process fixture model with no latency:
the runtime itself is then the bottleneck, so it shows the journal's own cost
per task (no target: no user runs that volley).

Each round runs the volley once with the in-memory store (no journal) and once
with a fresh SQLite journal as ``rlm volley`` makes it (claims in batches,
verdicts group-committed, ``synchronous=FULL``), and optionally once with a
PostgreSQL journal; every other round runs them in the reverse order.  The
machine's speed drifts between rounds by more than the target, so the figure
is each round's journaled run against the same round's run with no journal:
the median of those ratios, with every round's figure in the order run.  Not a
test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlm._config import RunConfig
from rlm.bench.server import ServerShape, fixture_server
from rlm.journal import open_store
from rlm.journal.volleys import record_volley, stored_settings
from rlm.journal.worker import JournalWorker
from rlm.volley.engine import Volley
from rlm.volley.records import VolleyTask, new_volley_id

#: (wall seconds, CPU seconds of this process) of one run
Measure = tuple[float, float]


def _tasks(n: int) -> list[VolleyTask]:
    return [VolleyTask(i, f"task {i}: say hello") for i in range(1, n + 1)]


def _config(url: str | None, slots: int) -> RunConfig:
    # No call ceiling: the default (5,000) would stop a 10,000-task volley halfway.
    if url is None:
        return RunConfig(provider="fixture", model="fixture", max_concurrent=slots,
                         root_permits=0, max_llm_calls=None)
    return RunConfig(provider="openai", base_url=url, api_key="bench", model="fixture",
                     max_concurrent=slots, root_permits=0, max_llm_calls=None)


async def _plain(n: int, url: str | None, slots: int) -> Measure:
    run = Volley(_config(url, slots), _tasks(n))
    wall, cpu = time.perf_counter(), time.process_time()
    result = await run.run()
    measured = time.perf_counter() - wall, time.process_time() - cpu
    assert result.summary.succeeded == n, result.summary
    return measured


async def _journaled(n: int, url: str | None, slots: int, spec: str) -> Measure:
    store = await trio.to_thread.run_sync(open_store, spec)
    try:
        config, tasks, volley_id = _config(url, slots), _tasks(n), new_volley_id()
        record_volley(store, volley_id, stored_settings(config, {}), tasks, [])
        # As `rlm volley` does: claims read indices, the worker holds what its share runs
        # soon, and it records the ledger's growth.
        worker = JournalWorker(store, volley_id)
        worker.know(tasks)
        run = Volley(config, tasks, volley_id=volley_id, source=worker, sink=worker,
                     before_send=worker.before_send)
        worker.capacity = lambda: run.concurrency
        worker.follow_ledger(run.ledger)
        wall, cpu = time.perf_counter(), time.process_time()
        async with worker.running():
            result = await run.run()
        measured = time.perf_counter() - wall, time.process_time() - cpu
        assert result.summary.succeeded == n, result.summary
        counts = store.volley(volley_id).counts
        assert counts["done"] == n, counts
        return measured
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zero-latency", action="store_true",
                        help="10,000 in-process tasks with no latency at C=32 (the journal's "
                        "own cost per task) instead of 5,000 over HTTP at 0.4 s, C=64")
    parser.add_argument("--tasks", type=int, help="tasks per volley")
    parser.add_argument("--rounds", type=int, help="interleaved rounds [12; 3 over HTTP]")
    parser.add_argument("--latency", type=float, default=0.4, help="seconds per task over HTTP")
    parser.add_argument("--postgresql", metavar="URL", help="also measure a PostgreSQL journal")
    args = parser.parse_args()
    zero = args.zero_latency
    n = args.tasks or (10_000 if zero else 5_000)
    rounds = args.rounds or (12 if zero else 3)
    slots = 32 if zero else 64
    measures: dict[str, list[Measure]] = {"memory": [], "sqlite": [], "postgresql": []}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp, (
        _no_server() if zero else fixture_server(ServerShape(sub_latency=args.latency))
    ) as url:
        for round_no in range(rounds):
            runs: list[tuple[str, Callable[..., Awaitable[Measure]], tuple[Any, ...]]] = [
                ("memory", _plain, (n, url, slots)),
                ("sqlite", _journaled, (n, url, slots, str(Path(tmp) / f"j{round_no}.sqlite3"))),
            ]
            if args.postgresql:
                runs.append(("postgresql", _journaled, (n, url, slots, args.postgresql)))
            # Every other round in the reverse order: whatever the run before leaves
            # behind (a warm or a fragmented heap, a core just taken) falls on each alike.
            for name, fn, fn_args in runs if round_no % 2 == 0 else reversed(runs):
                measures[name].append(trio.run(fn, *fn_args))
    load_after = os.getloadavg()[0]
    shape = (f"{n:,} zero-latency in-process tasks" if zero
             else f"{n:,} tasks over HTTP at {args.latency:g} s")
    print(f"{shape}, C={slots}, {rounds} interleaved rounds (load average {load_before:.1f} "
          f"before, {load_after:.1f} after, {os.cpu_count()} CPUs)")
    memory = measures["memory"]
    for name, values in measures.items():
        if not values:
            continue
        wall = statistics.median(w for w, _ in values)
        cpu = statistics.median(c for _, c in values)
        line = f"  {name:<10} wall {wall:7.2f} s ({n / wall:6,.0f} tasks/s), CPU {cpu:6.2f} s"
        if name != "memory":
            costs = [w / m[0] - 1 for (w, _), m in zip(values, memory, strict=True)]
            cpu_costs = [c / m[1] - 1 for (_, c), m in zip(values, memory, strict=True)]
            line += (f"; journal cost: wall {statistics.median(costs):+.1%} median "
                     f"(rounds: {' '.join(f'{c:+.1%}' for c in costs)}), "
                     f"CPU {statistics.median(cpu_costs):+.1%}")
        print(line)


@contextmanager
def _no_server() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    main()
