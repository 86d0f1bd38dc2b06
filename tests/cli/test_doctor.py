"""``rlm doctor`` and ``rlm run --require-isolation``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlm._sandbox.isolation import ALL_LAYERS
from tests.helpers import rlm_in_process

ROOT = Path(__file__).resolve().parents[2]


def rlm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlm", *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, check=False)


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    """What `rlm doctor --json` reports (one probe sandbox for the module)."""
    done = rlm("doctor", "--json")
    assert done.returncode == 0, done.stderr
    value: dict[str, Any] = json.loads(done.stdout)
    return value


def test_doctor_lists_every_layer_with_a_status_or_a_reason() -> None:
    done = rlm("doctor")
    assert done.returncode == 0, done.stderr
    for layer in ALL_LAYERS:
        assert layer in done.stdout
    assert "layers active" in done.stdout


def test_doctor_json_and_require_isolation(report: dict[str, Any]) -> None:
    assert set(report["layers"]) == set(ALL_LAYERS)
    for status in report["layers"].values():
        assert status == "active" or status.startswith("unavailable: ")
    memory = report["memory"]  # the per-sandbox default and the ceiling over a run's sandboxes
    assert memory["per_sandbox"] == 2 << 30 and memory["ceiling"] == memory["machine"] // 2
    missing = [layer for layer, status in report["layers"].items() if status != "active"]
    done = rlm("doctor", "--require-isolation", "all")
    assert done.returncode == (1 if missing else 0)
    assert rlm_in_process("doctor", "--require-isolation", "nonsense").returncode == 2


def test_run_refuses_an_unknown_layer_and_runs_when_layers_are_there(
    report: dict[str, Any],
) -> None:
    done = rlm_in_process("run", "q", "--provider", "fixture", "--require-isolation", "selinux")
    assert done.returncode == 2 and "unknown isolation layer" in done.stderr
    layers = report["layers"]
    active = ",".join(layer for layer, status in layers.items() if status == "active")
    done = subprocess.run(
        [sys.executable, "-m", "rlm", "run", "What is the magic number?", "--context-file", "-",
         "--provider", "fixture", "--require-isolation", active, "-q"],
        input="filler. The magic number is 4711. more filler.", capture_output=True, text=True,
        timeout=60, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert "4711" in done.stdout
