"""``volley-1M``: ``rlm volley`` as a user runs it, a million tasks, peak memory and time per task.

The command runs in a process of its own (``python -m rlm volley -f FILE
--provider fixture``: zero-latency fixture answers, the default SQLite
journal, one JSON line per result on stdout), once at the scenario's smaller
size and once at its full size.  Its peak memory is the process's maximum
resident set size (``wait4``).  Time per task is judged on the process's CPU
time (user + system, its threads included) over N, which other work on the
machine changes far less than wall time; the wall time per task, start to
exit, is reported beside it.  State, config and the journal live in a
temporary directory, never in the user's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rlm.bench.figures import Check, Figures
from rlm.bench.scenarios import LargeVolleyScenario

__all__ = ["run_large_volley"]

_READ = 1 << 20


@dataclass(frozen=True)
class _Run:
    n: int
    wall_s: float
    cpu_s: float
    peak_mib: float
    lines: int  # results written to stdout (the summary line not counted)
    succeeded: int


def _task_file(path: Path, n: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i in range(1, n + 1):
            out.write(f"classify record {i}\n")


def _one(s: LargeVolleyScenario, n: int, tmp: Path) -> _Run:
    tasks = tmp / f"tasks-{n}.txt"
    _task_file(tasks, n)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    for name in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        env[name] = str(tmp / name.lower())
    argv = [sys.executable, "-m", "rlm", "volley", "-f", str(tasks), "--provider", "fixture",
            "--journal", str(tmp / f"journal-{n}.sqlite3"), "--max-concurrent", str(s.c),
            "--output-format", "jsonl", "--no-history", "-q", "-y"]
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env)
    assert process.stdout is not None and process.stderr is not None
    lines, last = 0, b""
    while chunk := process.stdout.read(_READ):  # kept: only the count and the last line
        lines += chunk.count(b"\n")
        last = (last + chunk)[-4096:]
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    summary = json.loads(last.rstrip(b"\n").rpartition(b"\n")[2] or b"{}")
    succeeded = int(summary.get("summary", {}).get("succeeded", 0))
    if process.returncode != 0:
        raise RuntimeError(f"rlm volley exited {process.returncode}: {stderr.decode()[-2000:]}")
    # ru_maxrss is in KiB on Linux, bytes on macOS.
    peak = usage.ru_maxrss / 2**20 if sys.platform == "darwin" else usage.ru_maxrss / 1024
    return _Run(n, wall, usage.ru_utime + usage.ru_stime, peak, lines - 1, succeeded)


def run_large_volley(s: LargeVolleyScenario) -> Figures:
    """Run ``s`` at both sizes; judge peak memory at the full size and time per task."""
    with tempfile.TemporaryDirectory(prefix="rlm-bench-") as tmp:
        small = _one(s, s.small, Path(tmp))
        large = _one(s, s.n, Path(tmp))
    per_small, per_large = small.cpu_s / small.n, large.cpu_s / large.n
    ratio = per_large / per_small
    checks = (
        Check("peak memory", large.peak_mib, f"peak {large.peak_mib:,.0f} MiB",
              f"≤ {s.target_peak_mib:g} MiB", large.peak_mib <= s.target_peak_mib),
        Check("time per task", ratio,
              f"CPU ×{ratio:.2f} per task ({small.n:,} → {large.n:,})",
              f"≤ ×{s.target_ratio:g} (linear)", ratio <= s.target_ratio),
    )
    notes = (f"CPU {1000 * per_small:.3f} ms/task at {small.n:,} ({small.peak_mib:,.0f} MiB), "
             f"{1000 * per_large:.3f} at {large.n:,}; wall {1000 * small.wall_s / small.n:.3f} "
             f"and {1000 * large.wall_s / large.n:.3f} ms/task",)
    correct = all(r.succeeded == r.n == r.lines for r in (small, large))
    detail = {r.n: {"wall_s": round(r.wall_s, 3), "cpu_s": round(r.cpu_s, 3),
                    "peak_mib": round(r.peak_mib, 1),
                    "cpu_ms_per_task": round(1000 * r.cpu_s / r.n, 4)} for r in (small, large)}
    return Figures(s.name, s.about, s.n, s.c, large.wall_s, None, checks, correct, notes,
                   {"runs": {str(k): v for k, v in detail.items()}})
