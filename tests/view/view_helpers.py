"""Shared by the view tests: a real fixture run through the CLI, and its trace read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rlm.fixtures.needle import generate_needle
from tests.helpers import rlm_in_process

__all__ = ["QUESTION", "RLM", "events", "fixture_run", "rlm", "rlm_in_process"]

RLM = [sys.executable, "-m", "rlm"]
QUESTION = "What is the magic number?"


def rlm(*args: str, cwd: Path | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real `rlm` CLI (no RLM_/OPENAI_ settings leak in from the caller)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    full_env.update(env or {})
    return subprocess.run([*RLM, *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env=full_env, check=False)


def fixture_run(tmp: Path, *extra: str, env: dict[str, str] | None = None) -> Path:
    """`rlm run` on a small needle input with the fixture model at depth 2; the trace's path.

    ``fixture:4`` makes the root split the input into 4 child calls, each of
    which asks 4 sub-queries: 5 calls, 5 + 4 steps, 16 sub-queries.
    """
    context = tmp / "F.txt"
    if not context.exists():
        context.write_text(generate_needle(40_000, seed=3).text, encoding="utf-8")
    trace = tmp / "t.jsonl"
    done = rlm("run", QUESTION, "--context-file", str(context), "--provider", "fixture",
               "--model", "fixture:4", "--max-depth", "2", "--trace", str(trace), "-q", *extra,
               env=env)
    assert done.returncode == 0, done.stderr
    return trace


def events(trace: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines() if line]
