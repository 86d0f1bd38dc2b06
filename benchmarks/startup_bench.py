"""Start-up: the tiny fixture run's wall time next to ``python -c "import trio"``'s.

Run: ``python benchmarks/startup_bench.py [--rounds N] [--rlm PATH ...] [--phases]``.

The tiny run is issue 9's: ``echo "the magic number is 42" > tiny.txt; rlm run
"What is the magic number?" --context-file tiny.txt --provider fixture`` (it
prints 42; progress on a pipe, history on).  Its target is 0.3 s of wall time
on an idle 2-core machine.  Its floor is trio's import: every run imports trio,
and ``python -c "import trio"`` (an interpreter, ``site``, trio and the
interpreter's own exit) is measured in the same rounds, interleaved with the
runs, because other work on the machine moves both by more than the
difference.  The load average is printed before and after.

``--rlm PATH`` (repeatable) adds another ``rlm`` executable, say another
tree's ``.venv/bin/rlm``, interleaved with the others: an A/B comparison in
the same minutes.  ``--phases`` prints where the run's wall time goes (its
critical path), from timestamps the run takes on the clock this script
reads (``time.perf_counter_ns`` is CLOCK_MONOTONIC, shared by processes);
those runs are instrumented (an audit hook), so they are slower than the
plain ones and are not mixed with them.  The run history goes to a
temporary ``XDG_STATE_HOME``, as it would to the user's (same code path).
Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUERY = "What is the magic number?"
TARGET_S = 0.3
FLOOR = 'python -c "import trio"'
FAST_EXIT = "the same, then os._exit(0)"
GONE = "process gone (its parent's wait returned)"

# Prepended to a tiny run's own entry: marks on the shared monotonic clock, written
# as JSON to $STARTUP_MARKS when the process exits (rlm's exit runs atexit handlers).
_MARKED_ENTRY = r'''
import sys, time
_marks = [("interpreter and site ready", time.perf_counter_ns(), time.process_time_ns())]
def _mark(name):
    _marks.append((name, time.perf_counter_ns(), time.process_time_ns()))
_FIRST = {"import click": "click and the command line's modules start loading",
          "import trio": "trio starts loading (with the runtime)",
          "open tiny.txt": "context read"}
def _hook(event, args):
    if event == "import" and args[0] in ("click", "trio"):
        key = "import " + args[0]
    elif event == "open" and str(args[0]).endswith("tiny.txt"):
        key = "open tiny.txt"
    elif event == "subprocess.Popen" and "-S" in list(args[1]):
        key = None
        _mark("zygote started")
        return
    else:
        return
    if key in _FIRST:
        _mark(_FIRST.pop(key))
sys.addaudithook(_hook)
class _Stdout:
    def __init__(self, stream):
        self._stream = stream
    def write(self, text):
        if text and not any(mark[0] == "answer printed" for mark in _marks):
            _mark("answer printed")
        return self._stream.write(text)
    def __getattr__(self, name):
        return getattr(self._stream, name)
sys.stdout = _Stdout(sys.stdout)
def _wrap(owner, name, before, after):
    original = getattr(owner, name)
    def wrapped(*args, **kwargs):
        if before:
            _mark(before)
        try:
            return original(*args, **kwargs)
        finally:
            if after:
                _mark(after)
    setattr(owner, name, wrapped)
# Wrapped once their modules are loaded (importing them early would change the run).
_AFTER_IMPORT = {
    "rlm._api": lambda m: _wrap(m.RLM, "__init__", "runtime loaded, settings checked", None),
    "rlm.cli._signals": lambda m: _wrap(m, "run_with_signals", "run starts (trio.run)",
                                          "run returned"),
    "rlm.cli._history": lambda m: _wrap(m.RunKeeper, "close", None, "history written"),
    "rlm._sandbox.early": lambda m: _wrap(m.EarlyZygote, "close", None, "zygote reaped"),
}
class _Finder:
    def find_spec(self, name, path, target=None):
        if name not in _AFTER_IMPORT:
            return None
        import importlib.util
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        exec_module = spec.loader.exec_module
        def patched(module):
            exec_module(module)
            _AFTER_IMPORT.pop(name)(module)
        spec.loader.exec_module = patched
        return spec
sys.meta_path.insert(0, _Finder())
import atexit, os, resource
def _dump():
    _mark("atexit handlers run (then os._exit)")
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(os.environ["STARTUP_MARKS"], "w") as out:
        json.dump({"marks": _marks, "cpu_self": own.ru_utime + own.ru_stime,
                   "cpu_children": kids.ru_utime + kids.ru_stime}, out)
import json
atexit.register(_dump)
_mark("instrumentation ready")
'''


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, bytes]:
    """Wall seconds, CPU seconds (the process and the children it reaped) and stdout."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
    assert process.stdout is not None
    with process.stdout:
        out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{argv[0]} exited {process.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, out


def rlm_python(rlm: str) -> str:
    """The interpreter an ``rlm`` console script runs under (its ``#!`` line)."""
    with open(rlm, "rb") as script:
        first = script.readline().decode().strip()
    return first[2:].strip() if first.startswith("#!") else sys.executable


def summary(label: str, walls: list[float], cpus: list[float], floor: float | None) -> str:
    median = statistics.median(walls)
    line = (f"{label:<34} min {min(walls):6.3f} s  median {median:6.3f} s  "
            f"max {max(walls):6.3f} s  CPU median {statistics.median(cpus) * 1000:5.0f} ms")
    if floor is not None:
        line += (f"  | median - import trio {1000 * (median - floor):+5.0f} ms, "
                 f"target {TARGET_S} s: {'ok' if median <= TARGET_S else 'missed'}")
    return line


def compare(rounds: int, rlms: list[str], work: Path, env: dict[str, str]) -> None:
    python = rlm_python(rlms[0])
    floors = {FLOOR: [python, "-c", "import trio"],
              FAST_EXIT: [python, "-c", "import os, trio; os._exit(0)"]}
    runs = {rlm: [rlm, "run", QUERY, "--context-file", "tiny.txt", "--provider", "fixture"]
            for rlm in rlms}
    walls: dict[str, list[float]] = {**{key: [] for key in floors}, **{rlm: [] for rlm in rlms}}
    cpus: dict[str, list[float]] = {key: [] for key in walls}
    print(f"before: {load_average()}; {rounds} rounds, interleaved")
    for _ in range(rounds):
        for key, argv in floors.items():
            wall, cpu, _ = timed(argv, work, env)
            walls[key].append(wall)
            cpus[key].append(cpu)
        for rlm, argv in runs.items():
            wall, cpu, out = timed(argv, work, env)
            if out.strip() != b"42":
                raise SystemExit(f"{rlm} printed {out!r}, not 42")
            walls[rlm].append(wall)
            cpus[rlm].append(cpu)
    print(f"after:  {load_average()}")
    floor = statistics.median(walls[FLOOR])
    for key in floors:
        print(summary(key, walls[key], cpus[key], None))
    for rlm in rlms:
        print(summary(f"tiny run ({_short(rlm)})", walls[rlm], cpus[rlm], floor))
    print("CPU: the process and the children it reaped (the run's zygote and sandbox).  "
          "rlm ends with os._exit once its\nwork is closed (rlm.cli._console): the second "
          "line is trio's import without the interpreter's teardown.")


def phases(rounds: int, rlm: str, work: Path, env: dict[str, str]) -> None:
    """The tiny run's critical path: the median time of each mark after exec."""
    python = rlm_python(rlm)
    # The executable's own code after the marks' set-up, as its interpreter would run it.
    entry = _MARKED_ENTRY + f"exec(compile(open({rlm!r}).read(), {rlm!r}, 'exec'))\n"
    argv = [python, "-c", entry, "run", QUERY, "--context-file", "tiny.txt",
            "--provider", "fixture"]
    marks: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    cpu_self: list[float] = []
    cpu_children: list[float] = []
    print(f"\nphases of {_short(rlm)} ({rounds} instrumented runs; before: {load_average()})")
    for _ in range(rounds):
        out_file = work / "marks.json"
        started = time.perf_counter_ns()
        timed(argv, work, {**env, "STARTUP_MARKS": str(out_file)})
        ended = time.perf_counter_ns()
        data = json.loads(out_file.read_text())
        for name, at, cpu_at in data["marks"]:
            marks.setdefault(name, []).append((at - started) / 1e6)
            cpu.setdefault(name, []).append(cpu_at / 1e6)
        marks.setdefault(GONE, []).append((ended - started) / 1e6)
        cpu_self.append(data["cpu_self"])
        cpu_children.append(data["cpu_children"])
    rows = sorted(marks.items(), key=lambda item: statistics.median(item[1]))
    previous = previous_cpu = 0.0
    print(f"{'wall ms':>8} {'step':>6} {'CPU ms':>7} {'step':>6}  mark (medians; from exec; CPU "
          "of the rlm process)")
    for name, times in rows:
        median = statistics.median(times)
        line = f"{median:8.1f} {median - previous:6.1f}"
        if name in cpu:
            at = statistics.median(cpu[name])
            line += f" {at:7.1f} {at - previous_cpu:6.1f}"
            previous_cpu = at
        else:
            line += " " * 15
        print(f"{line}  {name}")
        previous = median
    print(f"CPU median: rlm process {statistics.median(cpu_self) * 1000:.0f} ms, its zygote "
          f"and sandbox {statistics.median(cpu_children) * 1000:.0f} ms; after: {load_average()}")


def _short(path: str) -> str:
    parts = Path(path).parts
    return str(Path(*parts[-4:])) if len(parts) > 4 else path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--rlm", action="append", default=[],
                        help="an rlm executable (repeatable; default: the one next to python)")
    parser.add_argument("--phases", action="store_true",
                        help="also print the run's critical path (instrumented runs)")
    args = parser.parse_args()
    rlms = [os.path.abspath(p) for p in args.rlm] or [str(Path(sys.executable).with_name("rlm"))]
    with tempfile.TemporaryDirectory(prefix="rlm-startup-") as tmp:
        work = Path(tmp)
        (work / "tiny.txt").write_text("the magic number is 42\n", encoding="utf-8")
        env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's rlm reads (and writes) bytecode
        compare(args.rounds, rlms, work, env)
        if args.phases:
            for rlm in rlms:
                phases(args.rounds, rlm, work, env)


if __name__ == "__main__":
    main()
