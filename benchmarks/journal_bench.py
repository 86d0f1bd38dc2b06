"""What the journal costs a volley: 10,000 zero-latency tasks with and without it.

Run: ``python benchmarks/journal_bench.py [--tasks N] [--rounds R] [--postgresql URL]``.

Each round runs the same volley through the same gate on the in-process
fixture model (no latency, so the runtime itself is the bottleneck): once with
the in-memory store, once with a SQLite journal (a fresh file: claims in
batches, verdicts group-committed, ``synchronous=FULL``), and optionally once
with a PostgreSQL journal.  It prints tasks per second (best of the interleaved
rounds) and the journal's cost as a share of the in-memory throughput (the
target is ≤ 5 %).  Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
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


Rates = tuple[float, float]  # (tasks per wall second, tasks per CPU second, all threads)


async def _plain(n: int) -> Rates:
    run = Volley(_config(), _tasks(n))
    started, cpu = time.perf_counter(), time.process_time()
    result = await run.run()
    rates = (n / (time.perf_counter() - started), n / (time.process_time() - cpu))
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
        started, cpu = time.perf_counter(), time.process_time()
        async with worker.running():
            result = await run.run()
        rates = (n / (time.perf_counter() - started), n / (time.process_time() - cpu))
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
    with tempfile.TemporaryDirectory() as tmp:
        for round_no in range(args.rounds):
            rates["memory"].append(trio.run(_plain, args.tasks))
            path = str(Path(tmp) / f"j{round_no}.sqlite3")
            rates["sqlite"].append(trio.run(_journaled, args.tasks, path))
            if args.postgresql:
                rates["postgresql"].append(trio.run(_journaled, args.tasks, args.postgresql))
    wall = max(r[0] for r in rates["memory"])
    cpu = max(r[1] for r in rates["memory"])
    print(f"{args.tasks:,} zero-latency tasks, C=32, best of {args.rounds} interleaved rounds")
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


if __name__ == "__main__":
    main()
