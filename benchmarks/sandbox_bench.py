"""Sandbox ready-to-execute latency: zygote fork, warm pool, direct spawn, 100 MB context.

Run: ``python benchmarks/sandbox_bench.py [--rounds N]``.  Prints medians and
the ratio to each target (≤ 15 ms from the zygote, ≤ 2 ms from the warm
pool, a 100 MB context ready in ≤ 1 s).  "Ready" means ``open()`` returned a
sandbox that has its context and answered ``ready``; one ``exec`` is then run
to check it works.  Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlm._events import EventBus
from rlm._sandbox.launcher import SandboxIdentity, SandboxLauncher

OWNER = SandboxIdentity("bench", None, 0)


async def _no_bridge(frame: dict[str, object]) -> dict[str, object]:
    return {"ok": False, "error": "no bridge in the benchmark", "value": None}


async def _open_times(launcher: SandboxLauncher, rounds: int, context: str,
                      wait_for_pool: int = 0) -> list[float]:
    times = []
    async with trio.open_nursery() as nursery:
        for _ in range(rounds):
            if wait_for_pool:
                await launcher.wait_pool_full()
            started = time.perf_counter()
            box = await launcher.open(nursery, context=context, owner=OWNER)
            times.append(time.perf_counter() - started)
            result = await box.execute("x = len(context)", _no_bridge, limit=30)
            assert result.ok, result.error
            await box.aclose()
    return times


async def _measure(rounds: int, mode: str, context: str) -> list[float]:
    pool = 2 if mode == "pool" else 0
    launcher = SandboxLauncher(events=EventBus(), max_output_chars=1000, pool_size=pool,
                               use_zygote=mode != "direct")
    async with launcher.serving():
        if mode != "direct":
            await _open_times(launcher, 1, "warm-up", wait_for_pool=pool)
        return await _open_times(launcher, rounds, context, wait_for_pool=pool)


def _report(label: str, times: list[float], target: float | None) -> None:
    median = statistics.median(times)
    line = (f"{label:<26} median {median * 1000:8.2f} ms   min {min(times) * 1000:8.2f} ms   "
            f"max {max(times) * 1000:8.2f} ms   (n={len(times)})")
    if target is not None:
        line += f"   target {target * 1000:g} ms: ratio {median / target:.2f}"
        line += " ok" if median <= target else " MISSED"
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--big-mb", type=int, default=100)
    args = parser.parse_args()
    small = "the magic number is 42\n" * 100
    direct = trio.run(_measure, max(5, args.rounds // 3), "direct", small)
    _report("direct spawn (fallback)", direct, None)
    _report("zygote fork", trio.run(_measure, args.rounds, "zygote", small), 0.015)
    _report("warm pool", trio.run(_measure, args.rounds, "pool", small), 0.002)
    big = ("0123456789abcdef" * 64 + "\n") * (args.big_mb * (1 << 20) // 1025)
    print(f"big context: {len(big) / 1e6:.1f} M characters")
    times = trio.run(_measure, 4, "pool", big)
    # The first open writes the sealed memfd; later opens of the same context reuse it.
    _report(f"{args.big_mb} MB context, first", times[:1], 1.0)
    _report(f"{args.big_mb} MB context, again", times[1:], 1.0)


if __name__ == "__main__":
    main()
