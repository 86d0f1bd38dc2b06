"""Micro-benchmarks: bridge round trip, frames per second, context load time, sandbox start.

Run: ``python benchmarks/micro_bench.py [--rounds N] [--sizes-mb 1 10 100] [--no-sandbox-bench]``.

- **bridge round trip**: sandbox code calls ``llm_query`` in a loop against a
  host handler that answers at once; time per call (two frames, one each way,
  plus the REPL's own work).
- **frames per second**: ``encode_frame`` + ``FrameDecoder.feed`` of a typical
  bridge frame in-process (the codec alone), and the rate through a sandbox
  implied by the round trip.
- **context load**: a sandbox from the warm pool opened with a 1/10/100 MB
  context, ready to execute (``len(context)`` ran); first open and again (the
  sealed memfd is reused for the same context).  Reuses ``sandbox_bench``.
- **sandbox start** (cold spawn, zygote, warm pool): ``benchmarks/sandbox_bench.py``,
  run as it is.

Not a test: nothing here asserts; medians are printed.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sandbox_bench import OWNER, _measure  # noqa: E402  (after the path set-up)

from rlm._events import EventBus  # noqa: E402
from rlm._sandbox.launcher import SandboxLauncher  # noqa: E402
from rlm_sandbox.protocol import FrameDecoder, encode_frame  # noqa: E402

PROMPT = "What is the magic number?\nAnswer with the value only.\n\nText:\n" + "x" * 400


async def _echo(frame: dict[str, Any]) -> dict[str, Any]:
    prompts = frame.get("prompts") or [""]
    return {"ok": True, "error": None, "value": ["NOT FOUND"] * len(prompts)}


async def _bridge_round_trips(calls: int) -> float:
    """Seconds per ``llm_query`` round trip, over ``calls`` calls in one exec."""
    launcher = SandboxLauncher(events=EventBus(), max_output_chars=1000, pool_size=1)
    code = f"p = {PROMPT!r}\nfor i in range({calls}):\n    llm_query(p)\n"
    async with launcher.serving(), trio.open_nursery() as nursery:
        box = await launcher.open(nursery, context="ctx", owner=OWNER)
        warm = await box.execute("llm_query('warm-up')", _echo, limit=30)
        assert warm.ok, warm.error
        started = time.perf_counter()
        result = await box.execute(code, _echo, limit=120)
        elapsed = time.perf_counter() - started
        assert result.ok, result.error
        await box.aclose()
    return elapsed / calls


def _codec_frames_per_second(frames: int) -> float:
    message = {"t": "bridge", "id": 1, "fn": "llm_query", "prompts": [PROMPT], "contexts": [None]}
    decoder = FrameDecoder()
    started = time.perf_counter()
    for _ in range(frames):
        decoded = decoder.feed(encode_frame(message))
        assert len(decoded) == 1
    return frames / (time.perf_counter() - started)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:8.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2000, help="bridge calls to time")
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--no-sandbox-bench", action="store_true",
                        help="skip benchmarks/sandbox_bench.py (cold/zygote/pool start)")
    args = parser.parse_args()

    per_call = trio.run(_bridge_round_trips, args.rounds)
    print(f"bridge round trip (llm_query, {len(PROMPT)}-char prompt)  {_ms(per_call)}"
          f"   ({1 / per_call:,.0f} calls/s, {2 / per_call:,.0f} frames/s through a sandbox)")
    print(f"frame codec (encode + decode, in-process)      {_codec_frames_per_second(50_000):,.0f}"
          " frames/s")
    for mb in args.sizes_mb:
        context = ("0123456789abcdef" * 64 + "\n") * (mb * (1 << 20) // 1025)
        times = trio.run(_measure, 3, "pool", context)
        print(f"context load {mb:>4} MB: first {_ms(times[0])}   "
              f"again median {_ms(statistics.median(times[1:]))}")
    if not args.no_sandbox_bench:
        print("sandbox start (benchmarks/sandbox_bench.py):", flush=True)
        bench = ROOT / "benchmarks" / "sandbox_bench.py"
        subprocess.run([sys.executable, str(bench), "--rounds", "20", "--big-mb", "10"],
                       check=False)


if __name__ == "__main__":
    main()
